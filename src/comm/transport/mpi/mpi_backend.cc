#include "comm/transport/mpi/mpi_backend.h"

#include <climits>
#include <functional>
#include <vector>

#include <fmt/format.h>

#include "comm/transport/mpi/mpi_comm.h"
#include "comm/transport/mpi/mpi_runtime.h"
#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"

namespace lockstep::comm::mpi {
namespace {

std::unique_ptr<Backend> wrap(MPI_Comm comm, const kit::WaitPolicy& policy) {
  check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "mpi: setting the error handler");
  return std::make_unique<MpiBackend>(comm, policy, knob_bool("LOCKSTEP_VERIFY_OPS"));
}

MpiBackend& as_mpi(Backend& parent, const char* what) {
  auto* mpi = dynamic_cast<MpiBackend*>(&parent);
  if (!mpi)
    throw InvalidArgument(fmt::format("{}: the parent communicator uses the {} backend, not mpi",
                                      what, parent.name()));
  return *mpi;
}

}  // namespace

std::unique_ptr<Backend> make_backend(const WorldInfo& world, const std::string& /*tag*/) {
  // Checked before MPI_Init: without a launcher, Open MPI would start a
  // singleton world of one rank per process, which can never form the job.
  if (world.size > 1 && !started_by_mpi_launcher())
    throw InvalidArgument(fmt::format(
        "LOCKSTEP_BACKEND=mpi: this {}-rank job was not started by an MPI launcher. Start it "
        "with `mpirun -np {} <program>` (lockstep reads OMPI_COMM_WORLD_*), or keep `lockstep "
        "run` and use --backend gloo (across hosts) or shm (one host)",
        world.size, world.size));
  ensure_initialized();
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != world.size || rank != world.rank)
    throw InvalidArgument(fmt::format(
        "mpi backend: MPI_COMM_WORLD has rank {} of {} but the job description says rank {} of "
        "{}. A subset communicator must be built from its parent (make_subset_backend, which "
        "Communicator::split should call); otherwise do not set LOCKSTEP_RANK/LOCKSTEP_SIZE "
        "to values that differ from mpirun's",
        rank, size, world.rank, world.size));
  auto policy = kit::WaitPolicy::from_knobs(world.local_size);
  MPI_Comm comm;
  MPI_Request req;
  check(MPI_Comm_idup(MPI_COMM_WORLD, &comm, &req), "mpi: duplicating MPI_COMM_WORLD");
  wait_until(req, "mpi: creating the world communicator", policy.timeout);
  return wrap(comm, policy);
}

std::unique_ptr<Backend> make_subset_backend(Backend& parent, std::span<const int> ranks,
                                             const std::string& tag) {
  MpiBackend& p = as_mpi(parent, "split");
  MPI_Group all, sub;
  MPI_Comm_group(p.comm(), &all);
  MPI_Group_incl(all, static_cast<int>(ranks.size()), ranks.data(), &sub);
  // Concurrent MPI_Comm_create_group calls on one parent are told apart by tag.
  int mpi_tag = static_cast<int>(std::hash<std::string>{}(tag) % 32000);
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_Comm_create_group(p.comm(), sub, mpi_tag, &comm);
  MPI_Group_free(&sub);
  MPI_Group_free(&all);
  check(rc, fmt::format("split '{}': MPI_Comm_create_group", tag));
  return wrap(comm, p.policy());
}

std::unique_ptr<Backend> make_split_backend(Backend& parent, int color, int key) {
  MpiBackend& p = as_mpi(parent, "hierarchical split");
  MPI_Comm comm = MPI_COMM_NULL;
  check(MPI_Comm_split(p.comm(), color, key, &comm), "mpi: MPI_Comm_split");
  return wrap(comm, p.policy());
}

MpiBackend::MpiBackend(MPI_Comm comm, kit::WaitPolicy policy, bool verify_ops)
    : comm_(comm), verify_ops_(verify_ops), policy_(policy), watchdog_(comm, policy) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  int* ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
  if (found && ub) tag_ub_ = *ub;
}

