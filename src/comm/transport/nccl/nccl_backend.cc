#include "comm/transport/nccl/nccl_comm.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::comm::nccl {
namespace {

// The barrier's word, then one packed descriptor per rank.
constexpr size_t kDescOffset = 16;

std::string cuda_text(cudaError_t err) {
  return fmt::format("{} ({})", cudaGetErrorString(err), cudaGetErrorName(err));
}

}  // namespace

NcclBackend::NcclBackend(std::unique_ptr<Watchdog> watchdog, int device, int rank, int size,
                         bool verify_ops, std::vector<PeerRecord> peers)
    : watchdog_(std::move(watchdog)),
      peers_(std::move(peers)),
      device_(device),
      rank_(rank),
      size_(size),
      verify_ops_(verify_ops) {
  DeviceGuard guard(device_);
  // Non-blocking: the legacy default stream (used by code that names no
  // stream) must not serialise with the collectives.
  cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  cuda_check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
  cuda_check(cudaMalloc(&scratch_, kDescOffset + sizeof(kit::PackedDesc) * size_),
             "cudaMalloc(scratch)");
}

NcclBackend::~NcclBackend() {
  try {
    DeviceGuard guard(device_);
    // Peers may be gone at destruction: wait a little, never the whole
    // LOCKSTEP_TIMEOUT, then let close() abort.
    if (!pending_.empty()) wait_stream_for("destruction", std::chrono::milliseconds(10'000));
  } catch (const std::exception&) {
    // Already reported to whoever waited; the abort below cleans up.
  }
  try {
    DeviceGuard guard(device_);
    watchdog_->close();
    if (scratch_) cudaFree(scratch_);
    if (done_) cudaEventDestroy(done_);
    for (cudaEvent_t e : marks_) cudaEventDestroy(e);
    if (stream_) cudaStreamDestroy(stream_);
  } catch (const std::exception&) {
    // The device itself is unusable (cudaSetDevice failed): nothing to free.
  }
}

void NcclBackend::abandon() {
  watchdog_->abandon("abandoned after a failure in another part of the job");
}

void NcclBackend::begin(const kit::OpDesc& desc) {
  watchdog_->check_usable();
  if (verify_ops_ && size_ > 1) verify(desc);
}

void NcclBackend::note(std::string_view what) {
  if (pending_.empty()) {
    pending_ = what;
    pending_more_ = 0;
    pending_since_ = Clock::now();
  } else {
    ++pending_more_;
  }
}

void NcclBackend::enqueued(std::string_view what, ncclResult_t result) {
  note(what);
  watchdog_->settle(result, what, pending_since_);
}

void NcclBackend::cuda(std::string_view what, cudaError_t err) {
  // An error here is about the arguments of this call (or a sticky error
  // from earlier work, which the next wait reports with its operation).
  cuda_check(err, what);
  note(what);
}

void NcclBackend::finish() {
  if (!deferred_) wait_stream("collective");
}

void NcclBackend::wait_stream(std::string_view what) {
  wait_stream_for(what, watchdog_->policy().timeout);
}

void NcclBackend::wait_stream_for(std::string_view what, std::chrono::milliseconds limit) {
  watchdog_->check_usable();
  std::string label = pending_.empty() ? std::string(what) : pending_;
  if (pending_more_ > 0) label += fmt::format(" (and {} later operations)", pending_more_);
  Clock::time_point since = pending_.empty() ? Clock::now() : pending_since_;
  // The watchdog's deadline is LOCKSTEP_TIMEOUT from `since`: start it
  // earlier to give up after `limit` from now instead.
  since = std::min(since, Clock::now() - (watchdog_->policy().timeout - limit));
  cudaError_t err = cudaEventRecord(done_, stream_);
  if (err != cudaSuccess) watchdog_->fail_cuda(label, cuda_text(err));
  watchdog_->poll(
      [&] {
        cudaError_t e = cudaEventQuery(done_);
        if (e == cudaSuccess) return true;
        if (e != cudaErrorNotReady) watchdog_->fail_cuda(label, cuda_text(e));
        return false;
      },
      label, since);
  pending_.clear();
  pending_more_ = 0;
}

void NcclBackend::verify(const kit::OpDesc& desc) {
  kit::PackedDesc mine = kit::pack(desc);
  std::vector<kit::PackedDesc> words(size_);
  char* table = static_cast<char*>(scratch_) + kDescOffset;
  // From pageable memory: returns once `mine` is staged, so it may go out of
  // scope. The device-to-host copy waits until the allgather has completed
  // under the watchdog (a pageable copy blocks the host).
  cuda("verify", cudaMemcpyAsync(table + rank_ * sizeof mine, &mine, sizeof mine,
                                 cudaMemcpyHostToDevice, stream_));
  enqueued("verify", ncclAllGather(table + rank_ * sizeof mine, table, sizeof mine, ncclUint8,
                                   watchdog_->comm(), stream_));
  wait_stream("verify");
  cuda("verify",
       cudaMemcpyAsync(words.data(), table, sizeof mine * size_, cudaMemcpyDeviceToHost, stream_));
  wait_stream("verify");
  std::vector<kit::OpDesc> all(size_);
  for (int r = 0; r < size_; ++r) all[r] = kit::unpack(words[r]);
  // Every rank saw the same table, so all throw together and the
  // communicator stays usable.
  if (!kit::all_equal(all)) throw MismatchError(kit::mismatch_message(all));
}

void NcclBackend::barrier() {
  DeviceGuard guard(device_);
  begin(kit::barrier_desc());
  if (size_ > 1)
    enqueued("barrier",
             ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, watchdog_->comm(), stream_));
  wait_stream("barrier");
}

// --- DeviceMemory -------------------------------------------------------

void* NcclBackend::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  DeviceGuard guard(device_);
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it
    throw Error(fmt::format("nccl backend: cannot allocate {} bytes on GPU {}: {}", bytes, device_,
                            cuda_text(err)));
  }
  return p;
}

