import time, numpy as np, mambago, statistics, threading
from mambago._native import bindings as b, call, interruptible
m = mambago.Model.from_pretrained("/tmp/rand130m", device="cpu")
x = np.random.default_rng(0).integers(0, 50280, size=(1, 1024)).astype(np.int64)
out = np.zeros((1, 768), np.float32)
st = call(b.NewState, m._h, 1)
args = (b.Prefill, m._h, st, "ids", x.ctypes.data, x.size, 1, 1024, "last", out.ctypes.data, 768, 0, 0, True)
stop = call(b.NewStop)
def t(f):
    t0=time.perf_counter(); f(); return time.perf_counter()-t0
ways = {"main, stop=0": lambda: call(*args, 0), "main, stop": lambda: call(*args, stop), "hop": lambda: interruptible(*args)}
res = {k: [] for k in ways}
for f in ways.values(): f()
for r in range(10):
    for k, f in ways.items(): res[k].append(t(f))
for k, v in res.items(): print(f"{k:14s} median {statistics.median(v):.4f}  min {min(v):.4f}")
