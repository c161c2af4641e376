"""x_proj with K split into S batched GEMMs, each writing its own partial
product, against the one GEMM: is the split's GPU time worth a sum of the
partials downstream?

x_proj at the 130m shape is dbl [T, 80] = u [T, 1536] · W_x^T in bf16 with
f32 output. With K = 1536 and 80 output columns cuBLAS runs about 100 CTAs
that each walk all of K. Split S ways as a strided batch (batch i reads
columns i K/S .. of u and of W_x), each CTA walks K/S and the batch fills
more SMs; the S partials [S, T, 80] would be summed by the kernel after it.

Each variant runs inside a CUDA graph after a kernel that writes u (as the
conv does in the engine), 20 times a replay, timed with CUDA events; the
table gives the median per pair over the replays, and the same pair with
no GEMM, so that the difference is the GEMM's cost in place.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_timing import cuda_time  # noqa: E402


def graph_time(body, stream, reps=20, replays=30):
    """Median µs of one body() inside a CUDA graph of reps bodies, replayed
    on stream (the current stream) and timed with CUDA events."""
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for _ in range(reps):
            body()
    ms, _ = cuda_time(g.replay, replays, warmup=3)
    return ms * 1e3 / reps


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="2048,8192")
    ap.add_argument("--width", type=int, default=1536, help="K: d_inner")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    K, N = args.width, 80
    stream = torch.cuda.Stream()
    rows = []
    with torch.cuda.stream(stream):
        W = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K**0.5
        for T in [int(t) for t in args.lengths.split(",")]:
            src = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
            u = torch.empty_like(src)
            write_u = lambda: torch.mul(src, 1.0, out=u)  # noqa: E731
            write_u()
            ref = u.float() @ W.float().t()
            base = graph_time(write_u, stream)
            row = {"T": T, "write_u_us": base}
            for S in (1, 2, 3, 4, 6):
                if K % S:
                    continue
                if S == 1:
                    out = torch.empty(T, N, device="cuda", dtype=torch.float32)
                    gemm = lambda: torch.mm(u, W.t(), out_dtype=torch.float32, out=out)  # noqa: E731
                else:
                    us = u.view(T, S, K // S).transpose(0, 1)  # [S, T, K/S], strides (K/S, K, 1)
                    ws = W.view(N, S, K // S).permute(1, 2, 0)  # [S, K/S, N], column-major blocks
                    out = torch.empty(S, T, N, device="cuda", dtype=torch.float32)
                    gemm = lambda us=us, ws=ws, out=out: torch.bmm(us, ws, out_dtype=torch.float32, out=out)  # noqa: E731
                write_u()
                try:
                    gemm()
                except (TypeError, RuntimeError) as e:  # a torch without out_dtype: bf16 output instead
                    print(f"f32 output failed ({e}); bf16 output", flush=True)
                    out = out.to(torch.bfloat16)
                    if S == 1:
                        gemm = lambda out=out: torch.mm(u, W.t(), out=out)  # noqa: E731
                    else:
                        gemm = lambda us=us, ws=ws, out=out: torch.bmm(us, ws, out=out)  # noqa: E731
                    gemm()
                torch.cuda.synchronize()
                got = (out if S == 1 else out.sum(0)).float()
                err = ((got - ref).abs().max() / ref.abs().max()).item()
                t = graph_time(lambda: (write_u(), gemm()), stream)
                row[f"S{S}_us"] = t - base
                row[f"S{S}_err"] = err
                print(f"T={T} S={S}: x_proj {t - base:6.2f} µs in place (pair {t:6.2f}, write alone {base:5.2f}); "
                      f"max err {err:.1e}", flush=True)
            rows.append(row)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
