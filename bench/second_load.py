"""Loads a checkpoint into the CPU engine several times in one process, one
dtype a load, each model dropped before the next, and prints each load's
seconds: the cost of a second and third model in one process.

Usage: python bench/second_load.py DTYPES [CHECKPOINT]
  e.g. MAMBAGO_HUGEPAGES=0 python bench/second_load.py bfloat16,float32,float32 /tmp/mambago-bench-370m
"""
import gc
import sys
import time

import mambago

seq = sys.argv[1].split(",")
p = sys.argv[2] if len(sys.argv) > 2 else "/tmp/mambago-bench-370m"
out = []
for dt in seq:
    t0 = time.perf_counter()
    m = mambago.Model.from_pretrained(p, device="cpu", dtype=dt)
    t1 = time.perf_counter()
    m.prefill([[1, 2, 3]])
    del m
    gc.collect()
    out.append(f"{dt} {t1-t0:.2f}")
print(" | ".join(out))
