#include "comm/transport/mpi/mpi_types.h"

#include <mutex>

#include "comm/kernels/reduce.h"
#include "lockstep/base/error.h"

namespace lockstep::comm::mpi {
namespace {

// MPI calls this with inout = in (op) inout; our operators are commutative.
template <DataType D, ReduceOp O>
void kernel_op(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const void* operands[2] = {in, inout};
  kernels::reduce(D, O, operands, 2, inout, static_cast<size_t>(*len), 1);
}

template <DataType D>
void create_ops(MPI_Op* ops) {
  MPI_Op_create(&kernel_op<D, ReduceOp::kSum>, 1, &ops[0]);
  MPI_Op_create(&kernel_op<D, ReduceOp::kMin>, 1, &ops[1]);
  MPI_Op_create(&kernel_op<D, ReduceOp::kMax>, 1, &ops[2]);
  MPI_Op_create(&kernel_op<D, ReduceOp::kProduct>, 1, &ops[3]);
}

int op_index(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return 0;
    case ReduceOp::kMin: return 1;
    case ReduceOp::kMax: return 2;
    case ReduceOp::kProduct: return 3;
  }
  throw InvalidArgument("mpi backend: unknown reduce op");
}

}  // namespace

MPI_Datatype datatype(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16:
    case DataType::kBFloat16: return MPI_UINT16_T;
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kInt16: return MPI_INT16_T;
  }
  throw InvalidArgument("mpi backend: unknown dtype");
}

MPI_Op reduce_op(DataType dtype, ReduceOp op) {
  // 16-bit floats have no MPI type. 8-bit integers do, but Open MPI 4.1's
  // AVX operators saturate int8/uint8 sums instead of wrapping (measured:
  // 100 + 100 -> 127), so lockstep's kernels reduce those too; int16 goes
  // the same way since the same AVX unit provides its operators.
  if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 || dtype == DataType::kInt8 ||
      dtype == DataType::kUInt8 || dtype == DataType::kInt16) {
    // Freed by MPI_Finalize; never freed earlier since communicators may
    // outlive each other.
    static MPI_Op ops[5][4];
    static std::once_flag once;
    std::call_once(once, [] {
      create_ops<DataType::kFloat16>(ops[0]);
      create_ops<DataType::kBFloat16>(ops[1]);
      create_ops<DataType::kInt8>(ops[2]);
      create_ops<DataType::kUInt8>(ops[3]);
      create_ops<DataType::kInt16>(ops[4]);
    });
    int row = dtype == DataType::kFloat16    ? 0
              : dtype == DataType::kBFloat16 ? 1
              : dtype == DataType::kInt8     ? 2
              : dtype == DataType::kUInt8    ? 3
                                             : 4;
    return ops[row][op_index(op)];
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return MPI_SUM;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kProduct: return MPI_PROD;
  }
  throw InvalidArgument("mpi backend: unknown reduce op");
}

bool needs_wide_average(DataType dtype, ReduceOp op) {
  return op == ReduceOp::kAverage && (dtype == DataType::kInt8 || dtype == DataType::kUInt8 ||
                                      dtype == DataType::kInt16 || dtype == DataType::kInt32);
}

}  // namespace lockstep::comm::mpi
