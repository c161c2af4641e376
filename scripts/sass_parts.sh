#!/usr/bin/env bash
# Whether compiling a kernel source in parts (kernels.Unit: one storage type
# a part, under -DDTYPE_ONLY_<sfx>) gives each kernel the machine code it has
# when the whole file compiles, without a GPU: every source with typed
# entries (or each one named) is compiled whole and in its three parts, for
# sm_80, sm_90 and sm_90a through NVRTC, and each function's SASS (cuobjdump)
# in a part is compared with the same function's in the whole file; every
# function of the whole must be in some part. Uses scripts/sass.sh's tools (through scripts/sass_dump.sh).
#   bash scripts/sass_parts.sh [kernel.cu ...]
set -euo pipefail
cd "$(dirname "$0")/.."
files=("$@")
if [[ ${#files[@]} == 0 ]]; then
  mapfile -t files < <(cd kernels && grep -l '_##sfx(' *.cu)
fi
source scripts/sass_dump.sh
sass_tools "${files[0]}"
tools=build/sass-tools
out=$PWD/build/sass/parts
status=0
for f in "${files[@]}"; do
  for arch in sm_80 sm_90 sm_90a; do
    sides=()
    for part in whole f32 bf16 f16; do
      dir=$out/$arch-$part
      opts=$([[ $part == whole ]] || echo "-DDTYPE_ONLY_$part")
      dump_sass . "$f" "$arch" "$dir" "$opts" \
        || { echo "$f $arch ($part): did not compile, see $dir/$f.log"; status=1; continue 2; }
      sides+=("$dir/$f.sass")
    done
    "$tools/bin/python" - "$f $arch" "${sides[@]}" <<'PY' || status=1
import re, sys

def functions(path):
    """Each function's SASS in a cuobjdump listing, by name, its runs of
    blanks as one (cuobjdump pads its columns to a listing's widest)."""
    out, name = {}, None
    for line in open(path):
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            name = m.group(1)
            out[name] = []
        elif name is not None:
            out[name].append(" ".join(line.split()))
    return out

label, whole, parts = sys.argv[1], functions(sys.argv[2]), [functions(p) for p in sys.argv[3:]]
seen, bad = set(), []
for part in parts:
    for name, sass in part.items():
        seen.add(name)
        if name not in whole:
            bad.append(f"{name}: only in a part")
        elif sass != whole[name]:
            bad.append(f"{name}: differs")
bad += [f"{name}: in no part" for name in whole if name not in seen]
if bad:
    print(f"{label}: DIFFERS: " + "; ".join(bad))
    sys.exit(1)
print(f"{label}: each of the whole file's {len(whole)} functions has the same SASS in its parts")
PY
  done
done
exit $status
