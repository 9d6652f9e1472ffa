// The one error type for bad input data, and the policy for handling it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lockstep/base/error.h"

namespace lockstep::data {

enum class Problem {
  kNone,
  kTruncatedHeader,   // file ends inside the 12-byte length header
  kLengthCrc,         // masked CRC of the length bytes does not match
  kTruncatedPayload,  // file ends inside the payload or its CRC
  kPayloadCrc,        // masked CRC of the payload does not match
  kBadExample,        // payload is not a tf.train.Example or lacks a needed feature
  kUndecodable,       // image bytes libjpeg/libpng cannot decode, or wrong size
  kIndexMismatch,     // the shard disagrees with its index: it ends before an indexed
                      // record (cut at a record boundary), holds records the index
                      // does not list, or a record starts elsewhere than indexed
};

std::string_view problem_name(Problem problem);

// Thrown for a bad record. The message names the file, the record index in
// that file and its byte offset, what is wrong and what to do.
class BadRecord : public Error {
 public:
  BadRecord(Problem problem, std::string file, uint64_t record, uint64_t offset,
            std::string_view detail);
  Problem problem() const { return problem_; }
  const std::string& file() const { return file_; }
  uint64_t record() const { return record_; }
  uint64_t offset() const { return offset_; }

 private:
  Problem problem_;
  std::string file_;
  uint64_t record_;
  uint64_t offset_;
};

// kThrow (the default) raises BadRecord; kSkip drops the record, counts it and
// reports the count and the first reasons at the end of each epoch.
enum class BadDataPolicy { kThrow, kSkip };

}  // namespace lockstep::data
