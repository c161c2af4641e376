#!/usr/bin/env bash
# Build here what the GPU machine (Python 3.12, no Go, no network) needs, into
# the git-ignored .carry/: the cp312 wheel and the Go test binaries. Then, with the device tool:
#   run(command="bash scripts/device_run.sh <commit>", carry=[".carry"])
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(pyenv prefix "$(pyenv versions --bare | grep -E '^3\.12(\.[0-9]+)?$' | tail -1)")/bin/python3
rm -rf .carry/*.whl .carry/*.test && mkdir -p .carry
"$py" -m pip wheel -q --no-deps -w .carry .
# The Go test binaries, for benchmarks and stage timings there.
GOAMD64=v3 go test -c -o .carry/cpu.test ./mambago/cpu
GOAMD64=v3 go test -c -o .carry/cuda.test ./mambago/cuda
GOAMD64=v3 go test -c -o .carry/kernels.test ./kernels
GOAMD64=v3 go test -c -o .carry/gpu.test ./mambago/gpu
GOAMD64=v3 go test -c -o .carry/mambago.test ./mambago
# With BASE=<commit>, that commit's engine benchmarks and wheel too, into
# .carry/base, for device_run.sh's ab, generate and cpuab modes.
rm -rf .carry/base
if [[ -n ${BASE:-} ]]; then
  tree=$(mktemp -d)
  git worktree add -q --detach "$tree" "$BASE"
  trap 'git worktree remove --force "$tree"' EXIT  # also when the build fails
  (cd "$tree" && GOAMD64=v3 go test -c -o "$OLDPWD/.carry/base/gpu.test" ./mambago/gpu)
  # and its CPU engine's, for device_run.sh's cpuab mode
  (cd "$tree" && GOAMD64=v3 go test -c -o "$OLDPWD/.carry/base/cpu.test" ./mambago/cpu)
  # and its wheel, for device_run.sh's generate mode
  (cd "$tree" && "$py" -m pip wheel -q --no-deps -w "$OLDPWD/.carry/base" .)
  # and its step.cu as NVRTC compiles it, for BenchmarkGEMVBatch's "base"
  # (device_run.sh gemvtc).
  mkdir -p "$tree/cmd/stepsource"
  printf '%s\n' 'package main' 'import ("fmt"; "github.com/mambago/mambago/kernels")' \
    'func main() { s, err := kernels.Source("step.cu"); if err != nil { panic(err) }; fmt.Print(s) }' \
    > "$tree/cmd/stepsource/main.go"
  (cd "$tree" && go run ./cmd/stepsource > "$OLDPWD/.carry/base_step.cu")
else
  rm -f .carry/base_step.cu
fi
# mamba_ssm's and causal-conv1d's sdists, for the bf16 comparison (cached).
bash bench/mamba_ssm/fetch.sh > /dev/null
ls -la .carry .carry/deps
