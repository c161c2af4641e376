#!/usr/bin/env bash
# Build mamba_ssm and causal-conv1d from their sdists on the GPU machine
# (torch 2.11, nvcc 13.0, no network), for sm_90 only, into a target folder
# that PYTHONPATH can point at. Their setup.py files hard-code a -gencode
# list of eight architectures; building every one of them does not fit in a
# 10-minute call, so the build drops all of them but sm_90.
# Usage: bash bench/mamba_ssm/build.sh TARGET   (deps from bench/mamba_ssm/fetch.sh in .carry/deps)
set -euo pipefail
cd "$(dirname "$0")/../.."
target=$(realpath -m "${1:?target folder}")
deps=$PWD/.carry/deps
tools=/tmp/mamba_ssm_tools
python3 -m pip install -q --no-deps --no-index --target "$tools" "$deps"/ninja-*.whl "$deps"/einops-*.whl
export PATH=$tools/bin:$PATH PYTHONPATH=$tools${PYTHONPATH:+:$PYTHONPATH}
export TORCH_CUDA_ARCH_LIST=9.0 MAMBA_FORCE_BUILD=TRUE CAUSAL_CONV1D_FORCE_BUILD=TRUE MAX_JOBS=${MAX_JOBS:-16} NVCC_THREADS=${NVCC_THREADS:-2}
mkdir -p "$target" /tmp/mamba_ssm_build
for sdist in causal_conv1d-1.7.0 mamba_ssm-2.3.2.post1; do
  src=/tmp/mamba_ssm_build/$sdist
  rm -rf "$src" && tar -xzf "$deps/$sdist.tar.gz" -C /tmp/mamba_ssm_build
  python3 bench/mamba_ssm/only_sm90.py "$src/setup.py"
  echo "== building $sdist (sm_90) $(date +%T)"
  (cd "$src" && python3 -m pip install -v --no-deps --no-build-isolation --no-index --target "$target" . \
    > "/tmp/mamba_ssm_build/$sdist.log" 2>&1) || { tail -40 "/tmp/mamba_ssm_build/$sdist.log"; exit 1; }
  echo "   done $(date +%T)"
done
ls "$target"
