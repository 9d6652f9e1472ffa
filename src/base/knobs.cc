#include "lockstep/base/knobs.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/knob_suggest.h"

namespace lockstep {
namespace {

// Keep sorted by layer, then name. Defaults are justified in docs/knobs.md.
constexpr std::array kKnobs = {
    // --- base / all layers
    Knob{"LOCKSTEP_LOG_LEVEL", "warning", "what lockstep logs to stderr",
         "error|warning|info|debug"},
    // --- job identity, set by `lockstep run` (or read from mpirun/srun)
    Knob{"LOCKSTEP_RANK", "0", "this worker's global rank", "", kLauncher},
    Knob{"LOCKSTEP_SIZE", "1", "number of workers in the job", "", kLauncher},
    Knob{"LOCKSTEP_LOCAL_RANK", "0", "rank among the workers on this host", "", kLauncher},
    Knob{"LOCKSTEP_LOCAL_SIZE", "1", "number of workers on this host", "", kLauncher},
    Knob{"LOCKSTEP_CROSS_RANK", "0", "index of this host among the job's hosts", "", kLauncher},
    Knob{"LOCKSTEP_CROSS_SIZE", "1", "number of hosts in the job", "", kLauncher},
    Knob{"LOCKSTEP_HOST", "", "this worker's host as the launcher names it (-H); empty = host name",
         "", kLauncher},
    Knob{"LOCKSTEP_JOB_ID", "", "unique job id; names the job's shared-memory segments", "",
         kLauncher},
    Knob{"LOCKSTEP_RENDEZVOUS", "", "host:port of the launcher's rendezvous store", "", kLauncher},
    Knob{"LOCKSTEP_ELASTIC", "0", "1 in workers of an elastic job (lockstep run --min-np/--max-np)",
         "", kLauncher},
    Knob{"LOCKSTEP_WORKER_ID", "", "elastic: this worker's stable id (its world rank changes)", "",
         kLauncher},
    Knob{"LOCKSTEP_ELASTIC_GENERATION", "0",
         "elastic: the generation of the world this worker starts in", "", kLauncher},
    Knob{"LOCKSTEP_SECRET", "", "per-job secret authenticating rendezvous traffic (hex)", "",
         kLauncher},
    Knob{"LOCKSTEP_RENDEZVOUS_DIR", "",
         "plain srun across nodes, or torchrun's variables without LOCKSTEP_SECRET: directory "
         "(shared by the hosts) for rank 0's 0600 rendezvous file; empty = SLURM_SUBMIT_DIR "
         "under srun, else the working directory"},
    Knob{"LOCKSTEP_OVERLAP", "auto",
         "allreduce gradients during backward (on) or fused once per step (off), and leave "
         "ZeRO's parameter all-gather to the next forward (on); auto = on across hosts or with "
         "a spare core",
         "auto|on|off"},
    Knob{
        "LOCKSTEP_SERVERS", "0",
        "dedicated parameter-server ranks (the last K of the job); set by lockstep run --servers K"},
    Knob{"LOCKSTEP_BIND_TO", "auto", "CPU affinity per worker, applied by the torch layer",
         "core|none|auto"},
    Knob{"LOCKSTEP_DEVICE", "auto",
         "where each worker computes (the torch layer): cuda = visible GPU local rank % GPUs, "
         "made the current device; auto = cuda when LibTorch sees a GPU",
         "cpu|cuda|auto"},
    Knob{"LOCKSTEP_DEVICE_BACKEND", "auto",
         "how CUDA tensors travel: nccl (GPU to GPU, needs one GPU per worker) or host (staged "
         "through pinned host memory over LOCKSTEP_BACKEND); auto = nccl when built in and no "
         "two workers of a host share a GPU",
         "auto|nccl|host"},
    Knob{"LOCKSTEP_FINGERPRINT_EVERY", "100",
         "DistributedOptimizer compares parameter fingerprints across ranks at the first step and "
         "every N steps (0 = never)"},
    Knob{"LOCKSTEP_INTRA_OP_THREADS", "auto",
         "LibTorch intra-op threads per worker (lockstep run --threads-per-worker): a whole "
         "number, or auto (or 0) = CPUs / workers on this host, at least 1 (a process no "
         "launcher placed: the CPUs other processes leave idle)"},
    Knob{"LOCKSTEP_PROFILE", "",
         "rank 0 records a step profile for `lockstep plan` into this file (docs/plan.md)"},
    Knob{"LOCKSTEP_PROFILE_WARMUP", "5", "profile: steps skipped before recording"},
    Knob{"LOCKSTEP_PROFILE_STEPS", "20", "profile: steps recorded, then the file is written"},
    // --- comm
    Knob{"LOCKSTEP_BACKEND", "auto",
         "transport between workers (every transport built in is one of the choices: "
         "lockstep config names the built ones)",
         "auto|shm|mpi|gloo|nccl"},
    Knob{"LOCKSTEP_TIMEOUT", "300",
         "seconds a collective may wait on a live peer before failing (dead peers fail in ~1 s)"},
    Knob{"LOCKSTEP_WAIT_WARNING", "10",
         "seconds a collective waits on a live peer before logging who it waits for (again "
         "at every doubling: 10, 20, 40 s...); 0 = never"},
    Knob{"LOCKSTEP_SHM_CMA", "off",
         "on: 2-rank allreduce of at least LOCKSTEP_SHM_CMA_BYTES reads the peer's buffers "
         "directly (process_vm_readv) where the kernel allows it (probed once); off (default: "
         "slower than the staged path on the hosts measured, docs/performance.md); set it the "
         "same on every rank",
         "off|on"},
    Knob{"LOCKSTEP_SHM_CMA_BYTES", "2MiB",
         "with LOCKSTEP_SHM_CMA=on, 2-rank allreduce at or above this size uses the single-copy "
         "path"},
    Knob{"LOCKSTEP_SHM_SLOT_BYTES", "1MiB",
         "per-rank shared-memory staging slot (two buffers); bounds the one-step and chunk sizes"},
    Knob{"LOCKSTEP_SHM_SMALL_BYTES", "16KiB",
         "allreduce uses the one-step (latency) algorithm while it reads at most this many bytes "
         "from peers ((ranks-1) x message size; 2 ranks: messages up to this size)"},
    Knob{"LOCKSTEP_SHM_ALGORITHM", "auto",
         "shm allreduce algorithm: auto (by ranks and size, docs/shm.md), legacy (the rule "
         "before issue 28, for comparison), or force one_step / two_step / two_level (two_step "
         "where ranks form no node groups); same on every rank",
         "auto|legacy|one_step|two_step|two_level"},
    Knob{"LOCKSTEP_SHM_CHUNK_BYTES", "auto",
         "two-step allreduce chunk (pipelined, three per rank in its two slots); auto = "
         "max(64KiB, 4MiB / ranks), at most half a slot"},
    Knob{"LOCKSTEP_SHM_NODES", "auto",
         "shm ranks grouped by NUMA node for the two_level allreduce: auto (from the CPUs each "
         "rank is bound to when its communicator starts; contiguous equal groups or none), off, "
         "or a number of contiguous equal groups; same on every rank"},
    Knob{"LOCKSTEP_SHM_SYNC", "auto",
         "how a shm step waits for the other ranks: linear (poll every peer) or dissemination "
         "(log2(ranks) rounds); auto = dissemination from 5 ranks when each has a core; same "
         "on every rank",
         "auto|linear|dissemination"},
    Knob{"LOCKSTEP_SHM_STREAM_BYTES", "8MiB",
         "allreduce messages at least this large write results with non-temporal stores"},
    Knob{
        "LOCKSTEP_SPIN_US", "auto",
        "microseconds a wait busy-polls before giving up the core (shm, mpi); auto = 50, or 0 when "
        "this host runs more ranks than cores"},
    Knob{"LOCKSTEP_IDLE_SPIN_US", "auto",
         "microseconds a shm wait keeps busy-polling, past LOCKSTEP_SPIN_US, while the engine's "
         "caller is blocked on the result (its core is idle otherwise); auto = 40 x "
         "LOCKSTEP_SPIN_US (2 ms, or 0 when that is 0); 0 = off"},
    Knob{"LOCKSTEP_KERNELS", "auto", "reduction kernel family", "auto|avx2|scalar"},
    Knob{"LOCKSTEP_HIERARCHICAL", "auto",
         "multi-host allreduce as shm reduce-scatter + cross-host allreduce + shm allgather "
         "(auto: when hosts hold several ranks)",
         "auto|0|1"},
    Knob{"LOCKSTEP_GLOO_FILE_STORE", "",
         "gloo: rendezvous through this shared directory instead of the launcher's store"},
    Knob{"LOCKSTEP_NETWORK_INTERFACE", "",
         "gloo: network interface (e.g. eth0) for TCP between hosts; empty = the one that "
         "routes to the launcher's rendezvous store"},
    Knob{"LOCKSTEP_NCCL_BLOCKING", "0",
         "nccl: 0 = non-blocking communicator (no NCCL call blocks past LOCKSTEP_TIMEOUT); 1 = "
         "NCCL's blocking mode (cheaper enqueue; a call may block while NCCL connects)",
         "0|1"},
    Knob{"LOCKSTEP_VERIFY_OPS", "0",
         "mpi/gloo/nccl: 1 = compare every collective's descriptor across ranks first (one small "
         "allgather) so mismatches fail cleanly"},
    // --- engine
    Knob{"LOCKSTEP_FUSION_THRESHOLD", "1MiB",
         "bytes of ready tensors fused into one collective (default measured: docs/engine.md)"},
    Knob{"LOCKSTEP_DETERMINISTIC", "0",
         "1: bitwise-identical results whatever the fusion threshold or algorithm"},
    Knob{"LOCKSTEP_STALL_WARNING", "10",
         "seconds before rank 0 logs which ranks have not submitted a tensor"},
    Knob{"LOCKSTEP_STALL_TIMEOUT", "300",
         "seconds before pending tensors that some ranks never submitted fail"},
    Knob{"LOCKSTEP_DEADLOCK_TIMEOUT", "1",
         "seconds every rank may be blocked waiting with no pending operation able to complete "
         "before those operations fail with a deadlock report; 0 = off"},
    Knob{"LOCKSTEP_FLIGHT_RECORDER", "1024",
         "operations each rank's flight recorder keeps for failure dumps; 0 = off"},
    Knob{"LOCKSTEP_FLIGHT_DIR", "",
         "folder for flight-recorder dumps (rank<R>.json); empty = $TMPDIR/lockstep-flight-<job>"},
    Knob{"LOCKSTEP_TIMELINE", "", "path of a Chrome-trace timeline to write"},
    Knob{"LOCKSTEP_AUTOTUNE", "0", "1: tune the fusion threshold online"},
    Knob{"LOCKSTEP_AUTOTUNE_SAMPLES", "10",
         "autotune: cycles that move allreduce data timed per candidate fusion threshold"},
    Knob{"LOCKSTEP_CACHE_CAPACITY", "1024",
         "names the engine remembers so repeats negotiate with one bit (least recently used go)"},
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

std::span<const Knob> all_knobs() { return kKnobs; }

const Knob& knob(std::string_view name) {
  auto it =
      std::find_if(kKnobs.begin(), kKnobs.end(), [&](const Knob& k) { return k.name == name; });
  if (it == kKnobs.end())
    throw InvalidArgument(fmt::format("unknown knob {}{}: declare it in src/base/knobs.cc", name,
                                      did_you_mean(name)));
  return *it;
}

std::vector<std::string> knob_choices(const Knob& k) {
  std::vector<std::string> out;
  std::string_view rest = k.choices;
  while (!rest.empty()) {
    auto bar = rest.find('|');
    out.emplace_back(rest.substr(0, bar));
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
  }
  return out;
}

std::string knob_string(std::string_view name, KnobRead from) {
  const Knob& k = knob(name);
  const char* env =
      from == KnobRead::kEnvironment ? std::getenv(std::string(name).c_str()) : nullptr;
  return env ? std::string(env) : std::string(k.default_value);
}

std::string knob_choice(std::string_view name, KnobRead from) {
  std::string value = knob_string(name, from);
  std::vector<std::string> choices = knob_choices(knob(name));
  if (!choices.empty() && std::find(choices.begin(), choices.end(), value) == choices.end())
    throw InvalidArgument(fmt::format("{}='{}' is not one of {}", name, value, knob(name).choices));
  return value;
}

bool knob_is_set(std::string_view name) {
  knob(name);
  return std::getenv(std::string(name).c_str()) != nullptr;
}

int64_t knob_int(std::string_view name, KnobRead from) {
  std::string text = knob_string(name, from);
  std::string_view v = trim(text);
  int64_t out = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || ptr != v.data() + v.size())
    throw InvalidArgument(fmt::format("{}='{}' is not an integer", name, text));
  return out;
}

double knob_double(std::string_view name, KnobRead from) {
  std::string text = knob_string(name, from);
  char* end = nullptr;
  double out = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || !trim(end).empty())
    throw InvalidArgument(fmt::format("{}='{}' is not a number", name, text));
  return out;
}

bool knob_bool(std::string_view name, KnobRead from) {
  std::string v = knob_string(name, from);
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off" || v.empty()) return false;
  throw InvalidArgument(fmt::format("{}='{}' is not a boolean (use 0 or 1)", name, v));
}

uint64_t knob_bytes(std::string_view name, KnobRead from) {
  return parse_bytes(knob_string(name, from), name);
}

uint64_t parse_bytes(std::string_view text, std::string_view what) {
  std::string_view v = trim(text);
  uint64_t number = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), number);
  if (ec != std::errc() || ptr == v.data())
    throw InvalidArgument(fmt::format("{}: '{}' is not a size like 8B, 64KiB, 256MiB", what, text));
  std::string unit(trim(std::string_view(ptr, v.data() + v.size() - ptr)));
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  uint64_t scale = 0;
  if (unit.empty() || unit == "b")
    scale = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib")
    scale = 1ull << 10;
  else if (unit == "m" || unit == "mb" || unit == "mib")
    scale = 1ull << 20;
  else if (unit == "g" || unit == "gb" || unit == "gib")
    scale = 1ull << 30;
  if (scale == 0)
    throw InvalidArgument(
        fmt::format("{}: unknown unit in '{}' (use B, KiB, MiB, GiB)", what, text));
  return number * scale;
}

}  // namespace lockstep
