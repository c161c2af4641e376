"""Times one installed mambago build on the CPU, for comparing builds (a local
x86-64-v3 wheel against the portable x86-64-v1 one scripts/wheels.sh makes):
a 130m-shaped random model's prefill at T=128 and 512 (float32) and its
decode steps of one sequence (float32 and bf16), medians of several calls.
Run it with each build's Python in turn, a few rounds, and compare.

    python bench/wheel_levels.py out.json
"""

import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import random_checkpoint  # noqa: E402


def median_ms(fn, n):
    """The median wall time of n calls of fn, in ms, after one warm call."""
    fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main():
    """Time the build this Python imports; write the JSON to argv[1]."""
    import mambago
    from mambago._gopy import build_info

    path = random_checkpoint.cached("130m")
    rng = np.random.default_rng(0)
    row = {"build": build_info.GOAMD64, "module": mambago.__file__}
    for dtype in ("float32", "bfloat16"):
        m = mambago.Model.from_pretrained(path, device="cpu", dtype=dtype)
        if dtype == "float32":
            for T in (128, 512):
                ids = rng.integers(0, 50280, size=(1, T))
                row[f"prefill_T{T}_ms"] = median_ms(lambda: m.prefill(ids), 5)
        state = m.new_state(batch_size=1)
        m.prefill(rng.integers(0, 50280, size=(1, 16)), state=state)
        tok = np.array([7])
        row[f"step_{dtype}_ms"] = median_ms(lambda: m.step(tok, state), 40)
        m.close()
    print(json.dumps(row))
    with open(sys.argv[1], "w") as f:
        json.dump(row, f)


if __name__ == "__main__":
    main()
