#!/usr/bin/env bash
# Checks the aarch64 wheel that scripts/wheels.sh cross-builds, on this x86_64
# machine, under qemu's user-mode emulation: Debian's arm64 CPython 3.11 (its
# packages unpacked into build/aarch64-root), numpy's, pytest's and
# tokenizers' aarch64 wheels, and mambago's cp311 wheel, then pytest with that
# interpreter (TESTS="..." to choose; all of tests/ takes about 9 minutes).
# Needs root and Debian's apt (qemu-user-static and the arm64 packages), a
# CPython 3.11 here for the build (pyenv's, else python3.11), and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD/build/aarch64-root
site=$PWD/build/aarch64-site

command -v qemu-aarch64-static >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-user-static
if [[ ! -x $root/usr/bin/python3.11 ]]; then
  dpkg --print-foreign-architectures | grep -qx arm64 || { dpkg --add-architecture arm64 && apt-get update -q; }
  debs=$(mktemp -d)
  (cd "$debs" && for p in libc6 libgcc-s1 libstdc++6 python3.11-minimal libpython3.11-minimal libpython3.11-stdlib \
    libexpat1 zlib1g libffi8 libssl3 libbz2-1.0 liblzma5 libsqlite3-0 libncursesw6 libtinfo6 libreadline8 \
    libuuid1 libcrypt1 libnsl2 libtirpc3 libdb5.3 libgdbm6 libgssapi-krb5-2 libkrb5-3 libk5crypto3 \
    libcom-err2 libkrb5support0 libkeyutils1; do apt-get download -q "$p:arm64"; done)
  rm -rf "$root" && mkdir -p "$root"
  for d in "$debs"/*.deb; do dpkg -x "$d" "$root"; done
  rm -rf "$debs"
fi

py=$(pyenv prefix "$(pyenv versions --bare 2>/dev/null | grep -E '^3\.11(\.[0-9]+)?$' | tail -1)" 2>/dev/null || true)
py=${py:+$py/bin/python3}
py=${py:-python3.11}
rm -rf build/dist-aarch64
MAMBAGO_PYTHONS="$py" WHEEL_ARCH=aarch64 bash scripts/wheels.sh build/dist-aarch64

rm -rf "$site" && mkdir -p "$site" build/aarch64-wheels
"$py" -m pip download -q --only-binary=:all: --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 \
  --python-version 3.11 --implementation cp --abi cp311 -d build/aarch64-wheels numpy pytest tokenizers
for w in build/aarch64-wheels/*.whl build/dist-aarch64/*.whl; do
  "$py" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$w" "$site"
done
# The interpreter as a command (argv[0] through qemu's -0), so tests that start it again find it in sys.executable.
mkdir -p build/aarch64-bin
printf '#!/bin/sh\nQEMU_LD_PREFIX="%s" exec qemu-aarch64-static -0 "$0" "%s/usr/bin/python3.11" "$@"\n' "$root" "$root" \
  > build/aarch64-bin/python3
chmod +x build/aarch64-bin/python3
PYTHONPATH=$site build/aarch64-bin/python3 -c 'import platform, mambago._gopy.build_info as b; print(platform.machine(), b.GOARCH)'
# from outside the tree, so the tests import the wheel's package, not python/mambago
(cd build && PYTHONPATH=$site aarch64-bin/python3 -m pytest -q -p no:cacheprovider ${TESTS:-../tests})
