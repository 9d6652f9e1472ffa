// `lockstep plan presets` and `lockstep plan zoo`: the named networks and the
// published-model profiles the planner ships with.
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/plan/network.h"
#include "lockstep/plan/zoo.h"
#include "tools/plan/commands.h"

namespace lockstep::plan_tool {

int presets_main(int argc, char** argv) {
  CLI::App app{"List the network presets (published figures, not measured here)",
               "lockstep plan presets"};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  fmt::print("{:<22} {:>10} {:>12} {:>12}  {}\n", "preset", "transport", "alpha(us)", "GB/s",
             "notes");
  for (const auto& m : plan::presets())
    for (const auto& [transport, algos] : m.transports) {
      const auto& ab = algos.begin()->second.cost;
      fmt::print("{:<22} {:>10} {:>12.2f} {:>12.3f}  {}\n", m.name, transport, ab.alpha_s * 1e6,
                 1e-9 / ab.beta_s_per_byte, m.description);
    }
  return 0;
}

int zoo_main(int argc, char** argv) {
  CLI::App app{
      "Write the profile of a published model from its layer shapes and a published "
      "single-device throughput",
      "lockstep plan zoo"};
  std::string model, out;
  plan::ZooOptions o;
  app.add_option("model", model, "resnet50 | resnet101 | vgg16")->required();
  app.add_option("--images-per-s", o.images_per_s, "published throughput of one device")
      ->required();
  app.add_option("--batch", o.batch, "batch per device")->capture_default_str();
  app.add_option("--memory-gbps", o.memory_bytes_per_s, "device memory bandwidth (bytes/s)")
      ->capture_default_str();
  app.add_option("--out", out, "profile file to write")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    plan::Profile p = plan::zoo_profile(model, o);
    plan::save_profile(out, p);
    auto s = plan::summarize(p);
    fmt::print(
        "wrote {}: {} gradients, {:.1f} MiB, {:.1f} ms/step ({:.1f} forward, {:.1f} "
        "backward, {:.1f} optimizer)\n",
        out, s.gradient_count, s.gradient_bytes / 1048576.0, s.step_ms, s.forward_ms, s.backward_ms,
        s.optimizer_ms);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "lockstep plan zoo: %s\n", e.what());
    return 2;
  }
}

}  // namespace lockstep::plan_tool
