// Note [Compression closed forms]
// Bytes per rank per step for L f32 gradient values on N ranks:
//   none        one allreduce of 4L: payload 4L, wire 2(N-1)/N 4L
//   fp16, bf16  the same at 2L
//   powersgd:R  allreduce of 4 (sum n r over compressed + numel of the rest),
//               then allreduce of 4 sum m r: the factor n m / ((n + m) r) on
//               each compressed matrix
//   1-bit       L padded to L' (multiple of 8N); row = L'/(8N) + 4 bytes;
//               alltoall of N rows (wire (N-1) rows), allgather of one row
//               (wire (N-1) rows): payload (N+1) row, wire 2(N-1) row, so
//               about 32x less than 2(N-1)/N 4L
// 1-bit Adam and 1-bit LAMB send, after their warm-up, the momentum (L
// values, one per gradient value) through the same compressed allreduce:
// the 1-bit row above, byte for byte; their warm-up steps are none's.
// The runtime's PowerSGD/OneBit/OneBitAdam/OneBitLamb call these functions
// for their own sizes, and the wire bytes follow lockstep/comm/traffic.h's
// rules.
//
// Note [Compression compute]
// Modelled, not measured: each scheme's tensor operations counted as passes
// over the step's gradient bytes (reads and writes), charged at the host's
// copy speed (HostModel::copy_s_per_byte). At the ranks of a data-parallel
// job the matrix products are thin (r columns), so memory traffic, not
// arithmetic, bounds them.
//   powersgd  per compressed matrix of n m values: error added (3), M Q (1),
//             M^T P (1), P Q^T (1), new error (3), result copied (2): 11
//   1-bit     flatten and pad (4), error added (3), norm (1), signs and new
//             worker error (6), packing (5), N rows unpacked and summed (8),
//             server error (2), allgathered rows unpacked (6), copied back
//             (2): 37 passes over 4L; 1-bit Adam and LAMB are charged the
//             same (their optimizer arithmetic is the step's, not the
//             compression's)
#include "lockstep/policy/compression.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <numeric>

#include "lockstep/base/error.h"
#include "lockstep/policy/policies.h"

