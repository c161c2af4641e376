"""GPU timing helpers the benchmarks share: CUDA events around each call,
the median of repeats after a warm-up, and the GEMM rate a roofline is
measured against."""

import statistics
import time

import torch


def cuda_time(fn, repeats, warmup=1, warm_seconds=0.0):
    """Median ms of fn over repeats, and every time: each call timed with CUDA
    events on the current stream, after warmup calls and then warm_seconds
    of calls (the clocks ramp up over the first ones)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    while time.perf_counter() - start < warm_seconds:
        fn()
        torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), times


def back_to_back(fn, stream, repeats=15, calls=20):
    """Median ms a call of fn, calls of it queued back to back on stream
    between two events (the host runs ahead, so this is the GPU's time a
    call), over repeats."""
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        for _ in range(calls):
            fn()
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def gemm_rate(dtype, n=8192):
    """FLOP/s of torch's n×n GEMM in dtype (torch's TF32 setting applies to float32)."""
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    ms, _ = cuda_time(lambda: a @ b, 5, warmup=2)
    return 2 * n**3 / (ms / 1e3)

