#include "engine/negotiator.h"

#include <algorithm>
#include <limits>

#include "engine/collective_traits.h"
#include "lockstep/base/check.h"
#include "lockstep/policy/policies.h"

namespace lockstep::engine::detail {
namespace {

// Header layout (Note [Negotiation]), by the field counts the planner
// prices too (policy::negotiation_header_fields).
constexpr size_t kThreshold = 0;
constexpr size_t kStallAction = 1;
constexpr size_t kAutotune = 2;
constexpr size_t kFixed = policy::kNegotiationFixedFields;
static_assert(kFixed == kAutotune + 1, "the coordinator fields come first");
static_assert(policy::kNegotiationFieldsPerRank == 4,
              "Layout has four fields per rank: blob_len, joined, shutdown, blocked");

struct Layout {
  size_t n;
  size_t blob_len(int r) const { return kFixed + r; }
  size_t joined(int r) const { return kFixed + n + r; }
  size_t shutdown(int r) const { return kFixed + 2 * n + r; }
  size_t blocked(int r) const { return kFixed + 3 * n + r; }
  size_t slot(uint32_t s) const { return kFixed + 4 * n + s; }
  size_t total(size_t slots) const {
    return static_cast<size_t>(
        policy::negotiation_header_fields(static_cast<int64_t>(n), static_cast<int64_t>(slots)));
  }
};

bool cacheable(Collective c) { return traits(c).cacheable; }

}  // namespace

Negotiator::Negotiator(comm::Communicator& comm, std::vector<int> global_ranks,
                       size_t cache_capacity)
    : comm_(comm),
      global_ranks_(std::move(global_ranks)),
      size_(comm.size()),
      cache_(cache_capacity),
      table_(comm.size()),
      prev_joined_(comm.size(), 0) {}

std::vector<uint8_t> Negotiator::encode_blob(const Offer& offer) const {
  std::vector<uint8_t> blob;
  if (offer.announcements.empty() && !stall_report_due()) return blob;
  put_u32(blob, static_cast<uint32_t>(offer.announcements.size()));
  for (const auto& r : offer.announcements) serialize(r, blob);
  put_u32(blob, static_cast<uint32_t>(offer.cached_slots.size()));
  for (uint32_t s : offer.cached_slots) {
    // Paired with apply_blob: every rank's cache has the same slots.
    LOCKSTEP_DCHECK_LT(s, cache_.num_slots(), "negotiation blob: offering a slot past the cache");
    put_u32(blob, s);
  }
  // The header carries the length as an int32 (Note [Negotiation]).
  LOCKSTEP_DCHECK_LE(blob.size(), static_cast<size_t>(std::numeric_limits<int32_t>::max()),
                     "negotiation blob: too long for its header field");
  return blob;
}

namespace {

// The header this rank contributes: rank 0's coordinator fields, its own
// per-rank fields, a 1 for each cached slot it is ready on (summed across
// ranks by the allreduce).
std::vector<int32_t> encode_header(const Offer& offer, const Layout& layout, int me,
                                   size_t num_slots, size_t blob_len) {
  std::vector<int32_t> header(layout.total(num_slots), 0);
  if (me == 0) {
    header[kThreshold] = static_cast<int32_t>(
        std::min<int64_t>(offer.fusion_threshold, std::numeric_limits<int32_t>::max()));
    header[kStallAction] = static_cast<int32_t>(offer.stall_action);
    header[kAutotune] = offer.autotune_converged ? 1 : 0;
  }
  header[layout.blob_len(me)] = static_cast<int32_t>(blob_len);
  header[layout.joined(me)] = offer.joined ? 1 : 0;
  header[layout.shutdown(me)] = offer.shutdown ? 1 : 0;
  header[layout.blocked(me)] = offer.blocked ? 1 : 0;
  for (uint32_t s : offer.cached_slots) header[layout.slot(s)] = 1;
  return header;
}

// The summed header's coordinator and per-rank fields into `out`.
void decode_header(const std::vector<int32_t>& header, const Layout& layout, int size,
                   CycleResult& out) {
  out.fusion_threshold = static_cast<size_t>(std::max<int32_t>(0, header[kThreshold]));
  out.autotune_converged = header[kAutotune] != 0;
  out.joined.resize(size);
  out.blocked.resize(size);
  for (int r = 0; r < size; ++r) {
    // Each per-rank field has one writer: a sum above 1 (or a negative blob
    // length) means the ranks' header layouts differ, i.e. their replicated
    // caches hold different numbers of slots.
    LOCKSTEP_DCHECK(header[layout.joined(r)] == 0 || header[layout.joined(r)] == 1,
                    "negotiation header: rank {}'s joined flag sums to {}", r,
                    header[layout.joined(r)]);
    LOCKSTEP_DCHECK(header[layout.blob_len(r)] >= 0,
                    "negotiation header: rank {}'s blob is {} bytes", r,
                    header[layout.blob_len(r)]);
    out.joined[r] = header[layout.joined(r)] != 0;
    out.blocked[r] = header[layout.blocked(r)] != 0;
    out.num_joined += out.joined[r];
    if (header[layout.shutdown(r)] != 0) out.shutdown_ranks.push_back(r);
  }
}

}  // namespace

CycleResult Negotiator::run_cycle(const Offer& offer) {
  const int me = comm_.rank();
  const Layout layout{static_cast<size_t>(size_)};
  const size_t num_slots = cache_.num_slots();

  std::vector<uint8_t> blob = encode_blob(offer);
  std::vector<int32_t> header = encode_header(offer, layout, me, num_slots, blob.size());
  comm_.allreduce(header.data(), header.size(), DataType::kInt32, ReduceOp::kSum);

  CycleResult out;
  decode_header(header, layout, size_, out);
  std::vector<size_t> blob_lens(size_);
  size_t total = 0;
  for (int r = 0; r < size_; ++r) total += blob_lens[r] = header[layout.blob_len(r)];
  std::vector<std::vector<int>> slot_holders(num_slots);
  if (total > 0) out.announced = exchange_blobs(blob, blob_lens, total, slot_holders);
  if (!out.shutdown_ranks.empty()) return out;

  std::span<const int32_t> counts(header.data() + layout.slot(0), num_slots);
  const int expected = size_ - out.num_joined;
  // Cached first, in slot order: announcements below may evict slots, but
  // never a ready one (a rank announcing a name is not offering its slot).
  collect_cached_ready(counts, expected, out);
  collect_announced_ready(out);
  track_join(out);

  out.progressed = total > 0 || !out.ready.empty() || out.join_completed_last.has_value();
  out.stall_report = stall_report_due();
  out.stall_action = stall_action_;
  collect_partial(counts, expected, slot_holders, out);
  if (stall_action_ == StallAction::kAbort || stall_action_ == StallAction::kDeadlock)
    table_.clear();
  stall_action_ = static_cast<StallAction>(header[kStallAction]);
  ++cycle_;
  return out;
}

bool Negotiator::exchange_blobs(const std::vector<uint8_t>& blob,
                                const std::vector<size_t>& blob_lens, size_t total,
                                std::vector<std::vector<int>>& slot_holders) {
  std::vector<uint8_t> all(total);
  comm_.allgatherv(blob.data(), all.data(), blob_lens, DataType::kUInt8);
  const uint8_t* p = all.data();
  bool announced = false;
  for (int r = 0; r < size_; ++r) {
    announced |= apply_blob(r, p, p + blob_lens[r], slot_holders) > 0;
    p += blob_lens[r];
  }
  return announced;
}

uint32_t Negotiator::apply_blob(int rank, const uint8_t* p, const uint8_t* end,
                                std::vector<std::vector<int>>& slot_holders) {
  if (p == end) return 0;
  uint32_t n = get_u32(p, end);
  for (uint32_t i = 0; i < n; ++i) {
    Request r = deserialize(p, end);
    if (auto slot = cache_.find(r.name)) cache_.erase(*slot);
    table_.add(rank, std::move(r));
  }
  uint32_t slots = get_u32(p, end);
  for (uint32_t i = 0; i < slots; ++i) {
    uint32_t s = get_u32(p, end);
    LOCKSTEP_DCHECK_LT(s, slot_holders.size(),
                       "negotiation blob: rank {} offers a slot past the replicated cache", rank);
    if (s < slot_holders.size()) slot_holders[s].push_back(rank);
  }
  // The header's length for this rank's blob is what encode_blob wrote: the
  // decoder must end exactly there, or the next rank's blob is misread.
  LOCKSTEP_DCHECK(p == end, "negotiation blob: rank {}'s blob has {} bytes left after decoding",
                  rank, end - p);
  return n;
}

void Negotiator::collect_cached_ready(std::span<const int32_t> counts, int expected,
                                      CycleResult& out) {
  for (uint32_t s = 0; s < counts.size(); ++s) {
    LOCKSTEP_DCHECK(counts[s] >= 0 && counts[s] <= size_,
                    "negotiation: cache slot {} offered by {} of {} ranks", s, counts[s], size_);
    if (counts[s] == 0 || counts[s] != expected || !cache_.occupied(s)) continue;
    std::vector<std::optional<Request>> per_rank(size_);
    for (int r = 0; r < size_; ++r)
      if (!out.joined[r]) per_rank[r] = cache_.per_rank(s)[r];
    out.ready.push_back(make_ready_item(std::move(per_rank), out.joined, global_ranks_));
    cache_.touch(s, cycle_);
  }
}

void Negotiator::collect_announced_ready(CycleResult& out) {
  for (Announced& a : table_.take_complete(out.joined)) {
    ReadyItem item = make_ready_item(std::move(a.per_rank), out.joined, global_ranks_);
    if (item.error_kind == ItemError::kNone && out.num_joined == 0 &&
        cacheable(item.request.collective))
      cache_.insert(item.per_rank, cycle_);
    out.ready.push_back(std::move(item));
  }
}

void Negotiator::track_join(CycleResult& out) {
  for (int r = 0; r < size_; ++r)
    if (out.joined[r] && !prev_joined_[r]) last_joined_ = r;  // highest newcomer wins ties
  prev_joined_ = out.joined;
  if (out.num_joined == size_) {
    out.join_completed_last = last_joined_;
    std::fill(prev_joined_.begin(), prev_joined_.end(), 0);
    last_joined_ = -1;
  }
}

void Negotiator::collect_partial(std::span<const int32_t> counts, int expected,
                                 const std::vector<std::vector<int>>& slot_holders,
                                 CycleResult& out) const {
  for (uint32_t s = 0; s < counts.size(); ++s) {
    if (counts[s] == 0 || counts[s] == expected || !cache_.occupied(s)) continue;
    const Request& r = cache_.per_rank(s).front();
    out.partial.push_back({r.name, r.collective, slot_holders[s]});
  }
  for (const Announced* a : table_.entries()) {
    PartialItem item{a->name, Collective::kAllreduce, {}};
    for (int r = 0; r < size_; ++r)
      if (a->per_rank[r]) {
        item.collective = a->per_rank[r]->collective;
        item.have.push_back(r);
      }
    out.partial.push_back(std::move(item));
  }
}

}  // namespace lockstep::engine::detail
