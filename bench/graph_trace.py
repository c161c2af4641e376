"""Where a prefill graph's time goes, kernel by kernel, in place: CUPTI's
kernel records (through torch.profiler) of bf16 prefill graph replays of a
random model, entered through Model.prefill_ptr on a torch stream.

    python3 bench/graph_trace.py --shape 130m --B 1 --lengths 512,2048,8192 --out trace.json

ncu times each kernel alone, serialized and with its own launch; a graph
replay overlaps the kernels launched with PDL and pays each node's launch
in between. CUPTI's records carry each kernel's start and end on the GPU's
clock inside the replay, so for every kernel of a layer (by its place in
the layer) this gives:
- its duration, start to end;
- its gap, from the previous kernel's end to its start (negative where PDL
  let it start before the previous kernel ended);
- its share of the layer's period, from its start to the next kernel's
  start (the period's parts add up to the layer's time).

Medians over the middle layers and the traced replays. Tracing costs
something: the replay's time with the profiler on is printed beside the
same replays' time without it (CUDA events, back to back).
"""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def kernels(prof):
    """The profiled GPU activities (kernels, and any memset or memcpy) as
    (name, start us, end us, gap us, next one's start us or None), in start
    order, less the memsets that ran beside a kernel (chain)."""
    import torch

    out = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.elapsed_us() >= 0:
            out.append((e.name, float(e.time_range.start), float(e.time_range.end)))
    return with_gaps(chain(sorted(out, key=lambda k: k[1])))


def chain(acts):
    """acts (name, start, end) in start order without the memsets that ran
    beside a kernel (Engine.HoistMemsets' memset_rows: they overlap the
    kernel before or after them). Those run off the layer's chain of
    kernels, and they started before or after their kernel from layer to
    layer (130m T=8192: out_proj's memset and the scan), so a place of the
    table held one in some layers and the other in the rest."""
    def overlap(a, b):
        return a[1] < b[2] and b[1] < a[2]

    out = []
    for i, a in enumerate(acts):
        if role(a[0]).startswith("memset") and any(
                0 <= j < len(acts) and not role(acts[j][0]).startswith("memset") and overlap(a, acts[j])
                for j in (i - 1, i + 1)):
            continue
        out.append(a)
    return out


def with_gaps(acts):
    """acts (name, start, end) in order, each with its gap (from the
    previous one's end) and the next one's start."""
    out = acts
    return [(n, t0, t1, t0 - (out[i - 1][2] if i else t0), out[i + 1][1] if i + 1 < len(out) else None)
            for i, (n, t0, t1) in enumerate(out)]


def layers(ks, first):
    """Splits the kernels into layers, each starting at a kernel whose name
    starts with first (the layer's RMSNorm), up to the next; the stretch
    before the first layer and the final norm after the last are dropped."""
    starts = [i for i, k in enumerate(ks) if k[0].startswith(first)]
    return [ks[a:b] for a, b in zip(starts, starts[1:])]


def edges(ks, first, per_replay):
    """The parts of each replay outside its layers, as medians over the
    replays after the first but the last: {"after": [(role, duration,
    gap)], "launch_gap_us", "span_us", "outside_us"}. Every per_replay-th
    kernel whose name starts with first (a layer's RMSNorm) starts a
    replay's first layer. "after" holds what runs behind a replay's last
    GEMM (the last layer's out_proj) up to the next replay's first layer:
    the final norm and the pooling, then what the entry queues around the
    graph (the output's and the next input's copies, where it copies, and
    the next graph's memset of the output). The launch gap runs from the
    previous activity's end to the first layer's start; the span from a
    replay's first layer's start to its last activity's end; "outside_us"
    from the last GEMM's end to the next replay's first layer's start, the
    time a replay spends outside its layers."""
    firsts = [i for i, k in enumerate(ks) if k[0].startswith("rmsnorm_embed")]  # the lookup in the first RMSNorm
    firsts = firsts or [i for i, k in enumerate(ks) if k[0].startswith(first)][::per_replay]
    reps = [ks[a:b] for a, b in zip(firsts, firsts[1:] + [len(ks)])]
    parts = {"after": [], "launch_gap_us": [], "span_us": [], "outside_us": []}
    for r, nxt in zip(reps[1:], reps[2:]):
        gemms = [i for i, k in enumerate(r) if role(k[0]) == "gemm"]
        if not gemms:
            continue
        end = gemms[-1] + 1
        parts["after"].append([(role(k[0]), k[2] - k[1], k[3]) for k in r[end:]])
        parts["launch_gap_us"].append(r[0][3])
        parts["span_us"].append(r[-1][2] - r[0][1])
        parts["outside_us"].append(nxt[0][1] - r[end - 1][2])

    def median_rows(rows):
        if not rows or any(len(x) != len(rows[0]) for x in rows):  # replays differ: the first one's
            return rows[0] if rows else []
        return [(rows[0][i][0], statistics.median(x[i][1] for x in rows), statistics.median(x[i][2] for x in rows))
                for i in range(len(rows[0]))]

    return {"after": median_rows(parts["after"]),
            "launch_gap_us": statistics.median(parts["launch_gap_us"]) if parts["launch_gap_us"] else None,
            "span_us": statistics.median(parts["span_us"]) if parts["span_us"] else None,
            "outside_us": statistics.median(parts["outside_us"]) if parts["outside_us"] else None}