void NcclBackend::free(void* p) {
  if (!p) return;
  DeviceGuard guard(device_);
  // cudaFree waits for the whole device, and would hang behind a collective
  // whose peer died: finish the stream under the watchdog first.
  // After an abort the kernels have exited: nothing left to wait for.
  if (!pending_.empty() && watchdog_->usable()) wait_stream("free");
  cuda_check(cudaFree(p), "cudaFree");
}

void NcclBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  DeviceGuard guard(device_);
  watchdog_->check_usable();
  cuda("copy", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
}

void NcclBackend::local_copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  cuda("copy", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void NcclBackend::fill_zero(void* dst, size_t bytes) {
  if (bytes == 0) return;
  DeviceGuard guard(device_);
  watchdog_->check_usable();
  cuda("fill_zero", cudaMemsetAsync(dst, 0, bytes, stream_));
}

void NcclBackend::wait_event(void* cuda_event) {
  DeviceGuard guard(device_);
  watchdog_->check_usable();
  cuda_check(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(cuda_event), 0),
             "cudaStreamWaitEvent");
}

void NcclBackend::record_event(void* cuda_event) {
  DeviceGuard guard(device_);
  watchdog_->check_usable();
  cuda_check(cudaEventRecord(static_cast<cudaEvent_t>(cuda_event), stream_), "cudaEventRecord");
}

void NcclBackend::synchronize() {
  DeviceGuard guard(device_);
  wait_stream("synchronize");
}

void NcclBackend::mark() {
  DeviceGuard guard(device_);
  if (marks_used_ == marks_.size()) {
    cudaEvent_t e = nullptr;
    cuda_check(cudaEventCreate(&e), "cudaEventCreate");
    marks_.push_back(e);
  }
  cuda_check(cudaEventRecord(marks_[marks_used_++], stream_), "cudaEventRecord");
}

// Called after synchronize(): every recorded mark is complete. A mark that
// cannot be read (an aborted stream) leaves the timeline on host times.
std::vector<double> NcclBackend::take_marks() {
  DeviceGuard guard(device_);
  std::vector<double> seconds;
  for (size_t i = 0; i < marks_used_; ++i) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, marks_[0], marks_[i]) != cudaSuccess) {
      cudaGetLastError();  // not sticky: the next collective reports real errors
      seconds.clear();
      break;
    }
    seconds.push_back(ms / 1e3);
  }
  marks_used_ = 0;
  return seconds;
}

}  // namespace lockstep::comm::nccl
