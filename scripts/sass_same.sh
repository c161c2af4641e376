#!/usr/bin/env bash
# Whether a change leaves the machine code alone, without a GPU: each kernel
# source that differs from REV (or each one named) is compiled, as it is at
# REV and as it is in the working tree, for sm_80, sm_90 and sm_90a through
# NVRTC, and the two SASS listings (cuobjdump) are compared byte for byte. A
# refactor whose SASS is the same on every target needs no GPU run to be
# trusted; one that differs does. Uses scripts/sass.sh's tools (through scripts/sass_dump.sh).
#   bash scripts/sass_same.sh REV [kernel.cu ...]
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?a commit to compare with}
shift
files=("$@")
if [[ ${#files[@]} == 0 ]]; then
  mapfile -t files < <(git diff --name-only "$rev" -- kernels | grep -E '\.cuh?$' | xargs -rn1 basename)
fi
[[ ${#files[@]} == 0 ]] && { echo "no kernel source differs from $rev"; exit 0; }
# A header changes every source that includes it: kernels.Source puts
# dtype.cuh, math.cuh and hopper.cuh in front of each.
if printf '%s\n' "${files[@]}" | grep -q '\.cuh$'; then
  mapfile -t files < <(cd kernels && ls *.cu)
fi
source scripts/sass_dump.sh
sass_tools "${files[0]}"
base=$(mktemp -d)
git worktree add -q --detach "$base" "$rev"
trap 'git worktree remove --force "$base"' EXIT
out=build/sass/same
mkdir -p "$out"
status=0
for f in "${files[@]}"; do
  for arch in sm_80 sm_90 sm_90a; do
    for side in base tree; do
      dir=$PWD/$out/$side-$arch
      mkdir -p "$dir"
      src=$([[ $side == base ]] && echo "$base" || echo "$PWD")
      if [[ $side == base && ! -f $base/kernels/$f ]]; then
        : > "$dir/$f.sass"
        continue
      fi
      dump_sass "$src" "$f" "$arch" "$dir" "" \
        || { echo "$f $arch ($side): did not compile, see $dir/$f.log"; status=1; continue 2; }
    done
    if cmp -s "$out/base-$arch/$f.sass" "$out/tree-$arch/$f.sass"; then
      echo "$f $arch: the same SASS"
    else
      echo "$f $arch: DIFFERS ($out/{base,tree}-$arch/$f.sass)"
      status=1
    fi
  done
done
exit $status