def role(name):
    """A short name for a kernel: ours by their entry's stem, cuBLAS's as gemm."""
    if "memset" in name.lower() or "memcpy" in name.lower():
        return name[:10]
    for stem in ("rmsnorm", "conv", "dt_proj", "scan", "embed", "pool", "add_bias"):
        if name.startswith(stem):
            return stem
    return "gemm" if ("nvjet" in name or "gemm" in name.lower() or "sm90" in name) else name[:24]


def summarize(groups):
    """Per place in the layer: role, kernel names seen, and the medians of
    duration, gap and period share (us); the layer's median period."""
    width = statistics.mode(len(g) for g in groups)
    groups = [g for g in groups if len(g) == width]
    rows = []
    for i in range(width):
        dur = [g[i][2] - g[i][1] for g in groups]
        gap = [g[i][3] for g in groups]
        share = [g[i][4] - g[i][1] for g in groups if g[i][4] is not None]
        rows.append({"place": i, "role": role(groups[0][i][0]), "names": sorted({g[i][0][:80] for g in groups}),
                     "duration_us": statistics.median(dur), "gap_us": statistics.median(gap),
                     "to_next_start_us": statistics.median(share) if share else None})
    periods = [b[0][1] - a[0][1] for a, b in zip(groups, groups[1:])]
    return {"kernels_a_layer": width, "layers": len(groups), "period_us": statistics.median(periods),
            "rows": rows}


def traced(run, stream, warmup, replays, check=None):
    """Runs run warmup times on stream (then check(), if given), times it
    back to back, profiles replays runs of it, and times it again; returns
    (ms a call before, the profiler, ms a call after)."""
    import torch
    from cuda_timing import back_to_back
    from torch.profiler import ProfilerActivity, profile

    with torch.cuda.stream(stream):
        for _ in range(warmup):
            run()
        stream.synchronize()
        if check:
            check()
        plain = back_to_back(run, stream, repeats=9)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(replays):
                run()
            stream.synchronize()
        after = back_to_back(run, stream, repeats=9)
    return plain, prof, after


def trace(a, mg, L, d):
    """Traces mg's replays at each of a.lengths and prints each length's
    table; returns {str(T): summary}."""
    import torch

    stream = torch.cuda.Stream()
    out_lengths = {}
    for T in a.lengths:
        mg.reserve(a.B, T)
        state = mg.new_state(a.B)
        ids = torch.randint(0, mg.config.vocab_size, (a.B, T), device="cuda")
        out = torch.empty(a.B, d, device="cuda")

        def run():
            mg.prefill_ptr(ids.data_ptr(), (a.B, T), out_ptr=out.data_ptr(), state=state,
                           stream=stream.cuda_stream)

        # 30 warm-up calls: the graph is captured on the first; then the clocks ramp up.
        plain, prof, after = traced(run, stream, 30, a.replays)
        ks = kernels(prof)
        s = summarize(layers(ks, "rmsnorm_bf16"))
        s["outside"] = edges(ks, "rmsnorm_bf16", L)
        spans = [ks[-1][2] - ks[0][1]]
        s.update({"T": T, "replay_ms_untraced": plain, "replay_ms_untraced_after": after,
                  "traced_span_ms": spans[0] / 1e3 / a.replays, "kernels_traced": len(ks)})
        out_lengths[str(T)] = s
        print(f"\n{a.shape} B={a.B} T={T} gemm={a.gemm or 'default'}: replay {plain:.3f} ms untraced ({after:.3f} after), "
              f"{len(ks)} kernels traced over {a.replays} replays, {s['layers']} layers of "
              f"{s['kernels_a_layer']}, period {s['period_us']:.1f} us a layer")
        print(f"  {'place':>5} {'role':<10} {'dur':>7} {'gap':>7} {'to next':>8}  kernel")
        for r in s["rows"]:
            gap = f"{r['gap_us']:7.2f}"
            nxt = "" if r["to_next_start_us"] is None else f"{r['to_next_start_us']:8.2f}"
            print(f"  {r['place']:>5} {r['role']:<10} {r['duration_us']:7.2f} {gap:>7} {nxt:>8}  {r['names'][0][:60]}")
        o = s["outside"]
        if o["span_us"] is not None:
            outside = "" if o["outside_us"] is None else f", {o['outside_us']:.1f} us outside the layers"
            print(f"  outside the layers: launch gap {o['launch_gap_us']:.2f} us after the previous replay, "
                  f"span {o['span_us']:.1f} us a replay{outside}")
            for r in o["after"]:
                print(f"    after  {r[0]:<10} {r[1]:7.2f} us, gap {r[2]:6.2f}")
    return out_lengths


