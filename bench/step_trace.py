"""Where a decode step graph's time goes, kernel by kernel, in place: CUPTI's
kernel records (through torch.profiler) of bf16 step graph replays of a
random model, entered through Graph.step_ptr on a torch stream.

    python3 bench/step_trace.py --shape 2.8b --B 1 --out step_trace.json

BenchmarkReadFloor times a decode GEMV alone, in trains of one kernel; in a
step graph each kernel starts under PDL beside the ones before it (its
weights' first loads before its wait), so a kernel made faster alone need
not make the step faster. This places the step's time: for every kernel
of a layer (by its place in the layer; a layer starts at its in_proj, the
kernel whose name starts with step_in) its duration, its gap after the
previous kernel's end (negative where PDL let it start before), and its
share of the layer's period (to the next kernel's start), as
bench/graph_trace.py does for a prefill, whose helpers it shares. Medians
over the middle layers of the traced replays; the replay's time without
the profiler (CUDA events, back to back) is printed beside.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from graph_trace import kernels, layers, summarize, traced  # noqa: E402

LAYER_START = "step_in"  # in_proj, the first kernel of a decode layer on every path


def step_role(name):
    """A short name for a decode step's kernel: its entry's stem."""
    for stem, role in (("step_in", "in_proj"), ("x_parts", "x_parts"), ("step_scan", "scan"),
                       ("lm_head", "lm_head"), ("head_picks", "head_picks"), ("embed", "embed")):
        if name.startswith(stem):
            return role
    return name.split("(")[0][:24]


def table(s, title):
    """Prints summarize's result s for a layer's kernels under title."""
    print(f"\n{title}: {s['layers']} layers of {s['kernels_a_layer']} kernels, period {s['period_us']:.2f} us a layer")
    print(f"  {'place':>5} {'role':<12} {'dur':>7} {'gap':>7} {'to next':>8}  kernel")
    for r in s["rows"]:
        nxt = "" if r["to_next_start_us"] is None else f"{r['to_next_start_us']:8.2f}"
        print(f"  {r['place']:>5} {step_role(r['names'][0]):<12} {r['duration_us']:7.2f} {r['gap_us']:7.2f} "
              f"{nxt:>8}  {r['names'][0][:60]}")


def trace(a, mg):
    """Traces a.replays replays of mg's step graph for a.B sequences and
    returns the summary, with the replay's untraced time."""
    import torch

    V = mg.config.vocab_size
    stream = torch.cuda.Stream()
    mg.reserve(a.B, 1)  # a workspace grown after the capture would refuse the replays
    state = mg.new_state(a.B)
    graph = mg.capture_step(state)
    ids = torch.randint(0, V, (a.B,), device="cuda", dtype=torch.int64)
    logits = torch.full((a.B, V), float("nan"), device="cuda")

    def run():
        graph.step_ptr(ids.data_ptr(), logits_ptr=logits.data_ptr(), stream=stream.cuda_stream)

    def check():
        if not torch.isfinite(logits).all():
            raise RuntimeError("the step graph's logits hold NaN or inf")

    # 50 warm-up replays: the clocks ramp up over the first ones.
    plain, prof, after = traced(run, stream, 50, a.replays, check)
    graph.close()
    ks = kernels(prof)
    s = summarize(layers(ks, LAYER_START))
    s.update({"replay_ms_untraced": plain, "replay_ms_untraced_after": after, "kernels_traced": len(ks)})
    table(s, f"{a.shape} B={a.B}: step {plain * 1e3:.1f} us untraced ({after * 1e3:.1f} after), "
             f"{len(ks)} kernels over {a.replays} replays")
    return s


def main():
    """Build the model, trace its step graph's replays, write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="2.8b")
    p.add_argument("--B", type=int, default=1)
    p.add_argument("--replays", type=int, default=20)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    import mambago
    import random_checkpoint
    import torch

    if a.shape not in random_checkpoint.SHAPES:
        p.error(f"--shape {a.shape}: one of {', '.join(random_checkpoint.SHAPES)}")
    if not 1 <= a.B <= 8:
        p.error("--B: 1 to 8 (the step graphs' batches)")
    mg = mambago.Model.from_pretrained(random_checkpoint.cached(a.shape), device="cuda", dtype="bfloat16")
    result = {"shape": a.shape, "B": a.B, "gpu": torch.cuda.get_device_name(), "trace": trace(a, mg)}
    mg.close()
    with open(a.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
