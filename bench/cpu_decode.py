"""CPU decode of a 130m-shaped random model: generate's time for 33 tokens
after a 16-token prompt, and one step's, at B=1 and B=8 (medians).

    python3 bench/cpu_decode.py out.json
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
    """Time generate and step at B=1 and B=8 and write the JSON to argv[1]."""
    import mambago

    m = mambago.Model.from_pretrained(random_checkpoint.cached("130m"), device="cpu")
    rng = np.random.default_rng(0)
    result = {"mambago_backend": m.backend}
    for B in (1, 8):
        ids = rng.integers(0, m.config.vocab_size, size=(B, 16))
        m.generate(ids, 4)  # warm-up
        gen = median_seconds(lambda: m.generate(ids, 33), 3)
        state = m.new_state(B)
        m.prefill(ids, state=state)
        last = np.ascontiguousarray(ids[:, -1])
        step = median_seconds(lambda: m.step(last, state), 20)
        result[f"B{B}"] = {"generate_33_s": gen, "step_ms": step * 1e3}
        print(f"B={B}: generate 33 tokens {gen * 1e3:.0f} ms; step {step * 1e3:.1f} ms ({B / step:.1f} tok/s)",
              flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
