// `--precision fp32|bf16|fp16` for the main job (docs/mixed-precision.md):
// the autocast region of the forward pass, the loss scaler, and the wire
// format of the gradients. Kept apart from main.cc so the training program
// stays about training.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "lockstep/torch/torch.h"

namespace lockstep::examples {

inline void add_precision_flag(CLI::App& app, std::string& precision) {
  app.add_option("--precision", precision,
                 "fp32, bf16 (CPU autocast) or fp16 (loss-scaled fp16 gradients; CPUs "
                 "compute in fp32)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str()
      ->group("Recipe");
}

// One training step's precision machinery.
class StepPrecision {
 public:
  explicit StepPrecision(const std::string& name)
      : precision_(torch::parse_precision(name)),
        scaler_({.enabled = precision_ == torch::Precision::kFp16}) {}

  // fp16 gradients travel as IEEE half; the others as they are.
  torch::DistributedOptimizerOptions optimizer_options() const {
    torch::DistributedOptimizerOptions options;
    if (precision_ == torch::Precision::kFp16) options.compression = torch::Compression::kFp16;
    return options;
  }
  torch::Precision precision() const { return precision_; }
  torch::GradScaler& scaler() { return scaler_; }

 private:
  torch::Precision precision_;
  torch::GradScaler scaler_;
};

}  // namespace lockstep::examples
