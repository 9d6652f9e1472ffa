// ReadyItem: a name every (non-joined) rank of a process set submitted, with
// the checks that decide whether it may run. Built identically on every rank
// from replicated negotiation state.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/request.h"

namespace lockstep::engine::detail {

enum class ItemError { kNone, kMismatch, kJoin };

struct ReadyItem {
  Request request;                // the first non-joined rank's
  std::vector<Request> per_rank;  // by set rank; a joined rank's is a copy of `request`
  ItemError error_kind = ItemError::kNone;
  std::string error;  // names the tensor, the field and the ranks
};

// per_rank[r] is empty exactly for joined ranks. global_ranks maps set ranks
// to job ranks for messages.
ReadyItem make_ready_item(std::vector<std::optional<Request>> per_rank,
                          const std::vector<uint8_t>& joined, std::span<const int> global_ranks);

// "rank 3" / "ranks 0,2,5".
std::string format_ranks(const std::vector<int>& ranks);

}  // namespace lockstep::engine::detail
