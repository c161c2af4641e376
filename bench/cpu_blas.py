"""The CPU prefill of a 130m-shaped random model on the engine's own SGEMM
(blas="go") against numpy's OpenBLAS (its path as blas), the two taking turns in
one process: a warm prefill, then the median of several, at each length
asked for, for a few rounds. The first model a process loads runs its first
prefills cold, so one unmeasured model loads first.

    python3 bench/cpu_blas.py out.json [128,512,2048] [rounds]
"""

import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import random_checkpoint  # noqa: E402


def main():
    """Time both GEMM paths per length and write the JSON to argv[1]."""
    import mambago
    from mambago.model import numpy_blas

    lengths = [int(t) for t in (sys.argv[2] if len(sys.argv) > 2 else "128,512,2048").split(",")]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    path = random_checkpoint.cached("130m")
    rng = np.random.default_rng(0)
    warm = mambago.Model.from_pretrained(path, device="cpu")  # the process's cold first model, not timed
    warm.prefill(rng.integers(0, 50280, size=(1, 128)))
    del warm
    rows = []
    for T in lengths:
        ids = rng.integers(0, 50280, size=(1, T))
        for r in range(rounds):
            for blas in ("go", "openblas"):
                m = mambago.Model.from_pretrained(path, device="cpu", blas="go" if blas == "go" else numpy_blas())
                m.prefill(ids)
                times = []
                for _ in range(5 if T <= 512 else 3):
                    t0 = time.perf_counter()
                    m.prefill(ids)
                    times.append(time.perf_counter() - t0)
                ms = statistics.median(times) * 1e3
                rows.append({"T": T, "round": r, "blas": blas, "backend": m.backend, "ms": ms,
                             "tok_s": T / ms * 1e3, "threads": mambago.get_num_threads()})
                print(f"T={T} round {r} {blas:8s} {ms:8.1f} ms {T / ms * 1e3:8.0f} tok/s  ({m.backend})", flush=True)
                del m
    with open(sys.argv[1], "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
