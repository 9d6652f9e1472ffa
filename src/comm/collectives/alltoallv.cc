// Backend::alltoallv by default, from two allgathervs:
//   1. every rank's send and receive counts, so that every rank checks every
//      pair and all fail together with MismatchError when rank i sends rank
//      j a different number of elements than j expects;
//   2. every rank's whole send buffer, from which each rank copies the
//      blocks addressed to it (size() times the traffic of a true alltoall).
#include <vector>

#include <fmt/format.h>

#include "comm/collectives/scratch.h"
#include "lockstep/base/error.h"
#include "lockstep/comm/backend.h"

namespace lockstep::comm {
namespace {

// table[i * 2n + j]: elements rank i sends rank j; table[i * 2n + n + j]:
// elements rank i expects from rank j.
std::vector<uint64_t> counts_table(Backend& b, std::span<const size_t> send_counts,
                                   std::span<const size_t> recv_counts) {
  size_t n = static_cast<size_t>(b.size());
  std::vector<uint64_t> mine(2 * n);
  for (size_t j = 0; j < n; ++j) {
    mine[j] = send_counts[j];
    mine[n + j] = recv_counts[j];
  }
  std::vector<uint64_t> table(2 * n * n);
  b.allgatherv(mine.data(), table.data(), std::vector<size_t>(n, 2 * n), DataType::kInt64);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      uint64_t sends = table[i * 2 * n + j], expects = table[j * 2 * n + n + i];
      if (sends != expects)
        throw MismatchError(
            fmt::format("alltoall: rank {} sends {} elements to rank {}, which expects {} from it",
                        i, sends, j, expects));
    }
  return table;
}

}  // namespace

void Backend::alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                        std::span<const size_t> recv_counts, DataType dtype) {
  size_t n = static_cast<size_t>(size()), es = dtype_size(dtype);
  std::vector<uint64_t> table = counts_table(*this, send_counts, recv_counts);
  // sent[i]: rank i's whole send buffer; start[i * n + j]: where its block
  // for rank j begins in the gathered buffer.
  std::vector<size_t> sent(n, 0), start(n * n, 0);
  size_t at = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      start[i * n + j] = at;
      sent[i] += table[i * 2 * n + j];
      at += table[i * 2 * n + j];
    }
  std::vector<std::byte> gathered(at * es);
  allgatherv(send, gathered.data(), sent, dtype);
  size_t out = 0;
  for (size_t i = 0; i < n; ++i) {
    size_t block = recv_counts[i] * es;
    derived::copy(derived::bytes(recv) + out, gathered.data() + start[i * n + rank()] * es, block);
    out += block;
  }
}

}  // namespace lockstep::comm
