"""The decode step's GEMMs at B=8 on cuBLAS (torch's bf16 F.linear), as
mamba_ssm's decode step runs them: the rate our tensor-core GEMVs
(kernels/step.cu's _tc entries, BenchmarkGEMVBatch) should reach.

    python3 bench/cublas_gemv.py --out cublas_gemv.json

For each GEMM of the 1.4b and 2.8b shapes (in_proj, x_proj, out_proj, the
LM head): 8 calls on weights that rotate over copies past L2's 50 MB,
captured in one CUDA graph so that the host's launch time falls outside,
replayed back to back between CUDA events; the median time a call over
repeats, the weights' rate against the H200's 4.8 TB/s, and the kernels
cuBLAS ran (torch.profiler).
"""

import argparse
import datetime
import json
import statistics

import torch
import torch.nn.functional as F

HBM = 4.8e12  # the H200's bytes a second

SHAPES = {  # d, E, dt rank, state, vocab
    "1.4b": (2048, 4096, 128, 16, 50280),
    "2.8b": (2560, 5120, 160, 16, 50280),
}


def gemms(d, E, R, N, V):
    """The decode step's GEMMs as (name, rows, K)."""
    return [("in_proj", 2 * E, d), ("x_proj", R + 2 * N, E), ("out_proj", d, E), ("lm_head", V, d)]


def time_gemm(rows, K, B, calls, repeats):
    """Median µs a call of F.linear at B rows of x, bf16, over repeats of a
    graph of calls calls, each on the next copy of the weights; and the
    kernels the calls ran."""
    copies = max(2, (200 << 20) // (2 * rows * K) + 1)
    ws = [torch.randn(rows, K, device="cuda", dtype=torch.bfloat16) * 0.05 for _ in range(copies)]
    x = torch.randn(B, K, device="cuda", dtype=torch.bfloat16)
    outs = [torch.empty(B, rows, device="cuda", dtype=torch.bfloat16) for _ in range(calls)]
    want = x.float() @ ws[0].float().t()
    got = F.linear(x, ws[0])
    err = ((got.float() - want).norm() / want.norm()).item()
    if err > 1e-2:
        raise SystemExit(f"F.linear {rows}x{K} at B={B}: rel err {err:.3g} against f32")

    def run():
        for i in range(calls):
            torch.matmul(x, ws[i % copies].t(), out=outs[i])

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()  # warm cuBLAS's handle and workspace before the capture
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        times.append(1e3 * start.elapsed_time(end) / calls)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    kernels = sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
    return statistics.median(times), err, kernels


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the JSON results file")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    rows_out = []
    for shape, dims in SHAPES.items():
        for name, rows, K in gemms(*dims):
            us, err, kernels = time_gemm(rows, K, args.batch, args.calls, args.repeats)
            mb = 2 * rows * K / 1e6
            rate = 2 * rows * K / (us * 1e-6)
            print(f"{shape} {name:8s} {rows:6d} x {K:5d} ({mb:6.1f} MB) B={args.batch}: {us:7.2f} us "
                  f"{rate / 1e12:.2f} TB/s ({100 * rate / HBM:.0f}% of HBM)  err {err:.1e}  {'; '.join(kernels)}",
                  flush=True)
            rows_out.append({"shape": shape, "gemm": name, "rows": rows, "K": K, "batch": args.batch, "us": us,
                             "tb_per_s": rate / 1e12, "hbm_fraction": rate / HBM, "rel_err": err,
                             "kernels": kernels})
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
                   "torch": torch.__version__, "cuda": torch.version.cuda, "rows": rows_out}, f, indent=1)


if __name__ == "__main__":
    main()
