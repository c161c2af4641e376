"""A quick CPU probe of a random model (130m-shaped unless told) for each
dtype asked for, loaded one after another in one process: the load's time,
the median of 40 one-sequence decode steps (ms), and the MiB of the process's
memory in transparent huge pages, printed as JSON. Run it with two builds
taking turns to compare them (the other build through PYTHONPATH at a
`pip install --target` of its wheel).

    python3 bench/cpu_step_probe.py [float32,bfloat16] [130m|370m|...] [blas]

blas is the GEMM library, as from_pretrained takes it ("auto" unless told;
"go" the engine's own).
"""

import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import random_checkpoint  # noqa: E402


def huge_mib():
    """The process's anonymous memory in huge pages, in MiB (0 where unknown)."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def main():
    """Load the model in each dtype, time its steps and print the results."""
    import mambago

    path = random_checkpoint.cached(sys.argv[2] if len(sys.argv) > 2 else "130m")
    out = {}
    for dt in (sys.argv[1] if len(sys.argv) > 1 else "float32,bfloat16").split(","):
        t0 = time.perf_counter()
        m = mambago.Model.from_pretrained(path, device="cpu", dtype=dt,
                                          blas=sys.argv[3] if len(sys.argv) > 3 else "auto")
        load = time.perf_counter() - t0
        st = m.new_state(1)
        m.prefill(np.array([[1, 2, 3]]), state=st)
        last = np.array([3])
        for _ in range(5):
            m.step(last, st)
        times = []
        for _ in range(40):
            t = time.perf_counter()
            m.step(last, st)
            times.append(time.perf_counter() - t)
        out[dt] = {"load_s": round(load, 3), "step_ms": round(statistics.median(times) * 1e3, 2),
                   "huge_mib": huge_mib()}
        m.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
