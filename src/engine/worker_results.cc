// ProcessSetWorker, after a cycle: running what negotiation made ready,
// acting on stall decisions, re-offering evicted cache slots.
#include <fmt/format.h>

#include "engine/collective_traits.h"
#include "engine/fusion.h"
#include "engine/worker.h"
#include "lockstep/base/error.h"
#include "lockstep/base/log.h"

namespace lockstep::engine::detail {

void ProcessSetWorker::process(CycleResult& result) {
  const auto now = Clock::now();
  if (id_ == 0) {
    ctx_.current_threshold.store(result.fusion_threshold);
    ctx_.autotune_converged.store(result.autotune_converged);
  }
  if (result.join_completed_last && join_) {
    join_->state->value = ranks_[*result.join_completed_last];
    Entry done = std::move(*join_);
    join_.reset();
    finish(done, nullptr);
  }
  std::vector<Entry*> entries(result.ready.size(), nullptr);
  for (size_t i = 0; i < result.ready.size(); ++i) {
    const int64_t seq = negotiated_seq_++;  // counted on every rank, entry or not
    if (Pending* p = find(result.ready[i].request.name)) {
      entries[i] = &p->entry;
      ctx_.flight->negotiated(p->entry.flight_id, seq);
      p->entry.ready = now;
      if (ctx_.timeline.active())
        ctx_.timeline.record(p->entry.request.name, Phase::kNegotiate, p->entry.submitted, now);
    }
  }
  auto started = Clock::now();
  execute(result, entries);
  if (autotune_) {
    size_t bytes = 0;
    for (const auto& item : result.ready)
      if (traits(item.request.collective).fusible) bytes += item.request.bytes();
    autotune_->record(bytes, std::chrono::duration<double>(Clock::now() - started).count());
  }
  handle_stall(result);
  revalidate_cached();
}

void ProcessSetWorker::execute(const CycleResult& result, std::vector<Entry*>& entries) {
  std::vector<std::exception_ptr> errors(result.ready.size());
  for (size_t i = 0; i < result.ready.size(); ++i) {
    const ReadyItem& item = result.ready[i];
    if (item.error_kind == ItemError::kMismatch)
      errors[i] = std::make_exception_ptr(MismatchError(item.error));
    else if (item.error_kind == ItemError::kJoin)
      errors[i] = std::make_exception_ptr(InvalidArgument(item.error));
  }
  for (const Batch& batch : plan_batches(result.ready, result.fusion_threshold)) {
    size_t i0 = batch.items.front();
    const ReadyItem& first = result.ready[i0];
    if (first.error_kind != ItemError::kNone) continue;
    if (first.request.collective == Collective::kAddProcessSet) {
      int id = ctx_.add_process_set(first.request.ranks, *comm_);
      if (entries[i0]) entries[i0]->state->value = id;
      continue;
    }
    for (size_t i : batch.items)
      if (entries[i]) ctx_.flight->started(entries[i]->flight_id);
    executor_.run(batch, result, entries, errors);
  }
  for (size_t i = 0; i < result.ready.size(); ++i) {
    if (!entries[i]) continue;
    Entry done = std::move(*entries[i]);
    const std::string name = done.request.name;
    pending_.erase(seq_of_.at(name));
    seq_of_.erase(name);
    finish(done, errors[i]);
  }
  for (const ReadyItem& item : result.ready)
    if (item.error_kind == ItemError::kMismatch) {
      dump_flight(item.error);  // after finish(): the dump shows them failed
      break;
    }
}

void ProcessSetWorker::fail_pending(std::exception_ptr error) {
  for (auto& [seq, p] : pending_) finish(p.entry, error);
  pending_.clear();
  seq_of_.clear();
}

void ProcessSetWorker::handle_stall(const CycleResult& result) {
  if (result.stall_report && !result.partial.empty()) {
    std::string what =
        describe_stall(result, ranks_, result.stall_action == StallAction::kDeadlock);
    if (result.stall_action == StallAction::kDeadlock) {
      std::string message = fmt::format(
          "engine: deadlock in process set {}: every rank is blocked waiting and no pending "
          "operation can complete: {}. Each rank must submit the same names (a metric reduced "
          "on one rank only is the classic case); a rank that waits "
          "for one before submitting another that the others wait for deadlocks "
          "(LOCKSTEP_DEADLOCK_TIMEOUT={} s)",
          id_, what, ctx_.config.deadlock_timeout_s);
      if (set_rank_ == 0) log(LogLevel::kError, "{}", message);
      dump_flight("deadlock: " + what);  // first, so it shows them pending
      fail_pending(std::make_exception_ptr(DeadlockError(message)));
    } else if (result.stall_action == StallAction::kAbort) {
      auto error = std::make_exception_ptr(TimeoutError(
          fmt::format("engine: stall timeout (LOCKSTEP_STALL_TIMEOUT={} s) in process set {}: {}",
                      ctx_.config.stall_timeout_s, id_, what)));
      if (set_rank_ == 0) log(LogLevel::kError, "engine: failing stalled operations: {}", what);
      dump_flight("stall timeout: " + what);
      fail_pending(error);
    } else if (set_rank_ == 0) {
      log(LogLevel::kWarning,
          "engine: stall in process set {} (waiting > {} s): {}. A rank that never submits one "
          "of these names deadlocks the job; pending operations fail after "
          "LOCKSTEP_STALL_TIMEOUT={} s",
          id_, ctx_.config.stall_warning_s, what, ctx_.config.stall_timeout_s);
    }
  }
  const auto now = Clock::now();
  if (stall_) next_stall_action_ = stall_->observe(result, now);
  if (deadlock_ && deadlock_->observe(result, now)) next_stall_action_ = StallAction::kDeadlock;
}

void ProcessSetWorker::revalidate_cached() {
  const auto& cache = negotiator_.cache();
  for (auto& [seq, p] : pending_) {
    if (p.state != State::kCached) continue;
    bool still = cache.occupied(p.slot) && cache.name(p.slot) == p.entry.request.name &&
                 cache.per_rank(p.slot)[set_rank_] == p.entry.request;
    if (!still) p.state = State::kNew;  // evicted: announce again
  }
}

}  // namespace lockstep::engine::detail
