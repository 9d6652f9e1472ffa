#!/usr/bin/env bash
# Fails when a layer includes a layer above it, or another layer's private
# headers (docs/architecture.md):
#   base < policy, profile < rendezvous < comm < engine < torch < parallel;  optim, data
#   stand on base (and LibTorch); summary on base + data; launcher on base + rendezvous;
#   policy (the decisions runtime and planner share) and profile (the step-profile format
#   torch writes and the planner reads) on base alone; plan (the planner's model) on base,
#   policy and profile, above the runtime: no runtime layer includes it; tools/examples on top.
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
check base policy profile plan rendezvous comm engine launcher torch parallel optim data notorch
check policy profile plan rendezvous comm engine launcher torch parallel optim data summary notorch
check profile policy plan rendezvous comm engine launcher torch parallel optim data summary notorch
check plan rendezvous comm engine launcher torch parallel optim data notorch
check rendezvous plan comm engine launcher torch parallel optim data notorch
check comm plan engine launcher torch parallel optim data notorch
check engine plan launcher torch parallel optim data notorch
check launcher plan engine torch parallel optim data notorch
check optim plan comm engine launcher torch parallel data
check data plan comm engine launcher torch parallel optim summary
check summary plan comm engine launcher torch parallel optim notorch
check torch plan launcher parallel
check parallel plan launcher

# A header under src/<layer>/ is private to its layer: another layer or a
# tool that needs it includes its published form, lockstep/<layer>/...
# (docs/architecture.md). Quoted includes are resolved against src/, so a
# generated header (comm/transports.inc) counts as its layer's.
layers=$(cd "$root/src" && ls -d */ | tr -d /)
for layer in $layers; do
  others=$(tr ' ' '\n' <<<"$layers" | grep -vx "$layer" | paste -sd'|')
  if grep -rnE "#include \"($others)/" "$root/src/$layer"; then
    echo "layer '$layer' includes another layer's private header (src/<layer>/): publish it"
    status=1
  fi
done
# Tools include the public headers and their own, from the project root
# ("tools/<tool>/x.h"), never src/: "plan/x.h" could mean tools/plan or src/plan.
if grep -rnE "#include \"(src/|include/|($(paste -sd'|' <<<"$layers"))/)" "$root/tools"; then
  echo "a tool includes a private header of a layer (or a path into src/ or include/)"
  status=1
fi
[[ $status == 0 ]] && echo "layering: ok"
exit $status
