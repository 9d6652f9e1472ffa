#!/bin/sh
# run_mpi.sh NP PROGRAM [ARGS...]: runs PROGRAM on NP ranks with mpirun; the
# exit status is non-zero if any rank fails. Adds --allow-run-as-root when
# running as root (containers, CI) and --oversubscribe (NP may exceed cores).
np=$1
shift
flags="--oversubscribe --bind-to none"
[ "$(id -u)" = 0 ] && flags="$flags --allow-run-as-root"
exec "${MPIEXEC:-mpirun}" $flags -np "$np" "$@"
