// `lockstep run`: starts the workers of a job and supervises them.
//
// The workers get their identity (LOCKSTEP_RANK, _SIZE, _LOCAL_*, _CROSS_*,
// _JOB_ID), the address of the job's authenticated rendezvous store
// (LOCKSTEP_RENDEZVOUS, LOCKSTEP_SECRET; see lockstep/rendezvous/store.h) and
// the knobs set by flags through their environment. The full contract (flags,
// output relaying, signal forwarding, teardown, shared-memory cleanup) is in
// docs/launcher.md.
#pragma once

#include <span>
#include <string_view>

namespace lockstep::launcher {

// Entry point of `lockstep run`; argv[0] is "run". Blocks until every worker
// is gone and the job's /dev/shm/lockstep-<JOB_ID>* entries are removed.
// Returns the exit status the `lockstep` process should exit with: 0 when
// every worker exited 0; the first failing worker's code (128 + signal if it
// was killed); 128 + signal when the launcher was interrupted by SIGINT,
// SIGTERM or SIGHUP; 2 for bad usage; 127 when the program cannot be found,
// 126 when it cannot be executed.
//
// `built_backends` are the transports this build holds
// (comm::transport_names(); the launcher sits below comm, so its caller asks):
// a job that asks for another (--backend, -x or the inherited
// LOCKSTEP_BACKEND) is refused with status 2 before any worker starts.
//
// Not reentrant: it blocks SIGINT/SIGTERM/SIGHUP/SIGCHLD in the calling
// thread and reads them through a signalfd, so call it from the main thread
// of a process that has no other children.
int run_main(int argc, char** argv, std::span<const std::string_view> built_backends);

// Entry point of `lockstep remote-worker`, which `lockstep run` starts on
// every remote host through its remote-exec command (see docs/launcher.md);
// not meant to be run by hand. Returns the worker's exit status.
int remote_worker_main(int argc, char** argv);

}  // namespace lockstep::launcher
