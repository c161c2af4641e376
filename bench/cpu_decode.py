"""CPU decode of a 130m-shaped random model: generate's time for 33 tokens
after a 16-token prompt, one step's, and a T=512 prefill's (at B=1), at each
batch size asked for (B=1 and B=8 unless told; medians), for each weight
dtype asked for (float32, and the 16-bit storage of dtype="bfloat16"/
"float16") and each GEMM library asked for (blas="auto" unless told; e.g.
"go,openblas", where "openblas" is numpy's), the models taking turns in one
process.

    python3 bench/cpu_decode.py out.json [float32,bfloat16,float16] [1,2,4,8] [go,openblas]
"""

import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import random_checkpoint  # noqa: E402


def median_seconds(fn, repeats):
    """The median wall time of repeats calls of fn, in seconds."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    """Time generate, step and prefill per dtype and write the JSON to argv[1]."""
    import mambago

    dtypes = (sys.argv[2] if len(sys.argv) > 2 else "float32").split(",")
    batches = [int(b) for b in (sys.argv[3] if len(sys.argv) > 3 else "1,8").split(",")]
    blases = (sys.argv[4] if len(sys.argv) > 4 else "auto").split(",")
    path = random_checkpoint.cached("130m")
    # keyed "float32", or "float32/go" where more than one library is asked for
    from mambago.model import numpy_blas

    models = {dt + (f"/{b}" if len(blases) > 1 else ""):
              mambago.Model.from_pretrained(path, device="cpu", dtype=dt, blas=numpy_blas() if b == "openblas" else b)
              for dt in dtypes for b in blases}
    rng = np.random.default_rng(0)
    result = {"mambago_backend": {k: m.backend for k, m in models.items()}, "cpus": os.cpu_count()}
    prompt = rng.integers(0, 50280, size=(1, 512))
    for B in batches:
        ids = rng.integers(0, 50280, size=(B, 16))
        for rnd in range(2):  # two rounds, the dtypes taking turns; the second is kept
            for dt, m in models.items():
                m.generate(ids, 4)  # warm-up
                gen = median_seconds(lambda: m.generate(ids, 33), 3)
                state = m.new_state(B)
                m.prefill(ids, state=state)
                last = np.ascontiguousarray(ids[:, -1])
                step = median_seconds(lambda: m.step(last, state), 20)
                row = {"generate_33_s": gen, "step_ms": step * 1e3}
                if B == 1:
                    row["prefill_T512_s"] = median_seconds(lambda: m.prefill(prompt), 3)
                if rnd == 1:
                    result.setdefault(dt, {})[f"B{B}"] = row
                    extra = f"; prefill T=512 {row['prefill_T512_s'] * 1e3:.0f} ms" if B == 1 else ""
                    print(f"{dt} B={B}: generate 33 tokens {gen * 1e3:.0f} ms; step {step * 1e3:.1f} ms "
                          f"({B / step:.1f} tok/s){extra}", flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
