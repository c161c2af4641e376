#!/usr/bin/env bash
# Build mamba_ssm and causal-conv1d from their sdists on the GPU machine
# (torch 2.11, nvcc 13.0, no network), for sm_90 only, into a target folder
# that PYTHONPATH can point at. Their setup.py files hard-code a -gencode
# list of eight architectures; building every one of them does not fit in a
# 10-minute call, so the build drops all of them but sm_90, and the backward
# kernels too (forward_only.py): inference needs none of them, and with them
# the build took 8 minutes and left 88 MB of extensions.
# Usage: bash bench/mamba_ssm/build.sh TARGET   (deps from bench/mamba_ssm/fetch.sh in .carry/deps)
set -euo pipefail
cd "$(dirname "$0")/../.."
target=$(realpath -m "${1:?target folder}")
deps=$PWD/.carry/deps
tools=/tmp/mamba_ssm_tools
python3 -m pip install -q --no-deps --no-index --target "$tools" "$deps"/ninja-*.whl "$deps"/einops-*.whl
export PATH=$tools/bin:$PATH PYTHONPATH=$tools${PYTHONPATH:+:$PYTHONPATH}
export TORCH_CUDA_ARCH_LIST=9.0 MAMBA_FORCE_BUILD=TRUE CAUSAL_CONV1D_FORCE_BUILD=TRUE MAX_JOBS=${MAX_JOBS:-8} NVCC_THREADS=${NVCC_THREADS:-2}
mkdir -p "$target" /tmp/mamba_ssm_build
build() {
  local sdist=$1 src=/tmp/mamba_ssm_build/$1
  rm -rf "$src" && tar -xzf "$deps/$sdist.tar.gz" -C /tmp/mamba_ssm_build
  python3 bench/mamba_ssm/only_sm90.py "$src/setup.py"
  python3 bench/mamba_ssm/forward_only.py "$src"
  echo "== building $sdist (sm_90, forward only) $(date +%T)"
  (cd "$src" && python3 -m pip install -v --no-deps --no-build-isolation --no-index --target "$target/$sdist" . \
    > "/tmp/mamba_ssm_build/$sdist.log" 2>&1) || { tail -40 "/tmp/mamba_ssm_build/$sdist.log"; return 1; }
  echo "   $sdist done $(date +%T)"
}
# The two builds run side by side, each into its own folder, merged after.
pids=()
for sdist in causal_conv1d-1.7.0 mamba_ssm-2.3.2.post1; do build $sdist & pids+=($!); done
for p in "${pids[@]}"; do wait "$p"; done
for sdist in causal_conv1d-1.7.0 mamba_ssm-2.3.2.post1; do cp -r "$target/$sdist"/. "$target" && rm -rf "${target:?}/$sdist"; done
strip --strip-debug "$target"/*.so || echo "strip failed; extensions keep their debug info"
ls -la "$target"
