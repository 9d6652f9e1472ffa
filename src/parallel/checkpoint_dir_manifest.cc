// The names, the rank assignment and the manifest of checkpoint directories
// (Note [Checkpoint directory layout] in lockstep/parallel/checkpoint_dir.h).
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/torch/safetensors.h"
#include "parallel/checkpoint_dir_impl.h"

#ifndef LOCKSTEP_VERSION_STRING
#define LOCKSTEP_VERSION_STRING ""
#endif

namespace lockstep::parallel::detail::ckdir {
namespace {

using nlohmann::json;

std::string dtype_name(::torch::ScalarType dtype, const std::string& name) {
  auto probe = ::torch::empty({0}, ::torch::TensorOptions().dtype(dtype));
  return std::string(safetensors_dtype_name(lockstep::torch::safetensors_dtype_of(probe, name)));
}

::torch::ScalarType dtype_of(const std::string& text, const std::string& path) {
  auto dtype = safetensors_dtype_from_name(text);
  if (!dtype) throw Error(fmt::format("checkpoint manifest {}: unknown dtype '{}'", path, text));
  return lockstep::torch::scalar_type_of(*dtype);
}

json optimizer_json(const OptimizerInfo& info) {
  json groups = json::array();
  for (const auto& g : info.groups)
    groups.push_back({{"params", g.params}, {"lr", g.lr}, {"options", g.options}});
  json state = json::object();
  for (const auto& [param, slots] : info.state) {
    json list = json::array();
    for (const auto& s : slots) list.push_back({{"key", s.key}, {"kind", s.kind}});
    state[param] = list;
  }
  return {{"type", info.type}, {"param_groups", groups}, {"state", state}};
}

OptimizerInfo parse_optimizer(const json& j) {
  OptimizerInfo info;
  info.type = j.at("type").get<std::string>();
  for (const auto& g : j.at("param_groups"))
    info.groups.push_back({g.at("params").get<std::vector<std::string>>(), g.at("lr").get<double>(),
                           g.at("options").get<std::string>()});
  for (const auto& [param, slots] : j.at("state").items())
    for (const auto& s : slots)
      info.state[param].push_back(
          {s.at("key").get<std::string>(), s.at("kind").get<std::string>()});
  return info;
}

}  // namespace

std::string step_dir_name(int64_t step) { return fmt::format("step-{:08d}", step); }

std::string file_name(Part part, int rank, int world_size) {
  return fmt::format("{}-{:05d}-of-{:05d}.safetensors",
                     part == Part::kModel ? "model" : "optimizer", rank + 1, world_size);
}

void assign_ranks(std::vector<Entry>& entries, int world_size) {
  LOCKSTEP_DCHECK(world_size >= 1);
  std::vector<size_t> order(entries.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (entries[a].bytes != entries[b].bytes) return entries[a].bytes > entries[b].bytes;
    return entries[a].name < entries[b].name;
  });
  // Model and optimizer files are balanced apart: each rank writes one of each.
  std::vector<uint64_t> load[2] = {std::vector<uint64_t>(world_size),
                                   std::vector<uint64_t>(world_size)};
  for (size_t i : order) {
    auto& l = load[entries[i].part == Part::kModel ? 0 : 1];
    const int r = static_cast<int>(std::min_element(l.begin(), l.end()) - l.begin());
    entries[i].rank = r;
    l[r] += entries[i].bytes;
  }
}

std::string manifest_json(const Manifest& m) {
  json tensors = json::array();
  for (const auto& e : m.tensors)
    tensors.push_back({{"name", e.name},
                       {"part", e.part == Part::kModel ? "model" : "optimizer"},
                       {"dtype", dtype_name(e.dtype, e.name)},
                       {"shape", e.shape},
                       {"file", file_name(e.part, e.rank, m.world_size)}});
  json j = {{"format", "lockstep checkpoint directory"},
            {"format_version", m.format_version},
            {"lockstep_version", std::string(LOCKSTEP_VERSION_STRING)},
            {"world_size", m.world_size},
            {"step", m.progress.step},
            {"epoch", m.progress.epoch},
            {"sampler", m.progress.sampler},
            {"user", m.progress.user},
            {"rng", m.rng},
            {"tensors", tensors},
            {"optimizer", optimizer_json(m.optimizer)}};
  return j.dump(1) + "\n";
}

Manifest parse_manifest(const std::string& text, const std::string& path) {
  Manifest m;
  try {
    const json j = json::parse(text);
    m.format_version = j.at("format_version").get<int64_t>();
    if (m.format_version != kFormatVersion)
      throw Error(
          fmt::format("checkpoint manifest {}: format version {} is not {} (written by "
                      "another lockstep release)",
                      path, m.format_version, kFormatVersion));
    m.lockstep_version = j.at("lockstep_version").get<std::string>();
    m.world_size = j.at("world_size").get<int>();
    m.progress = {.epoch = j.at("epoch").get<int64_t>(),
                  .step = j.at("step").get<int64_t>(),
                  .sampler = j.at("sampler").get<std::string>(),
                  .user = j.at("user").get<std::string>()};
    m.rng = j.at("rng").get<std::vector<std::string>>();
    for (const auto& t : j.at("tensors")) {
      Entry e{.name = t.at("name").get<std::string>(),
              .part = t.at("part").get<std::string>() == "model" ? Part::kModel : Part::kOptimizer,
              .dtype = dtype_of(t.at("dtype").get<std::string>(), path),
              .shape = t.at("shape").get<std::vector<int64_t>>()};
      const std::string file = t.at("file").get<std::string>();
      for (int r = 0; r < m.world_size && e.rank < 0; ++r)
        if (file == file_name(e.part, r, m.world_size)) e.rank = r;
      if (e.rank < 0)
        throw Error(
            fmt::format("checkpoint manifest {}: tensor '{}' names file '{}', which is "
                        "not one of the {} ranks' files",
                        path, e.name, file, m.world_size));
      m.tensors.push_back(std::move(e));
    }
    m.optimizer = parse_optimizer(j.at("optimizer"));
  } catch (const json::exception& e) {
    throw Error(
        fmt::format("checkpoint manifest {} is damaged ({}); load an older step "
                    "directory or remove this one",
                    path, e.what()));
  }
  if (m.world_size < 1 || static_cast<int>(m.rng.size()) != m.world_size)
    throw Error(fmt::format("checkpoint manifest {}: world size {} with {} RNG states", path,
                            m.world_size, m.rng.size()));
  return m;
}

std::string index_json(const Manifest& m) {
  json weight_map = json::object();
  uint64_t total = 0;
  for (const auto& e : m.tensors) {
    if (e.part != Part::kModel) continue;
    weight_map[e.name] = file_name(e.part, e.rank, m.world_size);
    total += e.bytes;
  }
  json j = {{"metadata",
             {{"total_size", total}, {"format", "pt"}, {"step", std::to_string(m.progress.step)}}},
            {"weight_map", weight_map}};
  return j.dump(1) + "\n";
}

std::string to_hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

std::string from_hex(const std::string& hex, const std::string& what) {
  auto digit = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw Error(fmt::format("{}: '{}' is not a hex digit", what, c));
  };
  if (hex.size() % 2 != 0) throw Error(fmt::format("{}: odd number of hex digits", what));
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<char>(digit(hex[2 * i]) * 16 + digit(hex[2 * i + 1]));
  return out;
}

}  // namespace lockstep::parallel::detail::ckdir
