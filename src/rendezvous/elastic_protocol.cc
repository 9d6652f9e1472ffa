#include "lockstep/rendezvous/elastic_protocol.h"

#include <fmt/format.h>

#include <sstream>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"

namespace lockstep::rendezvous::elastic {

std::string member_key(int generation, const std::string& worker_id) {
  return fmt::format("elastic/gen/{}/{}", generation, worker_id);
}

namespace {

bool in_range(const Assignment& a) {
  return a.size >= 1 && a.rank >= 0 && a.rank < a.size && a.local_size >= 1 && a.local_rank >= 0 &&
         a.local_rank < a.local_size && a.cross_size >= 1 && a.cross_rank >= 0 &&
         a.cross_rank < a.cross_size;
}

}  // namespace

std::string Assignment::encode() const {
  // Paired with decode(), which refuses (throws) what this would not write.
  LOCKSTEP_DCHECK(in_range(*this),
                  "elastic: encoding an assignment with an index outside its size");
  return fmt::format("{} {} {} {} {} {}", rank, size, local_rank, local_size, cross_rank,
                     cross_size);
}

Assignment Assignment::decode(const std::string& text) {
  Assignment a;
  std::istringstream in(text);
  std::string rest;
  const bool parsed = static_cast<bool>(in >> a.rank >> a.size >> a.local_rank >> a.local_size >>
                                        a.cross_rank >> a.cross_size) &&
                      !(in >> rest);
  if (!parsed || !in_range(a))
    throw InvalidArgument(
        fmt::format("elastic: assignment '{}' is not 'rank size local_rank local_size cross_rank "
                    "cross_size' with each index inside its size",
                    text.substr(0, 200)));
  return a;
}

int parse_generation(const std::string& text) {
  int g = -1;
  size_t used = 0;
  try {
    g = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || g < 0)
    throw InvalidArgument(
        fmt::format("elastic: generation '{}' is not a non-negative integer", text.substr(0, 50)));
  return g;
}

}  // namespace lockstep::rendezvous::elastic
