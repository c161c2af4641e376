"""A 130m-shaped random model's CPU decode step of one sequence, in each
weight dtype (median of 60 steps after 10), printed as one line: run it
alternately with PYTHONPATH at another build's install (pip install --target)
to compare two builds, a process each, taking turns.

    python3 bench/cpu_step.py [blas]     # blas: "go" (default), "auto" or a library path
"""

import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import random_checkpoint  # noqa: E402


def main():
    """Time the steps and print the medians, with the mambago install's folder."""
    import mambago

    blas = sys.argv[1] if len(sys.argv) > 1 else "go"
    path = random_checkpoint.cached("130m")
    out = []
    for dt in ("float32", "bfloat16", "float16"):
        m = mambago.Model.from_pretrained(path, device="cpu", dtype=dt, blas=blas)
        ids = np.zeros((1, 16), dtype=np.int64)
        state = m.new_state(1)
        m.prefill(ids, state=state)
        last = ids[:, -1].copy()
        for _ in range(10):
            m.step(last, state)
        times = []
        for _ in range(60):
            t0 = time.perf_counter()
            m.step(last, state)
            times.append(time.perf_counter() - t0)
        out.append(f"{dt} {statistics.median(times) * 1e3:.2f} ms")
        state.close()
        m.close()
    print(os.path.dirname(mambago.__file__), "|", " | ".join(out), flush=True)


if __name__ == "__main__":
    main()
