// The communication-free parts of pipelining: schedules and partitions.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "lockstep/base/error.h"
#include "lockstep/parallel/pipeline.h"

namespace lockstep::parallel {

Schedule parse_schedule(const std::string& name) {
  if (name == "gpipe") return Schedule::kGPipe;
  if (name == "1f1b") return Schedule::k1F1B;
  throw InvalidArgument(fmt::format("pipeline schedule '{}' is not one of gpipe, 1f1b", name));
}

std::vector<PipelineAction> pipeline_schedule(Schedule schedule, int stage, int stages, int m) {
  if (stages < 1 || stage < 0 || stage >= stages || m < 1)
    throw InvalidArgument(
        fmt::format("pipeline_schedule: stage {} of {} with {} micro-batches", stage, stages, m));
  std::vector<PipelineAction> out;
  // GPipe: every forward, then every backward. 1F1B: stage s runs p-s-1
  // warm-up forwards (so the last stage starts backward at once), then
  // alternates one forward and one backward, then drains the backwards.
  const int warmup = schedule == Schedule::kGPipe ? m : std::min(stages - stage - 1, m);
  for (int i = 0; i < warmup; ++i) out.push_back({true, i});
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back({true, warmup + i});
    out.push_back({false, i});
  }
  for (int i = m - warmup; i < m; ++i) out.push_back({false, i});
  return out;
}

std::vector<int> balance_by_parameters(const std::vector<int64_t>& layer_params, int stages) {
  const int n = static_cast<int>(layer_params.size());
  if (stages < 1 || n < stages)
    throw InvalidArgument(
        fmt::format("pipeline: {} layer(s) cannot fill {} stage(s); each stage "
                    "needs at least one layer",
                    n, stages));
  std::vector<int64_t> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + layer_params[i];
  // best[k][i]: smallest possible largest part when the first i layers form k parts.
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(stages + 1, std::vector<int64_t>(n + 1, kInf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (int i = k; i <= n - (stages - k); ++i)
      for (int j = k - 1; j < i; ++j) {
        if (best[k - 1][j] == kInf) continue;
        const int64_t cost = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (cost < best[k][i]) {  // strict: ties keep the earliest cut
          best[k][i] = cost;
          cut[k][i] = j;
        }
      }
  std::vector<int> sizes(stages);
  for (int k = stages, i = n; k > 0; --k) {
    sizes[k - 1] = i - cut[k][i];
    i = cut[k][i];
  }
  return sizes;
}

}  // namespace lockstep::parallel
