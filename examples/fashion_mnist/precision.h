// `--precision fp32|bf16|fp16` for the main job (docs/mixed-precision.md):
// the autocast region of the forward pass, the loss scaler, and the wire
// format of the gradients; and `--compression
// powersgd:R|onebit|onebit-adam|onebit-lamb`
// with `--compression-warmup N` (docs/parallelism.md, "Gradient
// compression"), the other wire formats. Kept apart from main.cc so the
// training program stays about training.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "lockstep/base/error.h"
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

inline void add_compression_flags(CLI::App& app, std::string& compression, int64_t& warmup) {
  app.add_option("--compression", compression,
                 "gradients on the wire: none, powersgd:R (rank-R factors), onebit (signs with "
                 "error feedback), onebit-adam (1-bit Adam: --optimizer adam; momenta as "
                 "signs after the warm-up) or onebit-lamb (1-bit LAMB: --optimizer lamb)")
      ->check([](const std::string& v) -> std::string {
        if (v == "fp16" || v == "bf16") return "fp16/bf16 wire formats come with --precision";
        try {
          torch::DistributedOptimizerOptions probe;
          torch::set_compression(probe, v);
        } catch (const std::exception& e) {
          return e.what();
        }
        return "";
      })
      ->capture_default_str()
      ->group("Recipe");
  app.add_option("--compression-warmup", warmup,
                 "optimizer steps of uncompressed allreduce before --compression starts (1-bit "
                 "Adam and LAMB: their variance freezes then; at least 1)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group("Recipe");
}

// One training step's precision machinery.
class StepPrecision {
 public:
  StepPrecision(const std::string& name, const std::string& compression, int64_t warmup)
      : precision_(torch::parse_precision(name)),
        scaler_({.enabled = precision_ == torch::Precision::kFp16}),
        compression_(compression),
        warmup_(warmup) {}

  // fp16 gradients travel as IEEE half; --compression picks another format.
  torch::DistributedOptimizerOptions optimizer_options() const {
    torch::DistributedOptimizerOptions options;
    if (precision_ == torch::Precision::kFp16) options.compression = torch::Compression::kFp16;
    if (compression_ == "none") return options;
    if (precision_ == torch::Precision::kFp16)
      throw InvalidArgument(
          "--precision fp16 sends fp16 gradients; it does not combine with "
          "--compression " +
          compression_);
    torch::set_compression(options, compression_);
    options.powersgd.warmup_steps = warmup_;
    options.onebit.warmup_steps = warmup_;
    options.onebit_adam.warmup_steps = warmup_;
    options.onebit_lamb.warmup_steps = warmup_;
    return options;
  }
  torch::Precision precision() const { return precision_; }
  torch::GradScaler& scaler() { return scaler_; }

 private:
  torch::Precision precision_;
  torch::GradScaler scaler_;
  std::string compression_;
  int64_t warmup_;
};

}  // namespace lockstep::examples
