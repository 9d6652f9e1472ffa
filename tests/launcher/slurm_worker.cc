// A worker for the Slurm test: joins the world the environment describes
// (srun's SLURM_* variables or lockstep run's LOCKSTEP_*), prints what it
// learned and checks an allreduce of rank + 1.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "lockstep/comm/communicator.h"

int main() {
  auto comm = lockstep::comm::Communicator::from_environment();
  const auto& w = comm->world();
  int value = w.rank + 1;
  comm->allreduce(&value, 1, lockstep::comm::DataType::kInt32, lockstep::comm::ReduceOp::kSum);
  comm->barrier();
  const int expected = w.size * (w.size + 1) / 2;
  std::printf("rank %d/%d local %d/%d host %d/%d backend %s job %s sum %d%s\n", w.rank, w.size,
              w.local_rank, w.local_size, w.cross_rank, w.cross_size,
              std::string(comm->backend_name()).c_str(), w.job_id.c_str(), value,
              value == expected ? "" : " WRONG");
  return value == expected ? 0 : 1;
}