def compare_instances(runs):
    """Prints, for each length, each instance's untraced replay time and
    each place's period share (to the next kernel's start) per instance,
    so that a slow instance's extra time can be placed."""
    for T in runs[0]:
        print(f"\n== T={T}: instances side by side (us to the next kernel's start, medians)")
        print("  replay ms: " + ", ".join(f"{r[T]['replay_ms_untraced']:.3f}" for r in runs))
        print("  period us: " + ", ".join(f"{r[T]['period_us']:.2f}" for r in runs))
        for i, row in enumerate(runs[0][T]["rows"]):
            cells = []
            for r in runs:
                rows = r[T]["rows"]
                v = rows[i]["to_next_start_us"] if i < len(rows) else None
                cells.append("   -  " if v is None else f"{v:6.2f}")
            print(f"  {i:>5} {row['role']:<10} " + " ".join(cells))


def run_between(shape, T):
    """Builds a bf16 model of shape, runs 20 prefills of one sequence of T
    random ids on the GPU and closes it."""
    import mambago
    import random_checkpoint
    import torch

    mg = mambago.Model.from_pretrained(random_checkpoint.cached(shape), device="cuda", dtype="bfloat16")
    ids = torch.randint(0, mg.config.vocab_size, (1, T), device="cuda")
    out = torch.empty(1, random_checkpoint.SHAPES[shape][0], device="cuda")
    stream = torch.cuda.Stream()
    state = mg.new_state(1)
    for _ in range(20):
        mg.prefill_ptr(ids.data_ptr(), (1, T), out_ptr=out.data_ptr(), state=state, stream=stream.cuda_stream)
    stream.synchronize()
    mg.close()
    print(f"  (between: {shape} T={T}, 20 prefills)")


def main():
    """Build the model, trace replays at each length, write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="130m")
    p.add_argument("--B", type=int, default=1)
    p.add_argument("--lengths", default="2048", type=lambda v: [int(x) for x in v.split(",")])
    p.add_argument("--replays", type=int, default=5)
    p.add_argument("--gemm", default=None, help="Model.set_gemm's algorithm (default: the model's own)")
    p.add_argument("--instances", type=int, default=1,
                   help="models built, traced and closed one after another in this process, compared at the end")
    p.add_argument("--between", default="", type=lambda v: [x.split(":") for x in v.split(",") if x],
                   help="SHAPE:T,...: before each instance after the first, build each of these bf16 models, run "
                        "20 prefills of B=1, T and close it (the slow pass of bench/NOTES.md)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    import mambago
    import random_checkpoint
    import torch

    if a.shape not in random_checkpoint.SHAPES:
        p.error(f"--shape {a.shape}: one of {', '.join(random_checkpoint.SHAPES)}")
    if a.instances < 1:
        p.error("--instances: at least 1")
    for item in a.between:
        if len(item) != 2 or item[0] not in random_checkpoint.SHAPES or not item[1].isdigit():
            p.error(f"--between: {':'.join(item)!r} is not SHAPE:T")
    d, L = random_checkpoint.SHAPES[a.shape]
    path = random_checkpoint.cached(a.shape)
    result = {"shape": a.shape, "B": a.B, "gemm": a.gemm, "gpu": torch.cuda.get_device_name(), "instances": []}
    for i in range(a.instances):
        if a.instances > 1:
            print(f"\n==== instance {i + 1} of {a.instances}")
        if i > 0:
            for shape, T in a.between:
                run_between(shape, int(T))
        mg = mambago.Model.from_pretrained(path, device="cuda", dtype="bfloat16")
        mg.set_prefill_graphs(len(a.lengths) + 1)
        if a.gemm:
            mg.set_gemm(a.gemm)
        result["instances"].append(trace(a, mg, L, d))
        mg.close()
    result["lengths"] = result["instances"][0]
    if a.instances > 1:
        compare_instances(result["instances"])
    with open(a.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
