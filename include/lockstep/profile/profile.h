// A model profile: what one rank's training step costs, recorded from a
// real run by the torch layer (LOCKSTEP_PROFILE=FILE, `lockstep profile`),
// and the planner's main input. Schema "lockstep.profile/1", described
// field by field in docs/plan.md. Its own layer (lockstep::profile, on base
// alone) so that the runtime that writes it and the planner above the
// runtime that reads it share one definition.
//
// Plain values: copy freely; no thread-safety concerns. Parsing validates
// every field and throws InvalidArgument naming the file and the field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::profile {

inline constexpr std::string_view kProfileSchema = "lockstep.profile/1";

// One recorded step. Phases are contiguous on the training thread:
// forward = end of the previous step() (or zero_grad() for the first) to the
// start of backward, so it includes whatever the loop does between steps
// (data, metrics); backward = start of backward to synchronize(); sync =
// waiting for the gradients' allreduce; optimizer = the wrapped step().
struct StepTiming {
  double step_ms = 0;
  double forward_ms = 0;
  double backward_ms = 0;
  double sync_ms = 0;
  double optimizer_ms = 0;
  int64_t samples = 0;  // drawn from DistributedSampler (or reported) this step
};

// One gradient tensor, in the order DistributedOptimizer registered it (the
// module's parameter order, which is also the order of a non-overlapped
// synchronize()).
struct GradientTiming {
  std::string name;
  int64_t bytes = 0;
  std::string dtype = "f32";  // f16 bf16 f32 f64
  double ready_ms = 0;        // median over steps, from the start of backward
  // The parameter's dimensions (optional in the file: profiles recorded
  // before it have none). PowerSGD's bytes depend on them.
  std::vector<int64_t> shape;
};

struct Profile {
  std::string program;  // what ran (argv[0] and arguments)
  std::string host;
  std::string created;  // UTC, ISO 8601
  std::string source;   // "recorded" or how it was made (e.g. "published: ...")
  int world_size = 1;   // of the recorded run
  int local_size = 1;
  int intra_op_threads = 1;
  std::string backend;   // transport of the recorded run ("" when world_size 1)
  bool overlap = false;  // DistributedOptimizer overlapped backward in the run
  int64_t fusion_threshold = 0;
  int warmup_steps = 0;  // steps skipped before recording
  std::vector<StepTiming> steps;
  std::vector<GradientTiming> gradients;
};

// Medians over the recorded steps, the planner's view of one step.
struct ProfileSummary {
  double step_ms = 0, forward_ms = 0, backward_ms = 0, sync_ms = 0, optimizer_ms = 0;
  double other_ms = 0;          // step - the phases above (never negative)
  double compute_ms = 0;        // step - sync: what a rank spends without the network
  double compute_sigma_ms = 0;  // robust spread of compute_ms across steps (1.4826 x MAD)
  double samples_per_step = 0;
  int64_t gradient_bytes = 0;
  size_t gradient_count = 0;
};

ProfileSummary summarize(const Profile& profile);

// `source` names the input in error messages (usually the path).
Profile parse_profile(std::string_view json_text, std::string_view source);
std::string profile_to_json(const Profile& profile);
Profile load_profile(const std::string& path);
void save_profile(const std::string& path, const Profile& profile);

// Bytes per element of a dtype name used in profiles; throws on unknown names.
int dtype_bytes(std::string_view dtype);

}  // namespace lockstep::profile
