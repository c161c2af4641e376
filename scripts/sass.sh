#!/usr/bin/env bash
# The SASS of one kernel source, without a GPU: NVRTC (from PyPI) compiles it
# for sm_90 and cuobjdump (PyPI's nvidia-cuda-cuobjdump, with
# nvidia-cuda-nvdisasm) disassembles it.
# Prints ptxas's registers and spills per entry, then writes the SASS to
# build/sass/<file>.sass and the cubin beside it.
#   bash scripts/sass.sh scan_onepass.cu [NVRTC options, e.g. -DOP_TL2=32]
# SASS_ARCH picks another target (e.g. SASS_ARCH=sm_90a for wgmma).
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?a kernel source in kernels/, e.g. scan_onepass.cu}
shift
tools=build/sass-tools
if [[ ! -x $tools/bin/python ]]; then
  python3 -m venv "$tools"
  "$tools/bin/python" -m pip install -q "nvidia-cuda-nvrtc==13.0.88" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
fi
cu13=$("$tools/bin/python" -c 'import os, nvidia; print(os.path.join(nvidia.__path__[0], "cu13"))')
mkdir -p build/sass
MAMBAGO_NVRTC="$cu13/lib/libnvrtc.so.13" MAMBAGO_DUMP="$name" MAMBAGO_DUMP_ARCH="${SASS_ARCH:-sm_90}" \
  MAMBAGO_DUMP_OPTS="$*" MAMBAGO_DUMP_DIR="$PWD/build/sass" \
  go test -count=1 -run '^TestDumpCubin$' -v ./kernels | grep -E "Compiling|Used|spill|wrote|FAIL|ok" \
  | sed 's/^ *dump_test.go:[0-9]*: //'
PATH="$cu13/bin:$PATH" cuobjdump -sass "build/sass/$name.cubin" > "build/sass/$name.sass"
echo "SASS: build/sass/$name.sass ($(grep -c '^ */\*[0-9a-f]*\*/' "build/sass/$name.sass") instructions)"
