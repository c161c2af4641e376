"""Peak and settled RSS of one CPU load: python bench/load_peak.py <checkpoint dir> <dtype>."""
import resource, sys, time, mambago
dt = sys.argv[2]
t0 = time.perf_counter()
m = mambago.Model.from_pretrained(sys.argv[1], device="cpu", dtype=dt)
t1 = time.perf_counter()
import gc; gc.collect()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
cur = int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
print(f"{dt}: load {t1-t0:.2f} s, peak RSS {peak:.0f} MiB, RSS after {cur:.0f} MiB, model dtype {m.dtype}")
