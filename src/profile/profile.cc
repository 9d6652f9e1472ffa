#include "lockstep/profile/profile.h"

#include <algorithm>
#include <cmath>

#include "lockstep/base/json_fields.h"
#include "lockstep/profile/stats.h"

namespace lockstep::profile {

using lockstep::detail::Fields;
using lockstep::detail::parse_text;
using lockstep::detail::read_file;
using lockstep::detail::write_file;
using nlohmann::json;

int dtype_bytes(std::string_view dtype) {
  if (dtype == "f16" || dtype == "bf16") return 2;
  if (dtype == "f32" || dtype == "i32") return 4;
  if (dtype == "f64" || dtype == "i64") return 8;
  if (dtype == "i8" || dtype == "u8") return 1;
  throw InvalidArgument(fmt::format("unknown dtype '{}' (f16 bf16 f32 f64 i8 u8 i32 i64)", dtype));
}

ProfileSummary summarize(const Profile& p) {
  ProfileSummary s;
  auto median_of = [&](auto field) {
    std::vector<double> v;
    for (const auto& step : p.steps) v.push_back(field(step));
    return detail::median(v);
  };
  s.step_ms = median_of([](const StepTiming& t) { return t.step_ms; });
  s.forward_ms = median_of([](const StepTiming& t) { return t.forward_ms; });
  s.backward_ms = median_of([](const StepTiming& t) { return t.backward_ms; });
  s.sync_ms = median_of([](const StepTiming& t) { return t.sync_ms; });
  s.optimizer_ms = median_of([](const StepTiming& t) { return t.optimizer_ms; });
  s.samples_per_step = median_of([](const StepTiming& t) { return double(t.samples); });
  s.other_ms = std::max(0.0, s.step_ms - s.forward_ms - s.backward_ms - s.sync_ms - s.optimizer_ms);
  std::vector<double> compute;
  for (const auto& step : p.steps) compute.push_back(step.step_ms - step.sync_ms);
  s.compute_ms = detail::median(compute);
  s.compute_sigma_ms = detail::robust_sigma(compute);
  for (const auto& g : p.gradients) s.gradient_bytes += g.bytes;
  s.gradient_count = p.gradients.size();
  return s;
}

namespace {

StepTiming parse_step(const json& j, const std::string& where) {
  Fields f(j, where);
  StepTiming t;
  t.step_ms = f.non_negative("step_ms");
  t.forward_ms = f.non_negative("forward_ms");
  t.backward_ms = f.non_negative("backward_ms");
  t.sync_ms = f.non_negative("sync_ms");
  t.optimizer_ms = f.non_negative("optimizer_ms");
  t.samples = f.integer("samples");
  if (t.samples < 0) f.fail("samples", "an integer >= 0");
  return t;
}

GradientTiming parse_gradient(const json& j, const std::string& where) {
  Fields f(j, where);
  GradientTiming g;
  g.name = f.text("name");
  g.bytes = f.integer("bytes");
  if (g.bytes < 0) f.fail("bytes", "an integer >= 0");
  g.dtype = f.text("dtype");
  dtype_bytes(g.dtype);
  g.ready_ms = f.non_negative("ready_ms");
  if (f.has("shape")) {
    int64_t count = 1;
    for (const json& d : f.array("shape")) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        f.fail("shape", "an array of integers >= 0");
      g.shape.push_back(d.get<int64_t>());
      count *= g.shape.back();
    }
    if (count * dtype_bytes(g.dtype) != g.bytes)
      f.fail("shape",
             fmt::format("dimensions whose product times the dtype's size is bytes ({})", g.bytes));
  }
  return g;
}

}  // namespace

Profile parse_profile(std::string_view text, std::string_view source) {
  json j = parse_text(text, source);
  Fields f(j, std::string(source));
  if (f.text("schema") != kProfileSchema)
    throw InvalidArgument(fmt::format("{}: schema '{}' is not {} (a lockstep profile)", source,
                                      f.text("schema"), kProfileSchema));
  Profile p;
  p.program = f.text_or("program", "");
  p.host = f.text_or("host", "");
  p.created = f.text_or("created", "");
  p.source = f.text_or("source", "recorded");
  p.world_size = static_cast<int>(f.integer("world_size"));
  p.local_size = static_cast<int>(f.integer_or("local_size", p.world_size));
  p.intra_op_threads = static_cast<int>(f.integer_or("intra_op_threads", 1));
  p.backend = f.text_or("backend", "");
  p.overlap = f.flag_or("overlap", false);
  p.fusion_threshold = f.integer_or("fusion_threshold", 0);
  p.warmup_steps = static_cast<int>(f.integer_or("warmup_steps", 0));
  if (p.world_size < 1) f.fail("world_size", "an integer >= 1");
  const json& steps = f.array("steps");
  for (size_t i = 0; i < steps.size(); ++i)
    p.steps.push_back(parse_step(steps[i], fmt::format("{}.steps[{}]", source, i)));
  if (p.steps.empty()) f.fail("steps", "a non-empty array (no step was recorded)");
  const json& grads = f.array("gradients");
  for (size_t i = 0; i < grads.size(); ++i)
    p.gradients.push_back(parse_gradient(grads[i], fmt::format("{}.gradients[{}]", source, i)));
  return p;
}

std::string profile_to_json(const Profile& p) {
  json steps = json::array();
  for (const auto& t : p.steps)
    steps.push_back({{"step_ms", t.step_ms},
                     {"forward_ms", t.forward_ms},
                     {"backward_ms", t.backward_ms},
                     {"sync_ms", t.sync_ms},
                     {"optimizer_ms", t.optimizer_ms},
                     {"samples", t.samples}});
  json grads = json::array();
  for (const auto& g : p.gradients) {
    grads.push_back(
        {{"name", g.name}, {"bytes", g.bytes}, {"dtype", g.dtype}, {"ready_ms", g.ready_ms}});
    if (!g.shape.empty()) grads.back()["shape"] = g.shape;
  }
  ProfileSummary s = summarize(p);
  json j = {{"schema", kProfileSchema},
            {"program", p.program},
            {"host", p.host},
            {"created", p.created},
            {"source", p.source},
            {"world_size", p.world_size},
            {"local_size", p.local_size},
            {"intra_op_threads", p.intra_op_threads},
            {"backend", p.backend},
            {"overlap", p.overlap},
            {"fusion_threshold", p.fusion_threshold},
            {"warmup_steps", p.warmup_steps},
            // Informational: recomputed from the steps whenever the file is read.
            {"summary",
             {{"step_ms", s.step_ms},
              {"forward_ms", s.forward_ms},
              {"backward_ms", s.backward_ms},
              {"sync_ms", s.sync_ms},
              {"optimizer_ms", s.optimizer_ms},
              {"other_ms", s.other_ms},
              {"compute_sigma_ms", s.compute_sigma_ms},
              {"samples_per_step", s.samples_per_step},
              {"gradient_bytes", s.gradient_bytes},
              {"gradient_count", s.gradient_count}}},
            {"steps", steps},
            {"gradients", grads}};
  return j.dump(1) + "\n";
}

Profile load_profile(const std::string& path) {
  return parse_profile(read_file(path, "profile"), path);
}

void save_profile(const std::string& path, const Profile& profile) {
  write_file(path, profile_to_json(profile));
}

}  // namespace lockstep::profile
