#include "comm/slurm_world.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/base/slurm.h"
#include "comm/rendezvous_file.h"
#ifdef LOCKSTEP_HAVE_RENDEZVOUS
#include "lockstep/base/socket.h"
#include "lockstep/rendezvous/store.h"
#endif

namespace lockstep::comm {
namespace {

std::string env_or(const char* name, std::string fallback = "") {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

int env_int(const char* name, int fallback) {
  std::string v = env_or(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (*end != '\0') throw InvalidArgument(fmt::format("{}='{}' is not an integer", name, v));
  return static_cast<int>(x);
}

// This node's task count from the compressed per-node list.
int tasks_on_node(int node, int fallback) {
  std::string counts = env_or("SLURM_STEP_TASKS_PER_NODE", env_or("SLURM_TASKS_PER_NODE"));
  if (counts.empty()) return fallback;
  std::vector<int> per_node = slurm::expand_counts(counts);
  if (node < 0 || node >= static_cast<int>(per_node.size()))
    throw InvalidArgument(fmt::format("SLURM_NODEID={} is outside the {} node(s) of '{}'", node,
                                      per_node.size(), counts));
  return per_node[static_cast<size_t>(node)];
}

bool needs_rendezvous(const WorldInfo& w) {
  return w.size > 1 && (w.cross_size > 1 || knob_string("LOCKSTEP_BACKEND") == "gloo");
}

std::string rendezvous_file(const std::string& job, const std::string& step) {
  std::string dir = knob_string("LOCKSTEP_RENDEZVOUS_DIR");
  if (dir.empty()) dir = env_or("SLURM_SUBMIT_DIR", ".");
  return fmt::format("{}/.lockstep-rendezvous-{}.{}", dir, job, step);
}

#ifdef LOCKSTEP_HAVE_RENDEZVOUS

// An address of this node the others can reach: on one node loopback, else
// the route towards another node of the step.
std::string bind_address(const WorldInfo& w) {
  if (w.cross_size == 1) return "127.0.0.1";
  const std::string self = env_or("SLURMD_NODENAME");
  for (const std::string& host :
       slurm::expand_hostlist(env_or("SLURM_STEP_NODELIST", env_or("SLURM_JOB_NODELIST")))) {
    if (host == self) continue;
    if (std::string a = net::source_address_towards(host); !a.empty()) return a;
  }
  throw InvalidArgument(
      "srun job step across nodes: cannot tell which address of this node the others reach "
      "(their names do not resolve); start it with `lockstep run` inside the allocation instead");
}

void serve(WorldInfo& w, const std::string& file) {
  rendezvous::StoreServer::Options options;
  options.host = bind_address(w);
  w.secret = rendezvous::random_secret_hex();
  options.secret = rendezvous::decode_secret_hex(w.secret);
  options.log_prefix = "lockstep (srun rendezvous): ";
  auto server = std::make_unique<rendezvous::StoreServer>(std::move(options));
  server->start();
  w.rendezvous = server->address();
  write_rendezvous_file(file, {w.rendezvous, w.secret}, "srun rendezvous");
  keep_serving(std::move(server), file);
}

// Waits for task 0's file; refuses one that others could have read or written.
void join(WorldInfo& w, const std::string& file) {
  using Clock = std::chrono::steady_clock;
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(knob_double("LOCKSTEP_TIMEOUT") * 1000));
  const auto deadline = Clock::now() + timeout;
  std::optional<RendezvousFile> note;
  while (!(note = read_rendezvous_file(file, "srun rendezvous"))) {
    if (Clock::now() >= deadline)
      throw TimeoutError(fmt::format(
          "srun rendezvous: task 0 did not publish {} within {} s (LOCKSTEP_TIMEOUT); is the "
          "directory shared by every node of the job (LOCKSTEP_RENDEZVOUS_DIR)?",
          file, std::chrono::duration_cast<std::chrono::seconds>(timeout).count()));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  w.rendezvous = note->address;
  w.secret = note->secret;
}

void rendezvous_through_file(WorldInfo& w, const std::string& job, const std::string& step) {
  const std::string file = rendezvous_file(job, step);
  if (w.rank == 0)
    serve(w, file);
  else
    join(w, file);
}

#else

void rendezvous_through_file(WorldInfo&, const std::string&, const std::string&) {
  throw InvalidArgument(
      "srun job step across nodes: this lockstep was built without the "
      "rendezvous store (gloo); start the job with `lockstep run` instead");
}

#endif

}  // namespace

std::optional<WorldInfo> slurm_world() {
  const std::string step = env_or("SLURM_STEP_ID");
  const std::string job = env_or("SLURM_JOB_ID");
  if (step.empty() || job.empty() || env_or("SLURM_PROCID").empty()) return std::nullopt;
  WorldInfo w;
  w.rank = env_int("SLURM_PROCID", 0);
  w.size = env_int("SLURM_STEP_NUM_TASKS", env_int("SLURM_NTASKS", 1));
  w.cross_rank = env_int("SLURM_NODEID", 0);
  w.cross_size = env_int("SLURM_STEP_NUM_NODES", env_int("SLURM_NNODES", 1));
  w.local_rank = env_int("SLURM_LOCALID", 0);
  w.local_size = tasks_on_node(w.cross_rank, w.size);
  w.job_id = fmt::format("slurm{}-{}", job, step);
  if (needs_rendezvous(w)) rendezvous_through_file(w, job, step);
  return w;
}

}  // namespace lockstep::comm
