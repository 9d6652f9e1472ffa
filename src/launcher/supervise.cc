// supervise(): places the ranks, starts the job's rendezvous store, runs a
// Supervisor (supervisor.h) and cleans up after it, whatever happens.
#include <unistd.h>

#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launcher/hosts.h"
#include "launcher/job.h"
#include "launcher/say.h"
#include "launcher/spawn.h"
#include "launcher/spec.h"
#include "launcher/supervisor.h"
#include "lockstep/base/error.h"
#include "lockstep/base/host.h"
#include "lockstep/rendezvous/store.h"

namespace lockstep::launcher {
namespace {

std::vector<Placement> placements_of(const LaunchSpec& spec) {
  if (spec.through_slurm) {
    std::vector<Placement> placements = place_ranks(spec.hosts, spec.num_proc);
    for (auto& p : placements) p.local = false;  // this host's ranks go through srun too
    return placements;
  }
  if (!spec.hosts.empty()) return place_ranks(spec.hosts, spec.num_proc);
  return place_ranks({{host_name(), spec.num_proc}}, spec.num_proc);
}

int supervise_job(const LaunchSpec& spec, const std::string& path) {
  std::vector<Placement> placements = placements_of(spec);
  // Before the rendezvous thread starts, so that thread inherits the mask
  // and never takes the signals.
  int signal_fd = block_supervision_signals();
  JobIdentity job{new_job_id(), "", rendezvous::random_secret_hex()};
  rendezvous::StoreServer::Options store_options;
  store_options.host = choose_rendezvous_host(spec.rendezvous_addr, placements);
  store_options.secret = rendezvous::decode_secret_hex(job.secret_hex);
  rendezvous::StoreServer store(std::move(store_options));
  store.start();
  job.rendezvous = store.address();
  if (spec.verbose)
    say("job {}: starting {} worker(s) of '{}'{}; rendezvous at {}", job.job_id, spec.num_proc,
        spec.program[0], spec.through_slurm ? " through srun (Slurm allocation)" : "",
        job.rendezvous);
  int status = 0;
  {
    Supervisor supervisor(spec, std::move(placements), job, signal_fd);
    try {
      supervisor.start(path);
      supervisor.run();
    } catch (...) {
      // Never leave workers behind: they die with us through PDEATHSIG anyway,
      // but shared memory does not.
      remove_job_shared_memory(job.job_id);
      throw;
    }
    status = supervisor.exit_status();
  }
  store.stop();
  int removed = remove_job_shared_memory(job.job_id);
  if (spec.verbose) {
    if (removed) say("removed {} shared-memory segment(s) left by job {}", removed, job.job_id);
    say("job {} finished with exit status {}", job.job_id, status);
  }
  ::close(signal_fd);
  return status;
}

}  // namespace

int supervise(const LaunchSpec& spec) {
  std::string path = resolve_program(spec.program[0]);
  if (path.empty()) {
    say("cannot find or execute '{}'; give a path or check PATH", spec.program[0]);
    return kProgramNotFound;
  }
  try {
    return supervise_job(spec, path);
  } catch (const ExecFailed& e) {
    say("{}", e.what());
    return e.exit_status();
  } catch (const std::exception& e) {
    std::string_view what = e.what();
    if (what.starts_with("lockstep run: ")) what.remove_prefix(14);  // say() adds it
    say("{}", what);
    return 1;
  }
}

}  // namespace lockstep::launcher
