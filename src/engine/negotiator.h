// Negotiator: one negotiation cycle of a process set, run by that set's
// background thread (the only user of its Communicator).
//
// Note [Negotiation]
// ~~~~~~~~~~~~~~~~~~
// There is no coordinator. Every rank keeps the same replicated state (a
// ResponseCache of names that ran before and an AnnouncementTable of names
// some ranks announced) and every cycle feeds all ranks the same input, so
// every rank computes the same ready list, in the same order, with the same
// cache slot ids and the same errors. A cycle is:
//
//   1. one allreduce(sum) of an int32 vector:
//        [rank-0 fields: fusion threshold, stall action, autotune state]
//        [per rank: announcement blob length | joined flag | shutdown flag |
//                   blocked flag (Note [Deadlock detection])]
//        [per cache slot: 1 if this rank has that cached name pending]
//      A slot whose count equals the number of non-joined ranks is ready.
//      Rank-0 fields are broadcasts in disguise (the others add 0); per-rank
//      fields tell every rank who announced, joined or is shutting down.
//   2. only if some blob is non-empty: one allgatherv of the blobs, which
//      carry full requests for uncached (new or changed) names, and, in a
//      stall-report cycle, each rank's pending cache slots.
//
// In steady state (same names every step) a cycle is exactly one small
// allreduce. A rank whose request differs from its cached one (new shape)
// announces it; an announcement of a cached name evicts the slot everywhere,
// and ranks that had offered that slot re-announce, so a changed request is
// caught by the mismatch check like a new one.
//
// Cycles are collectives, so all ranks run the same sequence of them. A rank
// with pending work starts its next cycle at once (blocking in the
// allreduce until the others come); an idle rank waits for a submission or a
// heartbeat (kHeartbeat), so a lone pending rank is never stuck and stall
// timing is done by rank 0 alone, whose decisions travel in the header. When
// every rank holds work the others lack (different orders with compute in
// between), cycles would spin; after a cycle without progress a rank waits
// for a submission up to a backoff doubling from kMinBackoff to kMaxBackoff.
//
// Thread-safety: none; owned by one ProcessSetWorker.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/announcement_table.h"
#include "engine/ready_item.h"
#include "engine/response_cache.h"
#include "lockstep/comm/communicator.h"

namespace lockstep::engine::detail {

inline constexpr auto kHeartbeat = std::chrono::milliseconds(100);
inline constexpr auto kMinBackoff = std::chrono::microseconds(20);
inline constexpr auto kMaxBackoff = std::chrono::microseconds(1000);

// kDeadlock: fail the set's pending operations now (deadlock_detector.h).
enum class StallAction : int32_t { kNone = 0, kReport = 1, kAbort = 2, kDeadlock = 3 };

// What this rank tells the others in one cycle.
struct Offer {
  std::vector<Request> announcements;  // uncached pending requests, new this cycle
  std::vector<uint32_t> cached_slots;  // pending requests matching their cached slot
  bool joined = false;
  bool shutdown = false;
  bool blocked = false;  // a thread waits on an operation and nothing was submitted since
  // Only rank 0's values are used.
  int64_t fusion_threshold = 0;
  StallAction stall_action = StallAction::kNone;
  bool autotune_converged = false;
};

// A name that some but not all non-joined ranks have pending.
struct PartialItem {
  std::string name;
  Collective collective;
  std::vector<int> have;  // set ranks that have it (in a stall-report cycle or when announced)
};

struct CycleResult {
  std::vector<ReadyItem> ready;  // in execution order
  std::vector<uint8_t> joined;   // by set rank
  std::vector<uint8_t> blocked;  // by set rank (Offer::blocked)
  int num_joined = 0;
  std::vector<int> shutdown_ranks;         // set ranks asking to shut down
  std::optional<int> join_completed_last;  // set rank of the last to join
  size_t fusion_threshold = 0;
  bool autotune_converged = false;
  // Something changed: a name ran or was announced, a join completed. Ranks
  // that keep cycling without progress back off (Note [Negotiation]).
  bool progressed = false;
  bool announced = false;            // some rank announced a request (not just stall-report slots)
  std::vector<PartialItem> partial;  // after this cycle
  bool stall_report = false;         // `partial` has full `have` lists
  StallAction stall_action = StallAction::kNone;  // when stall_report
};

class Negotiator {
 public:
  Negotiator(comm::Communicator& comm, std::vector<int> global_ranks, size_t cache_capacity);

  // Collective over the set. Throws what the Communicator throws.
  CycleResult run_cycle(const Offer& offer);

  const ResponseCache& cache() const { return cache_; }
  // This cycle is a stall-report cycle: offers must list their cached slots
  // (they always do; the flag only makes them travel).
  bool stall_report_due() const { return stall_action_ != StallAction::kNone; }
  std::span<const int> global_ranks() const { return global_ranks_; }

 private:
  std::vector<uint8_t> encode_blob(const Offer& offer) const;
  // Every rank's blob to every rank (allgatherv), applied in rank order;
  // whether any announced a request.
  bool exchange_blobs(const std::vector<uint8_t>& blob, const std::vector<size_t>& blob_lens,
                      size_t total, std::vector<std::vector<int>>& slot_holders);
  // Returns how many requests the blob announced.
  uint32_t apply_blob(int rank, const uint8_t* p, const uint8_t* end,
                      std::vector<std::vector<int>>& slot_holders);
  void collect_cached_ready(std::span<const int32_t> counts, int expected, CycleResult& out);
  void collect_announced_ready(CycleResult& out);
  void collect_partial(std::span<const int32_t> counts, int expected,
                       const std::vector<std::vector<int>>& slot_holders, CycleResult& out) const;
  void track_join(CycleResult& out);

  comm::Communicator& comm_;
  std::vector<int> global_ranks_;
  int size_;
  ResponseCache cache_;
  AnnouncementTable table_;
  uint64_t cycle_ = 0;
  StallAction stall_action_ = StallAction::kNone;  // decided by rank 0 last cycle
  std::vector<uint8_t> prev_joined_;
  int last_joined_ = -1;
};

}  // namespace lockstep::engine::detail
