// The elastic-mode protocol between `lockstep run` and its workers: what the
// launcher writes to the job's store for each generation of the world, and
// how workers read it. Plain text of integers only: nothing read from the
// store is ever deserialised into objects (docs/elastic.md).
#pragma once

#include <string>

namespace lockstep::rendezvous::elastic {

// "<g>": the newest complete generation (written after its members' keys).
inline constexpr const char* kLatestKey = "elastic/latest";
// "<reason>": written when the launcher stops the job.
inline constexpr const char* kFailedKey = "elastic/failed";
// elastic/gen/<g>/<worker id> = Assignment::encode().
std::string member_key(int generation, const std::string& worker_id);

// One generation's place of one worker.
struct Assignment {
  int rank = 0, size = 1, local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
  std::string encode() const;  // "rank size local_rank local_size cross_rank cross_size"
  // Throws InvalidArgument naming the text when it is not six integers with
  // each index inside its size.
  static Assignment decode(const std::string& text);
};

// Throws InvalidArgument unless `text` is a non-negative decimal integer.
int parse_generation(const std::string& text);

}  // namespace lockstep::rendezvous::elastic
