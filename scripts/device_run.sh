#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .carry/ from
# scripts/device_build.sh: installs the wheel, runs the Python tests, and the
# CPU benchmark against Hugging Face. Logs and JSON go to $OUT (or ./out).
# Usage: bash scripts/device_run.sh [commit]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
commit=${1:-unknown}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-index --target /tmp/site .carry/mambago-*.whl || exit 1
export PYTHONPATH=/tmp/site
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
echo "== GPU: CUDA binding and kernels against float64 references"
.carry/cuda.test -test.v 2>&1 | tee "$OUT/cuda_test.log" | grep -E "^(---|ok|FAIL|PASS)|cuda_test.go"
.carry/kernels.test -test.v 2>&1 | tee "$OUT/kernels_test.log" | grep -E "^(---|ok|FAIL|PASS)|gpu_test.go"
echo "== pytest"
python3 -m pytest -q tests 2>&1 | tee "$OUT/pytest.log" | tail -5
echo "== Go CPU engine stage timings (130m shape, B=1, T=512)"
MAMBAGO_TEST_BLAS=$(python3 -c "import mambago.model as m; print(m.numpy_blas())") \
  .carry/cpu.test -test.run x -test.bench 'Prefill130m/B1_T512' -test.benchtime 3x 2>&1 | tee "$OUT/cpu_stages.log" | grep -v "^goos\|^goarch\|^pkg\|PASS"
echo "== CPU prefill, mambago vs Hugging Face"
python3 bench/cpu_vs_hf.py --out "$OUT/cpu_vs_hf.json" --lengths 512,128,2048 --commit "$commit" 2>&1 \
  | grep -v "falling back" | tee "$OUT/cpu_vs_hf.log"
