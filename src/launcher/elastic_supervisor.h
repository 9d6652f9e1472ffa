// The elastic half of `lockstep run`'s supervisor (docs/elastic.md): it
// publishes each generation through an ElasticController (the launcher's
// side of Note [Elastic generations] in include/lockstep/engine/elastic.h),
// re-forms the job after failures and follows the discovery script, scaling
// down and up. The Supervisor (supervisor.cc) owns the processes: this class
// decides, marks workers it leaves out, and tells the Supervisor whom to
// start or that the job must stop. Internal. Not thread-safe: it runs on the
// supervisor's poll loop, and borrows the store client and the deadlines
// from the Supervisor.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/deadlines.h"
#include "launcher/elastic.h"
#include "launcher/hosts.h"
#include "launcher/worker.h"

namespace lockstep::launcher {

class ElasticSupervisor {
 public:
  using Environment = std::vector<std::pair<std::string, std::string>>;

  // What the Supervisor does after poll(): stop the job with `stop_code`
  // (the reason is already said and told to the workers), or start workers
  // on `start`, in order, with the next free indices.
  struct Decision {
    std::optional<int> stop_code;
    std::vector<Placement> start;
  };

  ElasticSupervisor(const ElasticOptions& options, rendezvous::StoreClient& store,
                    Deadlines& deadlines, bool multi_host);

  // Publishes generation 0: worker i on placements[i].
  void start(const std::vector<Placement>& placements);
  // Worker `index`'s rank in the current generation, if it is a member.
  std::optional<int> rank_of(int index) const;
  // `env` (the plain job's) with the worker's place in the current
  // generation and its elastic identity.
  Environment environment_of(int index, const Environment& env) const;

  // A worker failed (first failures only): counted against its host, and a
  // re-formation is scheduled (Deadline::kReform).
  void on_failure(const Worker& w, const std::string& how);
  // A worker failed with an uncaught MismatchError (is_program_bug): its
  // ranks disagree about a collective, which every generation would repeat,
  // so nothing re-forms and no host is blamed. Says so, tells the workers and
  // returns the code to stop the job with.
  int on_program_bug(const Worker& w, const std::string& how);
  // A worker exited 0: the job is ending (Horovod's rule). From now on no
  // worker is started and no failure re-forms the job: a worker that
  // finished cannot rejoin, and newcomers would train a finished model again.
  void on_success(const Worker& w);
  // True once a worker exited 0.
  bool finishing() const { return finishing_; }
  // Re-forms when due, else runs discovery when due. Call only while the job
  // is neither failed nor interrupted.
  Decision poll(std::vector<Worker>& workers, Deadlines::TimePoint now);
  // When poll() has work next: the re-formation or the next discovery.
  std::optional<Deadlines::TimePoint> next_wakeup() const;

 private:
  std::optional<int> reform(std::vector<Worker>& workers);
  int stop(const std::string& reason);
  std::vector<Placement> scale_up(std::vector<Worker>& workers);
  bool scale_down(std::vector<Worker>& workers, const std::vector<HostSlots>& discovered);
  void publish_generation(std::vector<Worker>& workers,
                          const std::vector<ElasticMember>& newcomers);

  const ElasticOptions& options_;
  rendezvous::StoreClient& store_;
  Deadlines& deadlines_;
  bool multi_host_;
  ElasticController controller_;
  int last_failure_code_ = 1;
  bool finishing_ = false;
};

// Whether a worker's failure note (FailureNoteScanner: "MismatchError: ...")
// and exit code say the program is wrong rather than its host lost.
bool is_program_bug(const std::string& note, int exit_code);

// The elastic worker id of the worker with stable index `index`: "w<index>".
std::string elastic_id(int index);

}  // namespace lockstep::launcher
