#include "engine/ready_item.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/collective_traits.h"

namespace lockstep::engine::detail {
namespace {

// "shape [10,128] on ranks 0,2 but [10,64] on rank 1".
std::string describe_disagreement(const std::vector<std::optional<Request>>& per_rank,
                                  const std::string& field, std::span<const int> global_ranks) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    if (!per_rank[r]) continue;
    std::string value = field_value(*per_rank[r], field);
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == value; });
    if (it == groups.end())
      groups.push_back({value, {global_ranks[r]}});
    else
      it->second.push_back(global_ranks[r]);
  }
  std::string out = field;
  for (size_t g = 0; g < groups.size(); ++g)
    out += fmt::format("{}{} on {}", g == 0 ? " " : (g == 1 ? " but " : " and "), groups[g].first,
                       format_ranks(groups[g].second));
  return out;
}

std::string join_error(const Request& first, const std::vector<uint8_t>& joined,
                       std::span<const int> global_ranks) {
  std::vector<int> joined_ranks;
  for (size_t r = 0; r < joined.size(); ++r)
    if (joined[r]) joined_ranks.push_back(global_ranks[r]);
  if (joined_ranks.empty()) return {};
  bool root_joined = traits(first.collective).has_root && joined[first.root];
  bool unsupported = !traits(first.collective).runs_with_joined;
  if (!root_joined && !unsupported) return {};
  return fmt::format(
      "{} '{}' cannot run while {} {} joined: {}", collective_name(first.collective), first.name,
      format_ranks(joined_ranks), joined_ranks.size() == 1 ? "has" : "have",
      root_joined ? fmt::format("its root (rank {}) has joined; broadcast from a rank that has "
                                "not joined, or before join()",
                                global_ranks[first.root])
                  : "only allreduce, broadcast (from a root that has not joined) and barrier "
                    "accept joined ranks; run it before join() on every rank, or in a process "
                    "set without the joined ranks");
}

}  // namespace

std::string format_ranks(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ","));
}

ReadyItem make_ready_item(std::vector<std::optional<Request>> per_rank,
                          const std::vector<uint8_t>& joined, std::span<const int> global_ranks) {
  ReadyItem item;
  const Request* first = nullptr;
  for (const auto& r : per_rank)
    if (r && !first) first = &*r;
  item.request = *first;
  for (const auto& r : per_rank) {
    if (!r) continue;
    std::string field = first_mismatch(*first, *r);
    if (field.empty()) continue;
    item.error_kind = ItemError::kMismatch;
    item.error = fmt::format("{} '{}': {}", collective_name(first->collective), first->name,
                             describe_disagreement(per_rank, field, global_ranks));
    break;
  }
  if (item.error_kind == ItemError::kNone) {
    item.error = join_error(*first, joined, global_ranks);
    if (!item.error.empty()) item.error_kind = ItemError::kJoin;
  }
  item.per_rank.reserve(per_rank.size());
  for (auto& r : per_rank) item.per_rank.push_back(r ? std::move(*r) : item.request);
  return item;
}

}  // namespace lockstep::engine::detail
