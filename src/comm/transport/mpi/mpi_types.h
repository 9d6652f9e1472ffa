// Mapping lockstep's element types and reduction operators onto MPI's.
//
// f32/f64/int types use MPI's predefined datatypes and operators. f16 and
// bf16 travel as opaque 16-bit words (MPI_UINT16_T) and are combined by
// user-defined operators that call lockstep's reduction kernels, so every
// pairwise combine accumulates in f32 and rounds once. int8/uint8 use the
// kernels too (Open MPI 4.1's AVX operators saturate them). kAverage maps to a sum;
// the caller divides afterwards (see needs_wide_average for integers).
#pragma once

#include <mpi.h>

#include "lockstep/comm/types.h"

namespace lockstep::comm::mpi {

MPI_Datatype datatype(DataType dtype);
// The operator that reduces `dtype` for `op` (kAverage: the sum). Requires
// MPI to be initialised; user-defined operators are created once.
MPI_Op reduce_op(DataType dtype, ReduceOp op);
// i8/u8/i32 averages are summed in int64, as the kernels accumulate, so the
// narrow sum cannot wrap before the division.
bool needs_wide_average(DataType dtype, ReduceOp op);

}  // namespace lockstep::comm::mpi
