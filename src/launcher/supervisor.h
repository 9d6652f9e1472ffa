// The supervisor of `lockstep run`: starts the workers (locally or through
// the remote-exec command), relays their output, forwards signals, reaps
// them and tears the job down on the first failure, all from one poll loop
// over a signalfd (SIGCHLD and the signals to forward) and the workers'
// output pipes, sleeping until the earliest of its timers (deadlines.h).
// Elastic jobs hand the decisions about generations to the ElasticSupervisor
// (elastic_supervisor.h). supervisor.cc holds the loop and the processes,
// supervisor_remote.cc the remote workers' start, supervise.cc the entry
// point (supervise() in spec.h). Internal. Not thread-safe: one Supervisor
// per job, driven by the launcher's main thread; it owns the workers.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/deadlines.h"
#include "launcher/elastic_supervisor.h"
#include "launcher/hosts.h"
#include "launcher/job.h"
#include "launcher/spawn.h"
#include "launcher/spec.h"
#include "launcher/worker.h"
#include "lockstep/rendezvous/store.h"

namespace lockstep::launcher {

class Supervisor {
 public:
  Supervisor(const LaunchSpec& spec, std::vector<Placement> placements, JobIdentity job,
             int signal_fd)
      : spec_(spec),
        placements_(std::move(placements)),
        job_(std::move(job)),
        signal_fd_(signal_fd) {
    for (const auto& p : placements_) multi_host_ |= p.cross_size > 1 || !p.local;
  }
  ~Supervisor();
  void start(const std::string& path);
  void run();
  int exit_status() const;

 private:
  void spawn(int index, const Placement& where, int null_fd);
  std::vector<std::pair<std::string, std::string>> environment_of(const Worker& w) const;
  rendezvous::StoreClient& store_client();
  void poll_elastic();
  void stop_job(int code);
  SpawnedWorker spawn_remote(Worker& w);
  void check_started();
  void close_launch_fd(Worker& w);
  void on_signal();
  void reap();
  void on_exit(Worker& w);
  void signal_all(int sig);
  void on_deadlines();
  void read_stream(Stream& s);
  std::string failure_note(Worker& w);
  bool any_running() const;
  bool any_stream_open() const;

  const LaunchSpec& spec_;
  std::vector<Placement> placements_;
  bool multi_host_ = false;
  JobIdentity job_;
  std::optional<rendezvous::StoreClient> store_client_;  // set when remote ranks must check in
  int signal_fd_;
  std::vector<Worker> workers_;
  std::optional<int> first_failure_code_;
  int interrupted_by_ = 0;
  Deadlines deadlines_;
  std::string path_;
  std::optional<ElasticSupervisor> elastic_;  // elastic mode (elastic_supervisor.h)
};

}  // namespace lockstep::launcher
