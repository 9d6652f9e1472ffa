// ProcessSetWorker: the background thread of one process set. It alone uses
// the set's Communicator: it negotiates (Negotiator), plans fusion, executes
// (Executor) and completes handles.
//
// The thread never sleeps on a timer while it has work: with pending
// entries it starts the next cycle at once (the cycle's allreduce waits for
// the peers); when idle it waits on a condition variable for a submission,
// a stop request or the heartbeat (Note [Negotiation]).
//
// Thread-safety: submit(), request_stop(), wake() from any thread; the rest
// is the worker thread's.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/autotune.h"
#include "engine/context.h"
#include "engine/deadlock_detector.h"
#include "engine/executor.h"
#include "engine/negotiator.h"
#include "engine/stall_inspector.h"
#include "lockstep/base/mutex.h"

namespace lockstep::engine::detail {

class ProcessSetWorker {
 public:
  // global_ranks: the set's members (ascending job ranks); comm: over them.
  ProcessSetWorker(int id, std::vector<int> global_ranks, std::unique_ptr<comm::Communicator> comm,
                   EngineContext& context);
  ~ProcessSetWorker();

  int id() const { return id_; }
  int set_rank() const { return set_rank_; }
  int set_size() const { return static_cast<int>(ranks_.size()); }
  const std::vector<int>& ranks() const { return ranks_; }

  // Queues entries atomically (a group negotiates together). Throws
  // InvalidArgument for a name already pending here, a join in progress, or
  // a stopped worker. After a fatal error the entries fail with that error.
  void submit(std::vector<Entry> entries);
  // Names of this rank's operations in the set that have not completed
  // (sorted), for remove_process_set's check.
  std::vector<std::string> pending_names();
  // Asks the thread to announce shutdown and exit; join() waits for it.
  void request_stop();
  void join();
  void wake();

 private:
  enum class State { kNew, kAnnounced, kCached };
  struct Pending {
    Entry entry;
    State state = State::kNew;
    uint32_t slot = 0;
  };

  void loop();
  void run_loop();
  bool wait_for_work();
  void drain_incoming();
  Offer build_offer();
  void process(CycleResult& result);
  void execute(const CycleResult& result, std::vector<Entry*>& entries);
  void handle_stall(const CycleResult& result);
  void fail_pending(std::exception_ptr error);
  void sample_blocked();
  void revalidate_cached();
  void finish(Entry& entry, std::exception_ptr error);
  void fail_everything(std::exception_ptr error);
  void dump_flight(std::string_view reason);
  std::exception_ptr translate(std::exception_ptr error) const;
  Pending* find(const std::string& name);

  const int id_;
  const std::vector<int> ranks_;
  std::unique_ptr<comm::Communicator> comm_;
  EngineContext& ctx_;
  const int set_rank_;

  // Submission side.
  Mutex mu_;
  std::condition_variable cv_;  // submissions, stop requests and wake()
  std::vector<Entry> incoming_ LOCKSTEP_GUARDED_BY(mu_);
  std::unordered_set<std::string> active_names_ LOCKSTEP_GUARDED_BY(mu_);
  bool join_pending_ LOCKSTEP_GUARDED_BY(mu_) = false;
  bool stop_requested_ LOCKSTEP_GUARDED_BY(mu_) = false;
  bool exited_ LOCKSTEP_GUARDED_BY(mu_) = false;
  std::exception_ptr exit_error_ LOCKSTEP_GUARDED_BY(mu_);

  // Worker-thread side.
  Negotiator negotiator_;
  Executor executor_;
  std::optional<StallInspector> stall_;
  std::optional<DeadlockDetector> deadlock_;
  uint64_t submissions_seen_ = 0;  // WaitTracker::submissions at the last cycle
  bool blocked_ = false;           // sampled before draining (Note [Deadlock detection])
  std::optional<Autotuner> autotune_;
  StallAction next_stall_action_ = StallAction::kNone;
  std::chrono::microseconds backoff_{0};
  uint64_t next_seq_ = 0;
  int64_t negotiated_seq_ = 0;  // ready items so far: the same count on every rank
  std::map<uint64_t, Pending> pending_;
  std::unordered_map<std::string, uint64_t> seq_of_;
  std::optional<Entry> join_;
  std::thread thread_;
};

}  // namespace lockstep::engine::detail
