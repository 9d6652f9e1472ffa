// Gradient compression as the planner and the runtime both see it: the
// `--compression` names, and the closed forms of what a compressed step puts
// on the wire. The torch layer's PowerSGD, OneBit, OneBitAdam and OneBitLamb
// size their collectives with these same functions (no hand copy), so the planner's
// bytes are the runtime's by construction; tests compare both with the
// traffic counters (Note [Compression closed forms] in compression.cc).
//
// Pure functions on plain values; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::policy {

enum class CompressionKind {
  kNone,
  kFp16,        // IEEE half on the wire, per gradient
  kBf16,        // bfloat16 on the wire, per gradient
  kPowerSGD,    // rank-R factors, two allreduces per step
  kOneBit,      // signs of the error-compensated gradient: alltoall + allgather
  kOneBitAdam,  // DeepSpeed's 1-bit Adam: after warm-up, signs of the momentum
  kOneBitLamb,  // DeepSpeed's 1-bit LAMB: the same bytes as 1-bit Adam
};

struct CompressionSpec {
  CompressionKind kind = CompressionKind::kNone;
  int rank = 0;  // PowerSGD's R
  // The whole step's reduction is done by the scheme at synchronize()
  // (or step()), not one allreduce per gradient during backward.
  bool replaces_allreduce() const;
  std::string name() const;  // as parse_compression reads it
};

// "none", "fp16", "bf16", "powersgd:R" (R >= 1), "onebit", "onebit-adam",
// "onebit-lamb".
// Throws InvalidArgument naming the text and the accepted forms.
CompressionSpec parse_compression(std::string_view text);

// 1-bit: the L values of a step, padded to a multiple of 8 x ranks so that
// every rank's chunk packs into whole bytes.
int64_t onebit_padded_length(int64_t values, int ranks);
// One row of the alltoall and of the allgather: the signs of one chunk
// (L/(8 ranks) bytes) and its f32 scale.
int64_t onebit_row_bytes(int64_t values, int ranks);
// Bytes one rank hands to the two collectives of a compressed step:
// a row for every rank (alltoall) and its own row (allgather).
int64_t onebit_payload_bytes(int64_t values, int ranks);

// PowerSGD's view of one gradient: n x m (first dimension by the rest), the
// rank r it really uses (at most min(n, m)) and whether it is compressed
// (n m >= min_rate (n + m) r; vectors never are).
struct PowerSGDMatrix {
  int64_t n = 0, m = 0, r = 0;
  bool compressed = false;
};
PowerSGDMatrix powersgd_matrix(std::span<const int64_t> shape, int rank, double min_rate);
// Values one gradient sends per compressed step: (n + m) r, or its numel().
int64_t powersgd_wire_elements(std::span<const int64_t> shape, int rank, double min_rate);

// One collective of a compressed step, in the order the runtime runs them
// (each waits for the one before).
struct StepCollective {
  std::string op;             // allreduce | alltoall | allgather
  int64_t payload_bytes = 0;  // this rank hands over (lockstep/comm/traffic.h)
  int64_t wire_bytes = 0;     // it sends under the bandwidth-optimal algorithm
};

// What one step of f32 gradients of `shapes` puts on the wire with `spec`
// among `ranks` ranks, after any warm-up (warm-up steps are uncompressed):
//   none    one allreduce of all gradients (4 bytes a value)
//   fp16/bf16  the same at 2 bytes a value
//   powersgd:R  allreduce of the P factors and the uncompressed gradients,
//               then allreduce of the Q factors (PowerSGD's default
//               min_compression_rate 2)
//   onebit, onebit-adam, onebit-lamb  alltoall of `ranks` rows, allgather
//               of one (1-bit Adam and LAMB: their momentum, after warm-up)
// Empty at one rank.
std::vector<StepCollective> compressed_step(const CompressionSpec& spec,
                                            const std::vector<std::vector<int64_t>>& shapes,
                                            int ranks);

// Modelled (not measured) compute of the scheme on the training thread per
// step, as bytes of memory traffic at the host's copy speed: the scheme's
// elementwise passes and thin matrix products are memory-bound
// (Note [Compression compute] in compression.cc). 0 for none.
double compression_pass_bytes(const CompressionSpec& spec,
                              const std::vector<std::vector<int64_t>>& shapes);

// fp16 and bf16 are casts of each gradient on the wire; the others replace
// the allreduce (replaces_allreduce()) or send the gradient as it is.
inline constexpr bool casts_on_wire(CompressionKind kind) {
  return kind == CompressionKind::kFp16 || kind == CompressionKind::kBf16;
}
// Bytes per value of a gradient with `element_bytes` per value on the wire
// of a per-gradient allreduce: a cast sends every floating gradient at 2
// bytes (f64 and f32 are narrowed, f16/bf16 stay 2 bytes wide).
inline constexpr int wire_element_bytes(CompressionKind kind, int element_bytes, bool floating) {
  return casts_on_wire(kind) && floating ? 2 : element_bytes;
}
// Whether an averaged allreduce divides after the sum, as a 1/size
// postscale pass over the result: yes for an uncompressed gradient; a cast
// one is divided before the cast instead (so the half-precision sum stays in
// range) and needs no pass after. The torch layer's allreduce scheme and the
// planner's copy costs both ask this.
inline constexpr bool scales_after_reduce(CompressionKind kind, bool average) {
  return average && !casts_on_wire(kind);
}

inline constexpr double kPowerSGDMinCompressionRate = 2.0;  // PowerSGDOptions' default

}  // namespace lockstep::policy