MpiBackend::~MpiBackend() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
}

void MpiBackend::begin(const kit::OpDesc& desc) {
  watchdog_.begin(desc);
  if (verify_ops_ && size_ > 1) verify(desc);
}

void MpiBackend::verify(const kit::OpDesc& mine) {
  kit::PackedDesc packed = kit::pack(mine);
  std::vector<kit::PackedDesc> words(size_);
  MPI_Request req;
  check(MPI_Iallgather(packed.data(), 2, MPI_UINT64_T, words.data(), 2, MPI_UINT64_T, comm_, &req),
        "mpi: comparing op descriptors");
  // Liveness only: the peers' descriptors differ exactly when this exchange
  // is needed, and the watchdog's own comparison would throw while the
  // allgather is still posted (its buffers freed under MPI: a
  // use-after-free, and a communicator marked broken). Every rank reaches
  // this exchange, so it completes.
  watchdog_.wait(req, "verify", Watchdog::kAnyPeer);
  std::vector<kit::OpDesc> all(size_);
  for (int r = 0; r < size_; ++r) all[r] = kit::unpack(words[r]);
  // Every rank saw the same table, so every rank throws here together and
  // the communicator stays usable.
  if (!kit::all_equal(all)) throw MismatchError(kit::mismatch_message(all));
}

void MpiBackend::barrier() {
  begin(kit::barrier_desc());
  MPI_Request req;
  check(MPI_Ibarrier(comm_, &req), "barrier");
  wait(req, "barrier");
}

void MpiBackend::send(const void* buffer, size_t count, DataType dtype, int peer, int tag) {
  watchdog_.check_usable();
  size_t bytes = count * dtype_size(dtype);
  if (tag < 0 || tag > tag_ub_)
    throw InvalidArgument(fmt::format("send: tag {} is outside MPI's range [0, {}]", tag, tag_ub_));
  if (bytes > INT_MAX)
    throw InvalidArgument(
        fmt::format("send: {} bytes exceed MPI's int count; send pieces of at "
                    "most 2 GiB",
                    bytes));
  MPI_Request req;
  check(MPI_Isend(buffer, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &req), "send");
  watchdog_.wait(req, "send", peer);
}

void MpiBackend::recv(void* buffer, size_t count, DataType dtype, int peer, int tag) {
  watchdog_.check_usable();
  size_t bytes = count * dtype_size(dtype);
  if (tag < 0 || tag > tag_ub_)
    throw InvalidArgument(fmt::format("recv: tag {} is outside MPI's range [0, {}]", tag, tag_ub_));
  if (bytes > INT_MAX)
    throw InvalidArgument(
        fmt::format("recv: {} bytes exceed MPI's int count; receive pieces of "
                    "at most 2 GiB",
                    bytes));
  // Probe first: pairs match in order whatever the tag, as in the shm backend,
  // so a different tag or size is a MismatchError instead of a hang.
  MPI_Message message;
  MPI_Status status;
  watchdog_.probe(peer, "recv", &message, &status);
  int got = 0;
  MPI_Get_count(&status, MPI_BYTE, &got);
  bool match = status.MPI_TAG == tag && static_cast<size_t>(got) == bytes;
  std::vector<std::byte> discard;
  if (!match) discard.resize(static_cast<size_t>(got));
  MPI_Request req;
  check(MPI_Imrecv(match ? buffer : discard.data(), got, MPI_BYTE, &message, &req), "recv");
  watchdog_.wait(req, "recv", peer);
  if (!match)
    throw MismatchError(fmt::format(
        "recv from rank {}: expected tag {} and {} bytes, but rank {} sent tag {} with {} bytes "
        "(sends and receives between a pair must match in order)",
        peer, tag, bytes, peer, status.MPI_TAG, got));
}

}  // namespace lockstep::comm::mpi
