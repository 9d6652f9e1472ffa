// Internal: the hierarchical Backend (see hierarchical_backend.h).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/comm/backend.h"

namespace lockstep::comm::hierarchical {

class HierarchicalBackend final : public Backend {
 public:
  // local_ranks / cross_ranks: the global rank of each rank of `local` and
  // `cross`, so that their errors name global ranks.
  HierarchicalBackend(std::string name, std::unique_ptr<Backend> flat,
                      std::unique_ptr<Backend> local, std::unique_ptr<Backend> cross,
                      std::vector<int> local_ranks, std::vector<int> cross_ranks);

  std::string_view name() const override { return name_; }
  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }
  Backend& flat() { return *flat_; }
  void abandon() override {
    flat_->abandon();
    local_->abandon();
    cross_->abandon();
  }

  void allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) override;
  void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
              int root) override {
    flat_->reduce(send, recv, count, dtype, op, root);
  }
  void broadcast(void* buffer, size_t count, DataType dtype, int root) override {
    flat_->broadcast(buffer, count, dtype, root);
  }
  void allgatherv(const void* send, void* recv, std::span<const size_t> counts,
                  DataType dtype) override {
    flat_->allgatherv(send, recv, counts, dtype);
  }
  void gatherv(const void* send, void* recv, std::span<const size_t> counts, DataType dtype,
               int root) override {
    flat_->gatherv(send, recv, counts, dtype, root);
  }
  void scatter(const void* send, void* recv, size_t count, DataType dtype, int root) override {
    flat_->scatter(send, recv, count, dtype, root);
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                      ReduceOp op) override {
    flat_->reduce_scatter(send, recv, count, dtype, op);
  }
  void alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                 std::span<const size_t> recv_counts, DataType dtype) override {
    flat_->alltoallv(send, send_counts, recv, recv_counts, dtype);
  }
  void barrier() override { flat_->barrier(); }
  void send(const void* buffer, size_t count, DataType dtype, int peer, int tag) override {
    flat_->send(buffer, count, dtype, peer, tag);
  }
  void recv(void* buffer, size_t count, DataType dtype, int peer, int tag) override {
    flat_->recv(buffer, count, dtype, peer, tag);
  }

 private:
  template <typename Stage>
  void run_stage(const char* what, Backend& group, const std::vector<int>& global, Stage stage);
  std::string name_;
  std::unique_ptr<Backend> flat_;
  std::unique_ptr<Backend> local_;  // this host's ranks, shared memory
  std::unique_ptr<Backend> cross_;  // one rank per host, same local rank
  std::vector<int> local_ranks_, cross_ranks_;
  std::vector<std::byte> padded_;  // reused staging buffers
  std::vector<std::byte> slice_;
};

}  // namespace lockstep::comm::hierarchical
