#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockstep/base/knobs.h"
#include "lockstep/comm/transports.h"
#include "lockstep/policy/shm_algorithm.h"
#include "tools/lockstep/commands.h"

namespace lockstep::cli {
namespace {

// LOCKSTEP_BACKEND's choices in this build: the transport registry's.
std::string built_backends() {
  std::string out = "auto";
  for (std::string_view name : comm::transport_names()) out += fmt::format("|{}", name);
  return out;
}

// The shm allreduce algorithm per size for `ranks` ranks, as the transport
// would run it under the current knobs (policy::shm_allreduce_choice).
void print_shm_algorithms(const std::vector<int>& ranks, bool json) {
  const policy::ShmPolicy policy = policy::ShmPolicy::from_knobs();
  const std::vector<int64_t> sizes = {64,        1 << 10, 4 << 10, 16 << 10, 64 << 10,
                                      256 << 10, 1 << 20, 4 << 20, 64 << 20};
  if (!json) {
    fmt::print("\n# shm allreduce algorithm (f32) by ranks and size, under these knobs\n{:>6}",
               "ranks");
    for (int64_t b : sizes)
      fmt::print(" {:>22}", b >= (1 << 20) ? fmt::format("{}MiB", b >> 20)
                            : b >= 1024    ? fmt::format("{}KiB", b >> 10)
                                           : fmt::format("{}B", b));
    fmt::print("\n");
  }
  for (int n : ranks) {
    if (!json) fmt::print("{:>6}", n);
    for (int64_t b : sizes) {
      std::string name = policy::shm_allreduce_choice(policy, n, b, 4).name();
      if (json)
        fmt::print("{}\n",
                   nlohmann::json{{"shm_allreduce", name}, {"ranks", n}, {"bytes", b}}.dump());
      else
        fmt::print(" {:>22}", name);
    }
    if (!json) fmt::print("\n");
  }
}

std::vector<int> rank_counts(int np) {
  if (np > 0) return {np};
  const int cores = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  std::vector<int> out;
  for (int n = 2; n < cores; n *= 2) out.push_back(n);
  out.push_back(std::max(2, cores));
  return out;
}

}  // namespace

int config_main(int argc, char** argv) {
  CLI::App app{"Print every LOCKSTEP_* knob: name, current value, default, meaning.",
               "lockstep config"};
  bool json = false;
  int np = 0;
  app.add_flag("--json", json, "one JSON object per knob (then per shm algorithm row)");
  app.add_option("--np", np,
                 "ranks for the shm algorithm table (default: 2, 4, ... up to this host's cores)")
      ->check(CLI::Range(2, 1 << 16));
  CLI11_PARSE(app, argc, argv);
  for (const Knob& k : all_knobs()) {
    std::string name(k.name);
    bool set = knob_is_set(name);
    std::string value = knob_string(name);
    std::string choices(k.choices);
    if (name == "LOCKSTEP_BACKEND") choices = built_backends();
    if (json) {
      nlohmann::json j = {{"name", name},
                          {"value", value},
                          {"default", std::string(k.default_value)},
                          {"help", std::string(k.help)},
                          {"set", set},
                          {"choices", choices},
                          {"set_by_launcher", k.owner == kLauncher}};
      fmt::print("{}\n", j.dump());
    } else {
      fmt::print("{:<28} {:<10} {}{}{}\n", name, value.empty() ? "''" : value,
                 choices.empty() ? "" : fmt::format("[{}] ", choices), k.help,
                 set ? "" : " [default]");
    }
  }
  print_shm_algorithms(rank_counts(np), json);
  return 0;
}

}  // namespace lockstep::cli
