#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockstep/base/error.h"
#include "tools/plan/commands.h"

namespace lockstep::plan_tool {

std::vector<int> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int> out;
  auto number = [&](const std::string& s) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(s, &used);
    } catch (...) {
      used = 0;
    }
    if (used != s.size() || v < 1)
      throw InvalidArgument(
          fmt::format("{} '{}': expected positive integers like 1,2,4 or "
                      "1:1024 (powers of two)",
                      what, text));
    return v;
  };
  if (auto colon = text.find(':'); colon != std::string::npos) {
    int lo = number(text.substr(0, colon)), hi = number(text.substr(colon + 1));
    if (hi < lo) throw InvalidArgument(fmt::format("{} '{}': MIN:MAX with MIN <= MAX", what, text));
    for (long v = lo; v <= hi; v *= 2) out.push_back(static_cast<int>(v));
    return out;
  }
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    out.push_back(number(text.substr(start, comma == std::string::npos ? comma : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string default_cross(const plan::NetworkModel& model) {
  for (const char* t : {"nccl", "mpi", "gloo"})
    if (model.has(t)) return t;
  return "gloo";
}

std::string prediction_header() {
  return fmt::format("{:>6} {:>6} {:>22} {:>10} {:>9} {:>7} {:>9} {:>8} {:>12} {:>6} {:>9}  {}",
                     "nodes", "ranks", "backend", "step(ms)", "comm(ms)", "hidden", "exposed",
                     "strag.", "samples/s", "eff.", "wire(MB)", "bottleneck");
}

std::string prediction_row(const plan::StepPrediction& p) {
  return fmt::format(
      "{:>6} {:>6} {:>22} {:>10.2f} {:>9.2f} {:>6.0f}% {:>9.2f} {:>8.2f} {:>12.0f} "
      "{:>5.1f}% {:>9.3f}  {}",
      p.nodes, p.ranks, p.backend, p.step_ms, p.comm_ms, 100 * p.overlapped_share,
      p.exposed_comm_ms, p.straggler_ms, p.samples_per_s, 100 * p.efficiency, p.wire_bytes / 1e6,
      p.bottleneck);
}

std::string prediction_json(const plan::StepPrediction& p, const std::string& network) {
  nlohmann::json j = {{"nodes", p.nodes},
                      {"ranks", p.ranks},
                      {"network", network},
                      {"backend", p.backend},
                      {"overlap", p.overlap},
                      {"comm_shares_cores", p.comm_shares_cores},
                      {"step_ms", p.step_ms},
                      {"compute_ms", p.compute_ms},
                      {"comm_ms", p.comm_ms},
                      {"overlapped_share", p.overlapped_share},
                      {"exposed_comm_ms", p.exposed_comm_ms},
                      {"straggler_ms", p.straggler_ms},
                      {"samples_per_s", p.samples_per_s},
                      {"efficiency", p.efficiency},
                      {"cycles", p.cycles},
                      {"collectives", p.collectives},
                      {"alpha_ms", p.alpha_ms},
                      {"beta_ms", p.beta_ms},
                      {"gamma_ms", p.gamma_ms},
                      {"copy_ms", p.copy_ms},
                      {"cycle_ms", p.cycle_ms},
                      {"wake_wait_ms", p.wake_wait_ms},
                      {"payload_bytes", p.payload_bytes},
                      {"wire_bytes", p.wire_bytes},
                      {"compress_ms", p.compress_ms},
                      {"largest_algorithm", p.largest_algorithm},
                      {"bottleneck", p.bottleneck}};
  return j.dump();
}

}  // namespace lockstep::plan_tool
