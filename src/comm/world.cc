#include "lockstep/comm/world.h"

#include <cstdlib>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "comm/slurm_world.h"
#include "comm/torchrun_world.h"

namespace lockstep::comm {
namespace {

std::optional<int> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0') throw InvalidArgument(fmt::format("{}='{}' is not an integer", name, v));
  return static_cast<int>(x);
}

// First variable of the list that is set.
std::optional<int> first_of(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (auto v = env_int(n)) return v;
  return std::nullopt;
}

WorldInfo from_lockstep_env() {
  WorldInfo w;
  w.rank = static_cast<int>(knob_int("LOCKSTEP_RANK"));
  w.size = static_cast<int>(knob_int("LOCKSTEP_SIZE"));
  w.local_rank = static_cast<int>(knob_int("LOCKSTEP_LOCAL_RANK"));
  w.local_size = static_cast<int>(knob_int("LOCKSTEP_LOCAL_SIZE"));
  w.cross_rank = static_cast<int>(knob_int("LOCKSTEP_CROSS_RANK"));
  w.cross_size = static_cast<int>(knob_int("LOCKSTEP_CROSS_SIZE"));
  w.job_id = knob_string("LOCKSTEP_JOB_ID");
  w.rendezvous = knob_string("LOCKSTEP_RENDEZVOUS");
  w.secret = knob_string("LOCKSTEP_SECRET");
  return w;
}

// mpirun (Open MPI) and PMI-based launchers (srun: slurm_world.h).
std::optional<WorldInfo> from_mpi_env() {
  auto rank = first_of({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"});
  auto size = first_of({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"});
  if (!rank || !size) return std::nullopt;
  WorldInfo w;
  w.rank = *rank;
  w.size = *size;
  w.local_rank = first_of({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}).value_or(w.rank);
  w.local_size = first_of({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}).value_or(w.size);
  // Open MPI has no host-index variable (OMPI_COMM_WORLD_NODE_RANK is the
  // rank within the host); with by-slot placement hosts hold consecutive ranks.
  w.cross_size = std::max(1, w.size / std::max(1, w.local_size));
  w.cross_rank = w.rank / std::max(1, w.local_size);
  if (const char* job = std::getenv("OMPI_MCA_ess_base_jobid"))
    w.job_id = fmt::format("mpi{}", job);
  return w;
}

}  // namespace

WorldInfo WorldInfo::from_environment() {
  WorldInfo w;
  // The innermost launcher's variables win: mpirun inside an allocation also
  // sees the batch step's SLURM_* values, and torchrun's workers inherit
  // those of the srun or mpirun task that started torchrun.
  if (knob_is_set("LOCKSTEP_RANK") || knob_is_set("LOCKSTEP_SIZE")) {
    w = from_lockstep_env();
  } else if (auto torchrun = torchrun_world()) {
    w = *torchrun;
  } else if (std::getenv("OMPI_COMM_WORLD_RANK")) {
    w = *from_mpi_env();
  } else if (auto srun = slurm_world()) {
    w = *srun;
  } else if (auto pmi = from_mpi_env()) {
    w = *pmi;
  }
  w.validate();
  return w;
}

void WorldInfo::validate() const {
  auto fail = [](std::string what) {
    throw InvalidArgument("inconsistent job description: " + what +
                          " (start workers with `lockstep run` or mpirun)");
  };
  if (size < 1) fail(fmt::format("size {} < 1", size));
  if (rank < 0 || rank >= size) fail(fmt::format("rank {} not in [0, {})", rank, size));
  if (local_size < 1 || local_size > size)
    fail(fmt::format("local size {} not in [1, {}]", local_size, size));
  if (local_rank < 0 || local_rank >= local_size)
    fail(fmt::format("local rank {} not in [0, {})", local_rank, local_size));
  if (cross_size < 1 || cross_rank < 0 || cross_rank >= cross_size)
    fail(fmt::format("cross rank {} / cross size {}", cross_rank, cross_size));
  for (char c : job_id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_')
      fail(fmt::format("job id '{}' may only hold letters, digits, '-' and '_'", job_id));
}

}  // namespace lockstep::comm
