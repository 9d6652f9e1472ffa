// Internal: the Gloo Backend implementation (see gloo_backend.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gloo/context.h>
#include <gloo/rendezvous/store.h>

#include "comm/kit/liveness.h"
#include "comm/kit/op_desc.h"
#include "lockstep/base/error.h"
#include "lockstep/comm/backend.h"

namespace lockstep::comm::gloo_transport {

// Where a peer runs, to tell a dead peer from a live one after an error.
struct PeerInfo {
  std::string host;
  int pid = 0;
};

class GlooBackend final : public Backend {
 public:
  GlooBackend(std::shared_ptr<::gloo::Context> context,
              std::unique_ptr<::gloo::rendezvous::Store> store, std::vector<PeerInfo> peers,
              std::chrono::milliseconds timeout, bool verify_ops);
  // Ends with a barrier so no peer sees this rank's connections close while
  // it still reads from them ("Connection closed by peer").
  ~GlooBackend() override;

  std::string_view name() const override { return "gloo"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void abandon() override {
    if (broken_.empty()) broken_ = "abandoned after a failure in another part of the job";
  }

  void allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) override;
  void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
              int root) override;
  void broadcast(void* buffer, size_t count, DataType dtype, int root) override;
  void allgatherv(const void* send, void* recv, std::span<const size_t> counts,
                  DataType dtype) override;
  void gatherv(const void* send, void* recv, std::span<const size_t> counts, DataType dtype,
               int root) override;
  void scatter(const void* send, void* recv, size_t count, DataType dtype, int root) override;
  void reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                      ReduceOp op) override;
  void alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                 std::span<const size_t> recv_counts, DataType dtype) override;
  void barrier() override;
  void send(const void* buffer, size_t count, DataType dtype, int peer, int tag) override;
  void recv(void* buffer, size_t count, DataType dtype, int peer, int tag) override;

 private:
  // Announces a collective: usability check, a fresh Gloo tag, and with
  // verify_ops_ a descriptor comparison across ranks (gloo_backend.cc).
  void begin(const kit::OpDesc& desc);
  // Runs a Gloo call, translating its exceptions (gloo_errors.cc).
  template <typename F>
  void guarded(const char* what, F&& call);
  [[noreturn]] void fail(const char* what, const std::string& gloo_message);
  int find_dead_peer(std::chrono::milliseconds grace) const;
  std::string laggards();
  void check_usable() const;

  void allreduce_impl(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  void allgather_raw(const void* send, void* recv, size_t count_each_bytes);
  uint64_t p2p_slot(int peer, bool sending);

  std::shared_ptr<::gloo::Context> context_;
  std::unique_ptr<::gloo::rendezvous::Store> store_;
  std::vector<PeerInfo> peers_;
  kit::PeerLiveness liveness_;  // peers on this host, by pid
  std::chrono::milliseconds timeout_;
  bool verify_ops_;
  int rank_;
  int size_;
  uint32_t tag_ = 0;
  uint64_t seq_ = 0;
  std::vector<uint64_t> sent_, received_;  // p2p messages per peer
  std::string broken_;
};

template <typename F>
void GlooBackend::guarded(const char* what, F&& call) {
  check_usable();
  try {
    call();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(what, e.what());
  }
}

}  // namespace lockstep::comm::gloo_transport
