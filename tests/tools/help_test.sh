#!/usr/bin/env bash
# `lockstep --help` names every command the tools build (docs that stay true):
# each tools/*/ executable lockstep-X is `lockstep X`, lockstep-bench-X is
# `lockstep bench X`; helper binaries that are no command are listed below.
set -uo pipefail
BIN=${1:?usage: help_test.sh BIN_DIR TOOLS_DIR}
TOOLS=${2:?usage: help_test.sh BIN_DIR TOOLS_DIR}
# plan-synthetic: the planner's synthetic model, run by plan validate;
# convert-checkpoint: `lockstep convert checkpoint`, run by lockstep-convert.
not_commands="plan-synthetic convert-checkpoint"
help=$("$BIN/lockstep" --help) || { echo "FAILED: lockstep --help exited $?"; exit 1; }
bench_line=$(grep -E '^  bench (engine|[a-z|]+) ' <<<"$help" | tr '\n' ' ')
status=0 checked=0
for name in $(grep -hoE 'add_executable\(lockstep-[a-z-]+' "$TOOLS"/*/CMakeLists.txt | sed 's/add_executable(lockstep-//'); do
  [[ " $not_commands " == *" $name "* ]] && continue
  checked=$((checked + 1))
  if [[ $name == bench-* ]]; then
    grep -qE "(^|[ |])${name#bench-}([ |]|$)" <<<"$bench_line" ||
      { echo "FAILED: lockstep --help has no 'bench ${name#bench-}' (tools build lockstep-$name)"; status=1; }
  else
    grep -qE "^  $name " <<<"$help" ||
      { echo "FAILED: lockstep --help has no '$name' (tools build lockstep-$name)"; status=1; }
  fi
done
((checked >= 8)) || { echo "FAILED: found only $checked tool executables under $TOOLS"; status=1; }
[[ $status == 0 ]] && echo "lockstep --help lists all $checked tool commands"
exit $status
