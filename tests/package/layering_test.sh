#!/usr/bin/env bash
# Fails when a layer includes a layer above it (docs/architecture.md):
#   base < rendezvous < comm < engine < torch < parallel;  optim, data stand on base
#   (and LibTorch); summary on base + data; launcher on base + rendezvous; plan (the planner's
#   model) on base alone; tools/examples on top.
set -u
root=$1
status=0
check() {  # check <layer> <forbidden lockstep layers...> [-- notorch]
  local layer=$1; shift
  local forbid=() notorch=0
  for a in "$@"; do [[ $a == notorch ]] && notorch=1 || forbid+=("$a"); done
  local dirs=()
  for d in "$root/src/$layer" "$root/include/lockstep/$layer"; do [[ -d $d ]] && dirs+=("$d"); done
  ((${#dirs[@]})) || return 0
  if ((${#forbid[@]})); then
    local pattern
    pattern=$(IFS='|'; echo "${forbid[*]}")
    if grep -rnE "#include [<\"]lockstep/($pattern)/" "${dirs[@]}"; then
      echo "layer '$layer' includes a higher layer ($pattern)"; status=1
    fi
  fi
  if ((notorch)) && grep -rnE '#include [<"](torch|ATen|c10)/' "${dirs[@]}"; then
    echo "layer '$layer' must not depend on LibTorch"; status=1
  fi
}
check base rendezvous comm engine launcher torch parallel optim data notorch
check plan rendezvous comm engine launcher torch parallel optim data notorch
check rendezvous comm engine launcher torch parallel optim data notorch
check comm engine launcher torch parallel optim data notorch
check engine launcher torch parallel optim data notorch
check launcher engine torch parallel optim data notorch
check optim comm engine launcher torch parallel data
check data comm engine launcher torch parallel optim summary
check summary comm engine launcher torch parallel optim notorch
check torch launcher parallel
check parallel launcher
[[ $status == 0 ]] && echo "layering: ok"
exit $status
