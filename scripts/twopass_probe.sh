#!/usr/bin/env bash
# The probes of the slow second pass (BenchmarkTwoPasses;
# bench/results/2026-12-02-slowpass.md), on the GPU machine with .carry/
# from scripts/device_build.sh. nvidia-smi logs clocks, power and
# temperatures every 200 ms beside them ($OUT/smi.csv).
# Usage: bash scripts/twopass_probe.sh [probe ...]; probes: connections,
# repeat, keep, hoist, pads, sleep, shapes, eager, freed, longgemm (default: keep).
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,temperature.memory,clocks_throttle_reasons.active \
  --format=csv,noheader -lms 200 > "$OUT/smi.csv" 2>&1 &
smi=$!
trap 'kill $smi' EXIT
run() {
  echo "== $*"
  env TWOPASS_STAGES=0 "$@" timeout 300 .carry/gpu.test -test.v -test.run '^$' -test.bench TwoPasses -test.benchtime 1x 2>&1 \
    | grep -E "two passes|FAIL|panic" | sed 's/^ *bench_test.go:[0-9]*: //'
}
mixed=130m:2048,370m:8192,130m:2048,370m:2048,130m:2048,130m:8192,130m:2048
for probe in "${@:-keep}"; do
  case $probe in
    connections) run CUDA_DEVICE_MAX_CONNECTIONS=32 ;;  # the default order, more hardware queues
    repeat) run TWOPASS_SHAPES=130m:2048,130m:2048,130m:2048,130m:2048,130m:2048 ;;
    keep) run TWOPASS_KEEP=1 TWOPASS_SHAPES=$mixed ;;  # the first engine timed again after each step
    hoist) run TWOPASS_KEEP=1 TWOPASS_SHAPES=$mixed TWOPASS_HOIST=0 ;;
    pads) run TWOPASS_SHAPES=130m:2048,130m:2048,130m:2048,130m:2048,130m:2048,130m:2048 TWOPASS_PADS=0,1,2,17,100,1000 ;;
    sleep) run TWOPASS_KEEP=1 TWOPASS_SHAPES=130m:2048,370m:8192,370m:8192,370m:2048,130m:2048,130m:2048,130m:2048 \
      TWOPASS_SLEEPS=0,0,0,0,0,45,0 ;;
    shapes) run TWOPASS_KEEP=1 TWOPASS_SHAPES=130m:2048,768x96:2048,130m:2048,1024x12:2048,130m:2048,370m:2048,130m:2048 ;;
    eager) run CUDA_MODULE_LOADING=EAGER TWOPASS_KEEP=1 TWOPASS_SHAPES=130m:2048,130m:2048,130m:8192,130m:2048 ;;
    freed) run TWOPASS_KEEP=1 TWOPASS_SHAPES=130m:2048,130m:2048,130m:2048,130m:2048,130m:2048 TWOPASS_PADS=0,3000,0,8000,0 ;;
    longgemm) for g in lt tuned; do
        run TWOPASS_LONG_GEMM=$g TWOPASS_KEEP=1 TWOPASS_SHAPES=130m:2048,130m:8192,130m:2048,130m:8192,130m:2048
      done ;;
    *) echo "unknown probe $probe"; exit 2 ;;
  esac
done
