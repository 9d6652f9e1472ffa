#include "tools/plan/layouts_format.h"

#include <fmt/format.h>

namespace lockstep::plan_tool {

std::string layout_header() {
  return fmt::format("{:>7} {:>7} {:>7} {:>11} {:>9} {:>9} {:>10} {:>7} {:>7}  {}", "layout",
                     "workers", "threads", "compute(ms)", "comm(ms)", "step(ms)", "samples/s",
                     "vs best", "overlap", "bottleneck");
}

std::string layout_row(const plan::LayoutPrediction& p) {
  const plan::StepPrediction& s = p.step;
  return fmt::format("{:>7} {:>7} {:>7} {:>11.2f} {:>9.2f} {:>9.2f} {:>10.0f} {:>6.3f}x {:>7}  {}",
                     p.layout.name(), p.layout.workers, p.layout.threads, s.compute_ms, s.comm_ms,
                     s.step_ms, s.samples_per_s, p.ratio_to_best, s.overlap ? "on" : "off",
                     s.bottleneck);
}

nlohmann::json layout_json(const plan::LayoutPrediction& p, const plan::ThreadScaling& scaling,
                           bool recommended) {
  const plan::StepPrediction& s = p.step;
  return {{"kind", "plan-layout"},
          {"layout", p.layout.name()},
          {"workers", p.layout.workers},
          {"threads", p.layout.threads},
          {"recommended", recommended},
          {"compute_scale", p.compute_scale},
          {"compute_ms", s.compute_ms},
          {"comm_ms", s.comm_ms},
          {"exposed_comm_ms", s.exposed_comm_ms},
          {"step_ms", s.step_ms},
          {"samples_per_s", s.samples_per_s},
          {"ratio_to_best", p.ratio_to_best},
          {"overlap", s.overlap},
          {"backend", s.backend},
          {"largest_algorithm", s.largest_algorithm},
          {"bottleneck", s.bottleneck},
          {"serial_fraction", scaling.serial_fraction},
          {"contention", scaling.contention},
          {"scaling_source", scaling.source}};
}

std::string describe_scaling(const plan::ThreadScaling& scaling) {
  return fmt::format("serial fraction {:.3f}{}, contention {:.3f} per extra worker ({})",
                     scaling.serial_fraction,
                     scaling.serial_fraction > 1 ? " (> 1: more threads were slower)" : "",
                     scaling.contention, scaling.source);
}

}  // namespace lockstep::plan_tool
