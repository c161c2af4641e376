"""Would a layer gain from running in_proj's z half beside the conv and x_proj?

A probe in torch, not the engine: the 130m layer's kernels up to the scan,
in a CUDA graph of 24 layers, bf16, B=1, with stand-ins where the engine has
its own kernels. Per layer:

    x  = h.to(bf16)                    RMSNorm's stand-in (reads h, writes x)
    xz = x @ W_in^T                    in_proj, N = 2E (a batch of two halves)
    u  = silu(xz[:, :E])               the conv's stand-in (reads x, writes u)
    dbl = u @ W_x^T                    x_proj, N = R + 2N
    y  = u * silu(xz[:, E:])           the scan's stand-in (needs z)
    h += y @ W_out^T                   out_proj

Arms, taking turns in one process:
- serial: as above, one stream;
- split:  in_proj as two GEMMs of N = E (x, then z), one stream;
- fork:   the z GEMM on a second stream from the norm on, joined before the
          scan's stand-in, so it runs beside the x GEMM, the conv and x_proj;
- fork_prio: fork with the main stream at high priority, the side stream at
          low priority (the graph's nodes keep the streams' priorities).

The fork gains only what the GPU leaves idle on the serial path: the GEMMs'
ramps and tails and the small kernels' launches and gaps. Those are the
fixed part of a layer, so the gain should be larger per row at T=2048 than
at T=8192; the window (tok/s at 8192 over 2048) is what the arms are read
for. Times are CUDA events around graph replays: medians of rounds.

    python3 bench/fork_probe.py --lengths 2048,8192 --out fork.json
"""

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

D, E, R, NS = 768, 1536, 48, 16  # the 130m shape
LAYERS = 24


def buffers(M, dev):
    """Weights and activations for one layer, reused by every layer."""
    g = torch.Generator(device=dev).manual_seed(1)

    def rnd(*shape, scale=0.02):
        return (torch.randn(*shape, generator=g, device=dev) * scale).to(torch.bfloat16)

    return {
        "h": torch.randn(M, D, generator=g, device=dev),
        "w_in": rnd(2 * E, D),
        "w_x": rnd(R + 2 * NS, E),
        "w_out": rnd(D, E),
        "x": torch.empty(M, D, device=dev, dtype=torch.bfloat16),
        "xz": torch.empty(2, M, E, device=dev, dtype=torch.bfloat16),
        "xb": torch.empty(M, E, device=dev, dtype=torch.bfloat16),
        "zb": torch.empty(M, E, device=dev, dtype=torch.bfloat16),
        "u": torch.empty(M, E, device=dev, dtype=torch.bfloat16),
        "dbl": torch.empty(M, R + 2 * NS, device=dev, dtype=torch.bfloat16),
        "y": torch.empty(M, E, device=dev, dtype=torch.bfloat16),
    }


def layer(b, arm, side):
    """One layer's kernels on the current stream; side is the fork's stream."""
    b["x"].copy_(b["h"])
    if arm == "serial":  # one GEMM of N = 2E, as a batch of two so that each half is contiguous
        torch.bmm(b["x"].expand(2, -1, -1), b["w_in"].view(2, E, D).transpose(1, 2), out=b["xz"])
        xs, zs = b["xz"][0], b["xz"][1]
    else:
        xs, zs = b["xb"], b["zb"]
        main = torch.cuda.current_stream()
        if arm == "split":
            torch.mm(b["x"], b["w_in"][:E].t(), out=xs)
            torch.mm(b["x"], b["w_in"][E:].t(), out=zs)
        else:
            side.wait_stream(main)
            torch.mm(b["x"], b["w_in"][:E].t(), out=xs)
            with torch.cuda.stream(side):
                torch.mm(b["x"], b["w_in"][E:].t(), out=zs)
    torch.mul(xs, torch.sigmoid(xs), out=b["u"])
    torch.mm(b["u"], b["w_x"].t(), out=b["dbl"])
    if arm.startswith("fork"):
        torch.cuda.current_stream().wait_stream(side)
    torch.mul(b["u"], F.silu(zs), out=b["y"])
    b["h"].add_(torch.mm(b["y"], b["w_out"].t()).float())


def capture(b, arm):
    """A graph of LAYERS layers of arm."""
    hi, lo = torch.cuda.Stream(priority=-1), torch.cuda.Stream(priority=0)
    main = hi if arm == "fork_prio" else torch.cuda.Stream()
    side = lo if arm == "fork_prio" else torch.cuda.Stream()
    with torch.cuda.stream(main):  # warm up cuBLAS's handles on both streams
        for _ in range(2):
            layer(b, arm, side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=main):
        for _ in range(LAYERS):
            layer(b, arm, side)
    torch.cuda.synchronize()
    return g


def time_graph(g, replays=20):
    """Milliseconds a replay, over replays back to back."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g.replay()
    start.record()
    for _ in range(replays):
        g.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / replays


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="2048,8192")
    ap.add_argument("--arms", default="serial,split,fork,fork_prio")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", default="fork_probe.json")
    args = ap.parse_args()
    dev = torch.device("cuda")
    arms = args.arms.split(",")
    rows = []
    for M in [int(v) for v in args.lengths.split(",")]:
        b = buffers(M, dev)
        graphs = {a: capture(b, a) for a in arms}
        times = {a: [] for a in arms}
        for _ in range(args.rounds):
            for a in arms:
                times[a].append(time_graph(graphs[a]) * 1e3 / LAYERS)  # us a layer
        for a in arms:
            med = statistics.median(times[a])
            rows.append({"T": M, "arm": a, "us_per_layer": med, "us_per_2048_rows": med * 2048 / M,
                         "rounds": times[a]})
            print(f"T={M:5d} {a:10s} {med:8.2f} us a layer ({med * 2048 / M:7.2f} per 2048 rows)", flush=True)
    by = {(r["T"], r["arm"]): r["us_per_2048_rows"] for r in rows}
    for a in arms:
        if (2048, a) in by and (8192, a) in by:
            print(f"{a:10s} T=8192 over T=2048 per row: {by[(2048, a)] / by[(8192, a)] - 1:+.1%} "
                  f"(ratio to serial at 2048 {by[(2048, 'serial')] / by[(2048, a)]:.3f}x, "
                  f"at 8192 {by[(8192, 'serial')] / by[(8192, a)]:.3f}x)")
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