namespace lockstep::policy {

namespace {

constexpr int64_t kScaleBytes = 4;  // the f32 scale after each row of signs
constexpr double kPowerSGDPasses = 11;
constexpr double kOneBitPasses = 37;

int64_t numel(std::span<const int64_t> shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

StepCollective allreduce(int64_t bytes, int n) {
  return {"allreduce", bytes, allreduce_wire_bytes(bytes, n)};
}

}  // namespace

bool CompressionSpec::replaces_allreduce() const {
  return kind == CompressionKind::kPowerSGD || kind == CompressionKind::kOneBit ||
         kind == CompressionKind::kOneBitAdam || kind == CompressionKind::kOneBitLamb;
}

std::string CompressionSpec::name() const {
  switch (kind) {
    case CompressionKind::kNone: return "none";
    case CompressionKind::kFp16: return "fp16";
    case CompressionKind::kBf16: return "bf16";
    case CompressionKind::kPowerSGD: return fmt::format("powersgd:{}", rank);
    case CompressionKind::kOneBit: return "onebit";
    case CompressionKind::kOneBitAdam: return "onebit-adam";
    case CompressionKind::kOneBitLamb: return "onebit-lamb";
  }
  return "?";
}

CompressionSpec parse_compression(std::string_view text) {
  if (text == "none") return {};
  if (text == "fp16") return {CompressionKind::kFp16};
  if (text == "bf16") return {CompressionKind::kBf16};
  if (text == "onebit") return {CompressionKind::kOneBit};
  if (text == "onebit-adam") return {CompressionKind::kOneBitAdam};
  if (text == "onebit-lamb") return {CompressionKind::kOneBitLamb};
  if (text.starts_with("powersgd:")) {
    const std::string_view r = text.substr(9);
    int rank = 0;
    const auto [end, ec] = std::from_chars(r.data(), r.data() + r.size(), rank);
    if (ec != std::errc() || end != r.data() + r.size() || rank < 1)
      throw InvalidArgument(
          fmt::format("--compression {}: the PowerSGD rank R must be an integer >= 1", text));
    return {CompressionKind::kPowerSGD, rank};
  }
  throw InvalidArgument(fmt::format(
      "--compression {}: use none, fp16, bf16, powersgd:R (R >= 1), onebit, onebit-adam or "
      "onebit-lamb",
      text));
}

int64_t onebit_padded_length(int64_t values, int ranks) {
  if (values < 0 || ranks < 1)
    throw InvalidArgument(fmt::format("1-bit: {} values on {} ranks", values, ranks));
  const int64_t unit = 8 * static_cast<int64_t>(ranks);
  return (values + unit - 1) / unit * unit;
}

int64_t onebit_row_bytes(int64_t values, int ranks) {
  return onebit_padded_length(values, ranks) / (8 * static_cast<int64_t>(ranks)) + kScaleBytes;
}

int64_t onebit_payload_bytes(int64_t values, int ranks) {
  return (ranks + 1) * onebit_row_bytes(values, ranks);
}

PowerSGDMatrix powersgd_matrix(std::span<const int64_t> shape, int rank, double min_rate) {
  PowerSGDMatrix s;
  if (shape.size() < 2) return s;
  s.n = shape[0];
  s.m = s.n == 0 ? 0 : numel(shape) / s.n;
  s.r = std::min<int64_t>({rank, s.n, s.m});
  s.compressed = s.r > 0 && static_cast<double>(s.n) * static_cast<double>(s.m) >=
                                min_rate * static_cast<double>((s.n + s.m) * s.r);
  return s;
}

int64_t powersgd_wire_elements(std::span<const int64_t> shape, int rank, double min_rate) {
  const PowerSGDMatrix s = powersgd_matrix(shape, rank, min_rate);
  return s.compressed ? (s.n + s.m) * s.r : numel(shape);
}

std::vector<StepCollective> compressed_step(const CompressionSpec& spec,
                                            const std::vector<std::vector<int64_t>>& shapes,
                                            int ranks) {
  if (ranks <= 1) return {};
  int64_t values = 0;
  for (const auto& s : shapes) values += numel(s);
  switch (spec.kind) {
    case CompressionKind::kNone: return {allreduce(4 * values, ranks)};
    case CompressionKind::kFp16:
    case CompressionKind::kBf16: return {allreduce(2 * values, ranks)};
    case CompressionKind::kPowerSGD: {
      int64_t first = 0, second = 0;
      for (const auto& s : shapes) {
        const PowerSGDMatrix m = powersgd_matrix(s, spec.rank, kPowerSGDMinCompressionRate);
        first += m.compressed ? m.n * m.r : numel(s);
        second += m.compressed ? m.m * m.r : 0;
      }
      std::vector<StepCollective> out{allreduce(4 * first, ranks)};
      if (second > 0) out.push_back(allreduce(4 * second, ranks));
      return out;
    }
    case CompressionKind::kOneBit:
    case CompressionKind::kOneBitAdam:
    case CompressionKind::kOneBitLamb: {
      const int64_t row = onebit_row_bytes(values, ranks);
      return {{"alltoall", ranks * row, (ranks - 1) * row}, {"allgather", row, (ranks - 1) * row}};
    }
  }
  return {};
}

double compression_pass_bytes(const CompressionSpec& spec,
                              const std::vector<std::vector<int64_t>>& shapes) {
  double bytes = 0;
  if (spec.kind == CompressionKind::kPowerSGD) {
    for (const auto& s : shapes)
      if (powersgd_matrix(s, spec.rank, kPowerSGDMinCompressionRate).compressed)
        bytes += kPowerSGDPasses * 4.0 * static_cast<double>(numel(s));
  } else if (spec.kind == CompressionKind::kOneBit || spec.kind == CompressionKind::kOneBitAdam ||
             spec.kind == CompressionKind::kOneBitLamb) {
    for (const auto& s : shapes) bytes += kOneBitPasses * 4.0 * static_cast<double>(numel(s));
  }
  return bytes;
}

}  // namespace lockstep::policy
