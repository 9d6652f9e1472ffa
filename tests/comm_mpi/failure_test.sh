#!/bin/sh
# failure_test.sh RUN_MPI PROGRAM MODE: runs PROGRAM on 3 ranks and passes
# when both survivors (ranks 0 and 1) print "SURVIVOR OK". mpirun itself
# exits non-zero (a rank died or the job was aborted): that is expected.
run_mpi=$1
prog=$2
mode=$3
out=$("$run_mpi" 3 --enable-recovery "$prog" "$mode" 2>&1)
echo "$out"
echo "$out" | grep -q "SURVIVOR OK rank 0" && echo "$out" | grep -q "SURVIVOR OK rank 1"
