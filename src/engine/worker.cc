#include "engine/worker.h"

#include <algorithm>
#include <string_view>
#include <unordered_set>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/log.h"
#include "lockstep/engine/elastic.h"

namespace lockstep::engine::detail {
namespace {

// In an elastic job a lost peer (PeerFailure, or the Aborted of a set shut
// down around it) is routine: run_elastic re-forms the world and the
// launcher names the dead worker. A dump on every survivor, at error level,
// left lockstep-flight-* folders behind after every handled loss (issue
// 30.6); dumps stay for what is a bug (mismatch, deadlock, stall timeout).
bool elastic_routine(std::exception_ptr error) {
  if (!error || !elastic_enabled()) return false;
  try {
    std::rethrow_exception(error);
  } catch (const PeerFailure&) {
    return true;
  } catch (const Aborted&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

ProcessSetWorker::ProcessSetWorker(int id, std::vector<int> global_ranks,
                                   std::unique_ptr<comm::Communicator> comm, EngineContext& context)
    : id_(id),
      ranks_(std::move(global_ranks)),
      comm_(std::move(comm)),
      ctx_(context),
      set_rank_(comm_->rank()),
      negotiator_(*comm_, ranks_, context.config.cache_capacity),
      executor_(*comm_, &context.timeline, &context.device_comm) {
  if (set_rank_ == 0) {
    stall_.emplace(ctx_.config.stall_warning_s, ctx_.config.stall_timeout_s);
    deadlock_.emplace(ctx_.config.deadlock_timeout_s);
  }
  if (set_rank_ == 0 && id_ == 0 && ctx_.config.autotune && !ctx_.config.deterministic)
    autotune_.emplace(ctx_.config.fusion_threshold, ctx_.config.autotune_samples);
  // A caller blocked on a handle leaves this process's cores idle: the
  // transport may spin for the peers instead of sleeping (Note [Spinning
  // while the caller is blocked] in src/comm/transport/shm/sync.cc). The
  // tracker outlives the communicator (ctx_ outlives this worker).
  comm_->backend().set_idle_probe(&ctx_.waits->waiting);
  thread_ = std::thread([this] { loop(); });
}

ProcessSetWorker::~ProcessSetWorker() {
  request_stop();
  join();
}

void ProcessSetWorker::submit(std::vector<Entry> entries) {
  std::exception_ptr fatal = ctx_.fatal_error();
  {
    MutexLock lock(mu_);
    if (!fatal && exited_) fatal = exit_error_;
    if (!fatal) {
      if (stop_requested_ || exited_)
        throw InvalidArgument(fmt::format("engine: process set {} is shut down", id_));
      // Note [A name twice in one submission]
      // The worker keys pending operations by name, so a repeat inside one
      // group would orphan the first entry: every rank announces the name
      // once, it completes once, and the orphan waits forever with nothing
      // missing for the stall or deadlock watchdogs to name. Refused here
      // with the others.
      std::unordered_set<std::string_view> batch;
      for (const Entry& e : entries) {
        const Request& r = e.request;
        const bool repeat = r.collective != Collective::kJoin && !batch.insert(r.name).second;
        if (repeat ||
            (r.collective == Collective::kJoin ? join_pending_ : active_names_.count(r.name) > 0))
          throw InvalidArgument(fmt::format(
              "{} '{}': a collective named '{}' is already pending on rank {} (process set {}){}; "
              "wait for it before submitting the name again, or give each operation its own name",
              collective_name(r.collective), r.name, r.name, ranks_[set_rank_], id_,
              repeat ? ", earlier in the same group" : ""));
        if (join_pending_)
          throw InvalidArgument(fmt::format(
              "{} '{}': this rank called join() and may not submit until every rank joined",
              collective_name(r.collective), r.name));
      }
      for (Entry& e : entries) {
        if (e.request.collective == Collective::kJoin)
          join_pending_ = true;
        else
          active_names_.insert(e.request.name);
        incoming_.push_back(std::move(e));
      }
    }
  }
  if (fatal) {
    for (Entry& e : entries) e.state->complete_one(fatal);
    return;
  }
  cv_.notify_one();
}

std::vector<std::string> ProcessSetWorker::pending_names() {
  MutexLock lock(mu_);
  std::vector<std::string> names(active_names_.begin(), active_names_.end());
  std::sort(names.begin(), names.end());
  return names;
}

void ProcessSetWorker::request_stop() {
  {
    MutexLock lock(mu_);
    stop_requested_ = true;
  }
  cv_.notify_one();
}

void ProcessSetWorker::join() {
  if (thread_.joinable()) thread_.join();
}

void ProcessSetWorker::wake() { cv_.notify_one(); }

bool ProcessSetWorker::wait_for_work() {
  MutexLock lock(mu_);
  const bool idle = pending_.empty() && !join_;
  if (idle || backoff_.count() > 0) {
    const auto deadline = Clock::now() + (idle ? std::chrono::microseconds(kHeartbeat) : backoff_);
    while (incoming_.empty() && !stop_requested_ && !ctx_.fatal_error())
      if (!lock.wait_until(cv_, deadline)) break;
  }
  return stop_requested_ || ctx_.fatal_error() != nullptr;
}

void ProcessSetWorker::drain_incoming() {
  std::vector<Entry> fresh;
  {
    MutexLock lock(mu_);
    fresh.swap(incoming_);
  }
  for (Entry& e : fresh) {
    if (e.request.collective == Collective::kJoin) {
      join_ = std::move(e);
      continue;
    }
    uint64_t seq = next_seq_++;
    seq_of_[e.request.name] = seq;
    pending_.emplace(seq, Pending{std::move(e)});
  }
}

// The device fusion buffer goes while the device communicator that made it
// still exists (Engine::shutdown drops it after joining this thread).
void ProcessSetWorker::loop() {
  run_loop();
  executor_.release_device();
}

void ProcessSetWorker::run_loop() {
  for (;;) {
    bool stopping = wait_for_work();
    sample_blocked();  // before draining: what it saw submitted is in this offer
    drain_incoming();
    Offer offer = build_offer();
    offer.shutdown = stopping;
    ctx_.timeline.mark_cycle(id_);
    try {
      CycleResult result = negotiator_.run_cycle(offer);
      if (!result.shutdown_ranks.empty()) {
        std::exception_ptr why = ctx_.fatal_error();
        if (!why) {
          std::vector<int> who;
          for (int r : result.shutdown_ranks) who.push_back(ranks_[r]);
          // Most often uneven data: one rank ran out of batches and finished.
          why = std::make_exception_ptr(Aborted(fmt::format(
              "engine: process set {} was shut down by {} while this operation was pending. If "
              "the ranks run different numbers of steps (uneven batch counts), give every rank "
              "as many batches (lockstep::torch::DistributedSampler pads to equal counts) or call "
              "join() on a rank that has run out of data, so the others finish without it",
              id_, format_ranks(who))));
        }
        // A shutdown that cuts operations short is a failure worth a dump
        // (taken first, so it shows them pending); an orderly one is not.
        drain_incoming();
        if ((!pending_.empty() || join_) && !elastic_routine(why)) dump_flight(error_message(why));
        fail_everything(why);
        return;
      }
      process(result);
      backoff_ = result.progressed
                     ? std::chrono::microseconds(0)
                     : std::clamp(2 * backoff_, std::chrono::microseconds(kMinBackoff),
                                  std::chrono::microseconds(kMaxBackoff));
    } catch (...) {
      std::exception_ptr error = translate(std::current_exception());
      ctx_.set_fatal(error);
      if (elastic_routine(ctx_.fatal_error()))
        log(LogLevel::kWarning,
            "engine: process set {}: {} (elastic job: re-forming, no flight "
            "recorder dump)",
            id_, error_message(ctx_.fatal_error()));
      else
        dump_flight(error_message(ctx_.fatal_error()));
      fail_everything(ctx_.fatal_error());
      return;
    }
  }
}

void ProcessSetWorker::sample_blocked() {
  const WaitTracker& waits = *ctx_.waits;
  uint64_t submissions = waits.submissions.load();
  blocked_ = waits.waiting.load() > 0 && submissions == submissions_seen_;
  submissions_seen_ = submissions;
}

Offer ProcessSetWorker::build_offer() {
  Offer offer;
  offer.blocked = blocked_;
  const int me = set_rank_;
  for (auto& [seq, p] : pending_) {
    if (p.state == State::kNew) {
      auto slot = negotiator_.cache().find(p.entry.request.name);
      if (slot && negotiator_.cache().per_rank(*slot)[me] == p.entry.request) {
        p.state = State::kCached;
        p.slot = *slot;
      } else {
        offer.announcements.push_back(p.entry.request);
        p.state = State::kAnnounced;
      }
    }
    if (p.state == State::kCached) offer.cached_slots.push_back(p.slot);
  }
  offer.joined = join_.has_value() && pending_.empty();
  if (set_rank_ == 0) {
    offer.fusion_threshold =
        static_cast<int64_t>(autotune_ ? autotune_->threshold() : ctx_.requested_threshold.load());
    offer.autotune_converged = autotune_ && autotune_->converged();
    offer.stall_action = next_stall_action_;
    next_stall_action_ = StallAction::kNone;
  }
  return offer;
}

ProcessSetWorker::Pending* ProcessSetWorker::find(const std::string& name) {
  auto it = seq_of_.find(name);
  return it == seq_of_.end() ? nullptr : &pending_.at(it->second);
}

void ProcessSetWorker::finish(Entry& entry, std::exception_ptr error) {
  {
    // Release the name first: a caller woken by the handle may resubmit it.
    MutexLock lock(mu_);
    if (entry.request.collective == Collective::kJoin)
      join_pending_ = false;
    else
      active_names_.erase(entry.request.name);
  }
  ctx_.flight->finished(entry.flight_id, error);
  entry.state->complete_one(error);
}

void ProcessSetWorker::fail_everything(std::exception_ptr error) {
  {
    MutexLock lock(mu_);
    exited_ = true;
    exit_error_ = error;
  }
  drain_incoming();
  for (auto& [seq, p] : pending_) finish(p.entry, error);
  pending_.clear();
  seq_of_.clear();
  if (join_) {
    finish(*join_, error);
    join_.reset();
  }
}

void ProcessSetWorker::dump_flight(std::string_view reason) {
  ctx_.flight->dump(fmt::format("process set {}: {}", id_, reason));
}

std::exception_ptr ProcessSetWorker::translate(std::exception_ptr error) const {
  if (id_ == 0) return error;
  try {
    std::rethrow_exception(error);
  } catch (const PeerFailure& e) {
    int global = e.rank() >= 0 && e.rank() < set_size() ? ranks_[e.rank()] : -1;
    return std::make_exception_ptr(PeerFailure(
        global,
        fmt::format("{} (process set {}: that is rank {} of the job)", e.what(), id_, global)));
  } catch (...) {
    return error;
  }
}

}  // namespace lockstep::engine::detail
