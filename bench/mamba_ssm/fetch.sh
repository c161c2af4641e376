#!/usr/bin/env bash
# Fetch, on the CPU machine (which reaches PyPI), what building mamba_ssm and
# causal-conv1d on the GPU machine (no network) needs: their sdists, pinned by
# sha256, and wheels of ninja (parallel CUDA builds) and einops (imported by
# mamba_ssm). Into .carry/deps/ (git-ignored), which the device tool carries.
# Usage: bash bench/mamba_ssm/fetch.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
deps=.carry/deps
mkdir -p "$deps"
fetch() { # name url sha256
  local file="$deps/$1"
  [[ -f $file ]] || curl -sSfL -o "$file" "$2"
  echo "$3  $file" | sha256sum -c --quiet
}
fetch mamba_ssm-2.3.2.post1.tar.gz \
  https://files.pythonhosted.org/packages/af/48/aa7bec0efc7453fa0512276c0069c854bf684219050294266534bfef34bb/mamba_ssm-2.3.2.post1.tar.gz \
  104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028
fetch causal_conv1d-1.7.0.tar.gz \
  https://files.pythonhosted.org/packages/f4/d1/eba27735f31bd5527d39a3c7f693e6ded7b844cab275db719a15ad37b6cd/causal_conv1d-1.7.0.tar.gz \
  3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$deps" ninja einops
ls -la "$deps"
