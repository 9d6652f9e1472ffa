// A program outside the lockstep tree, built against the installed package.
#include <cstdio>

#include "lockstep/comm/communicator.h"

int main() {
  auto comm = lockstep::comm::Communicator::from_environment();
  int value = 42;
  comm->allreduce(&value, 1, lockstep::comm::DataType::kInt32, lockstep::comm::ReduceOp::kSum);
  std::printf("backend=%s size=%d sum=%d\n", std::string(comm->backend_name()).c_str(),
              comm->size(), value);
  return value == 42 * comm->size() ? 0 : 1;
}
