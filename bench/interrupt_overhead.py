"""What making a call stoppable by Ctrl-C costs: Model.generate, and a CPU
Model.prefill of 1024 positions, called from the main thread (where they run
on mambago's worker thread, so that a KeyboardInterrupt can stop them) and
from another thread (where they run in place, as every call did before).

    python3 bench/interrupt_overhead.py tests/fixtures/base --out overhead.json

Each way is timed as the median of 7 repeats of a loop of calls, taking
turns, in µs a call; the difference is the hop to the worker thread.
"""

import argparse
import json
import statistics
import threading
import time

import numpy as np

import mambago


def per_call(fn, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def off_main(fn, calls):
    box = {}
    t = threading.Thread(target=lambda: box.update(us=per_call(fn, calls)))
    t.start()
    t.join()
    return box["us"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--calls", type=float, default=1.0, help="scales each loop's calls (e.g. 0.01 for a 130m model on a CPU)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    m = mambago.Model.from_pretrained(a.model, device=a.device)
    rng = np.random.default_rng(0)
    V = m.config.vocab_size
    prompt = rng.integers(0, V, size=(1, 8))
    long = rng.integers(0, V, size=(1, 1024))
    cases = {
        "generate, 1 token": (lambda: m.generate(prompt, 1), 2000),
        "generate, 32 tokens": (lambda: m.generate(prompt, 32), 200),
        "prefill, 1024 positions": (lambda: m.prefill(long), 100),
    }
    rows = []
    for name, (fn, calls) in cases.items():
        calls = max(1, round(calls * a.calls))
        per_call(fn, max(1, calls // 10))  # warm-up
        main_us, off_us = [], []
        for _ in range(a.repeats):  # taking turns
            main_us.append(per_call(fn, calls))
            off_us.append(off_main(fn, calls))
        row = {"call": name, "main_thread_us": statistics.median(main_us), "in_place_us": statistics.median(off_us),
               "main_all": main_us, "in_place_all": off_us}
        row["hop_us"] = row["main_thread_us"] - row["in_place_us"]
        rows.append(row)
        print(f"{name:<26} main thread {row['main_thread_us']:9.1f} µs   in place {row['in_place_us']:9.1f} µs   "
              f"hop {row['hop_us']:+7.1f} µs ({row['main_thread_us'] / row['in_place_us']:.3f}x)")
    with open(a.out, "w") as f:
        json.dump({"model": a.model, "device": m.device, "config": m.config.__dict__, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
