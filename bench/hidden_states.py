"""A forward call's hidden_states for a prompt on the GPU: mambago.hf's
MambaForCausalLM (a random bf16 model, bench/random_checkpoint.py) called
on CUDA ids with output_hidden_states=True, against the same call without
them, timed with CUDA events (cuda_timing.cuda_time: each call, median of
--repeats after a warm-up), for each --lengths at B=1.

    python3 bench/hidden_states.py --shape 130m --lengths 512,2048 --out hidden.json

Run it with two builds of the package (PYTHONPATH) to compare them; the
JSON (shape, lengths, ms each way) goes to --out and a table to stdout.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import random_checkpoint  # noqa: E402
from cuda_timing import cuda_time  # noqa: E402


def main():
    """Time the calls and write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="130m", choices=random_checkpoint.SHAPES)
    p.add_argument("--lengths", default="512,2048", type=lambda v: [int(x) for x in v.split(",")])
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    import mambago
    from mambago.hf import MambaForCausalLM

    m = MambaForCausalLM.from_pretrained(random_checkpoint.cached(a.shape), device="cuda", dtype="bfloat16")
    rows = []
    print(f"mambago {mambago.__file__}\n| shape | B | T | forward ms | with hidden_states ms | ratio |\n|---|---|---|---|---|---|")
    for T in a.lengths:
        ids = torch.randint(0, m.config.vocab_size, (1, T), device="cuda")
        plain, _ = cuda_time(lambda: m(ids, use_cache=False), a.repeats, warmup=2)
        hidden, _ = cuda_time(lambda: m(ids, use_cache=False, output_hidden_states=True), a.repeats, warmup=2)
        out = m(ids, use_cache=False, output_hidden_states=True)
        assert len(out.hidden_states) == m.config.num_hidden_layers + 1
        assert all(h.is_cuda and h.shape == (1, T, m.config.hidden_size) for h in out.hidden_states)
        rows.append({"shape": a.shape, "B": 1, "T": T, "forward_ms": plain, "hidden_states_ms": hidden})
        print(f"| {a.shape} | 1 | {T} | {plain:.2f} | {hidden:.2f} | {hidden / plain:.1f} |")
    with open(a.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "mambago": mambago.__file__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
