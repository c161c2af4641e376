"""Times torch's FP32 GEMMs (TF32 off) at the shapes of one Mamba layer's
prefill, to compare with the engine's stage times (CUDA events, median).

    python3 bench/gemm_shapes.py [--d 768] [--rows 2048]
"""

import argparse
import statistics

import torch


def main():
    """Time torch's FP32 GEMM at each of a layer's shapes and print the medians."""
    p = argparse.ArgumentParser()
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--rows", type=int, default=2048)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    d, M = a.d, a.rows
    E, R, N = 2 * d, (d + 15) // 16, 16
    shapes = {"in_proj": (M, 2 * E, d), "x_proj": (M, R + 2 * N, E), "dt_proj": (M, E, R), "out_proj": (M, d, E)}
    for name, (m, n, k) in shapes.items():
        x, w = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda")
        out = torch.empty(m, n, device="cuda")
        for _ in range(3):
            torch.mm(x, w.t(), out=out)
        times = []
        for _ in range(20):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            torch.mm(x, w.t(), out=out)
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1e3)
        us = statistics.median(times)
        print(f"{name:9s} M={m} N={n} K={k}: {us:7.1f} us, {2 * m * n * k / us / 1e6:5.1f} TFLOP/s")


if __name__ == "__main__":
    main()
