"""Where a device-entry prefill's time goes besides the GPU's work: the bf16
prefill of a random model through Model.prefill_ptr (a cached prefill
graph), timed four ways on the GPU machine.

    python3 bench/entry_overhead.py --shape 130m --B 1 --T 2048 --out entry.json

- per call: CUDA events around each call (cuda_timing.cuda_time), as
  bench/mamba_ssm/compare.py times it (the host's time before the graph reaches the GPU counts);
- back to back: events around 20 calls, divided by 20 (the host runs ahead,
  so this is the GPU's time a prefill);
- host: wall time of a call that only queues work, averaged over 200 calls
  with the stream drained every 20;
- each on the legacy default stream (0, where compare.py runs) and on a
  torch stream of its own.

The medians of 15 repeats of each, in ms, go to --out as JSON and to stdout.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import random_checkpoint  # noqa: E402
from cuda_timing import back_to_back, cuda_time  # noqa: E402


def host(fn, stream, n=15, calls=20):
    """Median host ms a call (wall time of calls queued, the stream drained between batches)."""
    times = []
    for _ in range(n):
        stream.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) * 1e3 / calls)
    stream.synchronize()
    return statistics.median(times)


def main():
    """Build the model, time the entry each way and write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="130m", choices=random_checkpoint.SHAPES)
    p.add_argument("--B", type=int, default=1)
    p.add_argument("--T", type=int, default=2048)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    import mambago

    d, L = random_checkpoint.SHAPES[a.shape]
    path = random_checkpoint.cached(a.shape)
    mg = mambago.Model.from_pretrained(path, device="cuda", dtype="bfloat16")
    mg.set_prefill_graphs(4)
    mg.reserve(a.B, a.T)
    state = mg.new_state(a.B)
    ids = torch.randint(0, mg.config.vocab_size, (a.B, a.T), device="cuda")
    out = torch.empty(a.B, d, device="cuda")
    result = {"shape": a.shape, "B": a.B, "T": a.T, "gpu": torch.cuda.get_device_name()}
    for name, stream in (("default stream", torch.cuda.default_stream()), ("own stream", torch.cuda.Stream())):
        handle = stream.cuda_stream

        def run():
            mg.prefill_ptr(ids.data_ptr(), (a.B, a.T), out_ptr=out.data_ptr(), state=state, stream=handle)

        with torch.cuda.stream(stream):
            for _ in range(20):  # warm: the graph is captured on the first call
                run()
            stream.synchronize()
            row = {"per_call_ms": cuda_time(run, 15)[0], "back_to_back_ms": back_to_back(run, stream),
                   "host_ms": host(run, stream)}
        row["tok_s_per_call"] = a.B * a.T / row["per_call_ms"] * 1e3
        row["tok_s_back_to_back"] = a.B * a.T / row["back_to_back_ms"] * 1e3
        result[name] = row
        print(f"{a.shape} B={a.B} T={a.T} {name}: per call {row['per_call_ms']:.3f} ms "
              f"({row['tok_s_per_call']:,.0f} tok/s), back to back {row['back_to_back_ms']:.3f} ms "
              f"({row['tok_s_back_to_back']:,.0f} tok/s), host {row['host_ms'] * 1e3:.1f} us a call", flush=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
