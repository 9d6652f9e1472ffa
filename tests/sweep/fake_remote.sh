#!/usr/bin/env bash
# A remote-exec wrapper for the sweep's -H test: `lockstep run` hands it
#   fake_remote.sh LOG HOST /abs/lockstep remote-worker
# as it would hand ssh. It appends HOST to LOG (proof the launcher went the
# remote way for that host) and runs the command here, as ssh would there.
set -eu
log=$1 host=$2
shift 2
echo "$host" >>"$log"
exec "$@"
