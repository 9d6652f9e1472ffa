#include "comm/transport/mpi/mpi_runtime.h"

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/log.h"
#include "lockstep/base/mutex.h"

namespace lockstep::comm::mpi {
namespace {

Mutex g_mutex;
bool g_we_initialized LOCKSTEP_GUARDED_BY(g_mutex) = false;
bool g_broken LOCKSTEP_GUARDED_BY(g_mutex) = false;
std::string g_broken_reason LOCKSTEP_GUARDED_BY(g_mutex);

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  std::string reason;
  bool broken;
  {
    MutexLock lock(g_mutex);
    broken = g_broken;
    reason = g_broken_reason;
  }
  if (broken) {
    // A request is still posted against a dead or stuck peer; MPI_Finalize
    // would wait for it forever. End the job the MPI way instead.
    std::fprintf(stderr, "lockstep: MPI communicator failed earlier (%s); calling MPI_Abort\n",
                 reason.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return;
  }
  MPI_Finalize();
}

}  // namespace

void ensure_initialized() {
  MutexLock lock(g_mutex);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    throw Error(
        "mpi backend: MPI was already finalized in this process; create every MPI "
        "communicator before MPI_Finalize");
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  g_we_initialized = true;
  std::atexit(finalize_at_exit);
  if (provided < MPI_THREAD_SERIALIZED)
    log(LogLevel::kWarning,
        "mpi backend: the MPI library provides thread level {} (< MPI_THREAD_SERIALIZED); "
        "drive every communicator from the thread that created the first one",
        provided);
}

bool started_by_mpi_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

void mark_broken(const std::string& reason) {
  MutexLock lock(g_mutex);
  if (!g_broken) g_broken_reason = reason;
  g_broken = true;
}

void check(int rc, std::string_view what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(fmt::format("{} failed: {} (MPI error {})", what, std::string_view(text, len), rc));
}

}  // namespace lockstep::comm::mpi
