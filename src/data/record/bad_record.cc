#include "lockstep/data/bad_record.h"

#include <fmt/format.h>

namespace lockstep::data {
namespace {

std::string_view advice(Problem problem) {
  switch (problem) {
    case Problem::kBadExample:
      return "check that the shard holds tf.train.Example records with the expected "
             "features, or set bad_data=skip to skip such records";
    case Problem::kUndecodable:
      return "re-encode or remove the image at its source and re-convert, or set "
             "bad_data=skip to skip such records";
    case Problem::kIndexMismatch:
      return "the shard was truncated, appended to or replaced after it was indexed: re-create "
             "it with 'lockstep convert' (or its index with 'lockstep convert index'), or set "
             "bad_data=skip to skip the records it lacks";
    default:
      return "the shard is corrupt or truncated: re-create it with 'lockstep convert', or "
             "set bad_data=skip to skip such records";
  }
}

}  // namespace

std::string_view problem_name(Problem problem) {
  switch (problem) {
    case Problem::kNone: return "ok";
    case Problem::kTruncatedHeader: return "truncated record header";
    case Problem::kLengthCrc: return "length CRC mismatch";
    case Problem::kTruncatedPayload: return "truncated record payload";
    case Problem::kPayloadCrc: return "payload CRC mismatch";
    case Problem::kBadExample: return "bad tf.train.Example";
    case Problem::kUndecodable: return "undecodable image";
    case Problem::kIndexMismatch: return "shard does not match its index";
  }
  return "unknown problem";
}

BadRecord::BadRecord(Problem problem, std::string file, uint64_t record, uint64_t offset,
                     std::string_view detail)
    : Error(fmt::format("{}: record {} at byte offset {}: {}{}{}; {}", file, record, offset,
                        problem_name(problem), detail.empty() ? "" : ": ", detail,
                        advice(problem))),
      problem_(problem),
      file_(std::move(file)),
      record_(record),
      offset_(offset) {}

}  // namespace lockstep::data
