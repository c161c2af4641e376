"""What the CUDA driver says of the addresses a user may hand the device
entries: cuPointerGetAttributes' memory type, device ordinal, managed flag
and allocation range for torch tensors under each allocator setting
(the caching allocator, expandable segments, cudaMallocAsync), pinned and
pageable host memory, and numpy's. Run once per allocator, each in its own
process:

    python3 bench/pointer_probe.py            # all three, one process each
"""

import ctypes
import json
import os
import subprocess
import sys

ATTRS = {"memory_type": (2, ctypes.c_uint), "ordinal": (9, ctypes.c_int), "managed": (8, ctypes.c_uint64),
         "range_start": (11, ctypes.c_uint64), "range_size": (12, ctypes.c_uint64), "mapped": (13, ctypes.c_uint64)}


def attributes(cu, ptr):
    """The driver's attributes of address ptr, as a dict."""
    n = len(ATTRS)
    vals = [t() for _, t in ATTRS.values()]
    kinds = (ctypes.c_int * n)(*[a for a, _ in ATTRS.values()])
    data = (ctypes.c_void_p * n)(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
    rc = cu.cuPointerGetAttributes(ctypes.c_uint(n), kinds, data, ctypes.c_uint64(ptr))
    out = {k: v.value for k, v in zip(ATTRS, vals)}
    out["rc"] = rc
    return out


def probe():
    import numpy as np
    import torch

    cu = ctypes.CDLL("libcuda.so.1")
    torch.zeros(1, device="cuda")
    rows = {}

    def show(name, ptr, nbytes):
        first, last = attributes(cu, ptr), attributes(cu, ptr + nbytes - 1)
        inside = first["range_size"] and ptr + nbytes <= first["range_start"] + first["range_size"]
        rows[name] = {"ptr": ptr, "bytes": nbytes, "first": first, "last": last, "within_first_range": bool(inside)}
        print(f"{name:<34} type {first['memory_type']} ord {first['ordinal']:>2} managed {first['managed']} "
              f"mapped {first['mapped']} range +{ptr - first['range_start']:>10} of {first['range_size']:>11} "
              f"| last: type {last['memory_type']} range_start same {last['range_start'] == first['range_start']} "
              f"| within {bool(inside)} rc {first['rc']}/{last['rc']}")

    keep = []
    for mb in (1, 3, 25, 100, 700):
        t = torch.empty(mb << 20, dtype=torch.uint8, device="cuda")
        keep.append(t)
        show(f"cuda {mb} MB", t.data_ptr(), t.numel())
    big = torch.empty(300 << 20, dtype=torch.uint8, device="cuda")
    view = big[50 << 20:]
    show("cuda 250 MB view at +50 MB", view.data_ptr(), view.numel())
    small = [torch.empty(1000, device="cuda") for _ in range(50)]
    show("cuda small 4 KB (50th)", small[-1].data_ptr(), 4000)
    show("cuda small, 1 MB past its end", small[-1].data_ptr(), 1 << 20)
    show("cuda 1 MB, 1 GB past its end", keep[0].data_ptr(), 1 << 30)
    host = torch.empty(1 << 20, dtype=torch.uint8)
    show("cpu tensor", host.data_ptr(), host.numel())
    pinned = torch.empty(1 << 20, dtype=torch.uint8).pin_memory()
    show("pinned cpu tensor", pinned.data_ptr(), pinned.numel())
    a = np.zeros(1 << 20, np.uint8)
    show("numpy array", a.ctypes.data, a.nbytes)
    m = ctypes.c_uint64()
    if cu.cuMemAllocManaged(ctypes.byref(m), ctypes.c_size_t(1 << 20), ctypes.c_uint(1)) == 0:
        show("cuMemAllocManaged 1 MB", m.value, 1 << 20)
    return rows


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        print(json.dumps(probe()))
        sys.exit(0)
    results = {}
    for conf in ("", "expandable_segments:True", "backend:cudaMallocAsync"):
        env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
        print(f"== PYTORCH_CUDA_ALLOC_CONF={conf!r}", flush=True)
        p = subprocess.run([sys.executable, __file__, "--one"], env=env, capture_output=True, text=True)
        lines = p.stdout.splitlines()
        print("\n".join(lines[:-1]), p.stderr[-2000:], flush=True)
        results[conf or "default"] = json.loads(lines[-1]) if p.returncode == 0 else p.stderr[-2000:]
    out = os.path.join(os.environ.get("OUT", "."), "pointer_probe.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
