"""A left-padded batch, as a mean-pool classifier runs it: one prefill
(Model.prefill with attention_mask: engine.Input.Pad), for new sequences
and continuing a state, against a prefill per row length (the rows of each
length gathered and run alone, as a caller without masks would) and against
the same batch unpadded at its longest length (the work one prefill does,
padding included).

    python3 bench/padded.py --shape 130m --dtype bfloat16 --out padded.json

Every row is left-padded to T with a length drawn uniformly from [lo, T]
(seeded). Each call takes host arrays and returns the pooled [B, d] output,
so its time includes the copies; the median of --repeats calls, each timed
with CUDA events (bench/cuda_timing.py). The padded results are also
compared with the per-length ones (max relative error), as a check that
they are the same function.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import random_checkpoint  # noqa: E402
from cuda_timing import cuda_time  # noqa: E402

import mambago  # noqa: E402

CASES = [(32, 16, 256), (64, 8, 128), (8, 128, 2048)]  # (B, lo, T)


def main():
    """Time each case three ways and write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="130m", choices=random_checkpoint.SHAPES)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--output", default="mean")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--out", default="padded.json")
    a = p.parse_args()
    model = mambago.Model.from_pretrained(random_checkpoint.cached(a.shape), device="cuda", dtype=a.dtype)
    rng = np.random.default_rng(0)
    rows = []
    for B, lo, T in CASES:
        model.reserve(B, T)
        lengths = rng.integers(lo, T + 1, size=B)
        mask = np.zeros((B, T), np.int64)
        for b, n in enumerate(lengths):
            mask[b, T - n:] = 1
        ids = rng.integers(0, model.config.vocab_size, size=(B, T))
        one = lambda: model.prefill(ids, attention_mask=mask, output=a.output)  # noqa: E731
        st = model.new_state(B)
        continued = lambda: model.prefill(ids, attention_mask=mask, output=a.output, state=st)  # noqa: E731
        groups = {n: np.flatnonzero(lengths == n) for n in set(lengths.tolist())}

        def per_length():
            out = np.empty((B, model.config.hidden_size), np.float32)
            for n, g in groups.items():
                out[g] = model.prefill(np.ascontiguousarray(ids[g, T - n:]), output=a.output)
            return out

        unpadded = lambda: model.prefill(ids, output=a.output)  # noqa: E731
        got, want = one(), per_length()
        err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        st.reset()
        got = continued()  # from a zero state: the same function
        err = max(err, float(np.max(np.abs(got - want)) / np.max(np.abs(want))))
        ms = {name: cuda_time(fn, a.repeats, warmup=2)[0] for name, fn in
              (("one", one), ("continued", continued), ("per_length", per_length), ("unpadded", unpadded))}
        row = {"shape": a.shape, "dtype": a.dtype, "output": a.output, "B": B, "T": T, "lo": lo,
               "lengths": len(groups), "tokens": int(lengths.sum()), "rel_err": err,
               **{f"{k}_ms": v for k, v in ms.items()}, "speedup": ms["per_length"] / ms["one"]}
        rows.append(row)
        print(f"{a.shape} {a.dtype} B={B} T={T} lengths {lo}..{T} ({row['lengths']} distinct, {row['tokens']} tokens): "
              f"one prefill {ms['one']:.2f} ms, continuing a state {ms['continued']:.2f} ms, "
              f"a prefill per length {ms['per_length']:.2f} ms ({row['speedup']:.1f}x), "
              f"unpadded {ms['unpadded']:.2f} ms; rel err {err:.2e}", flush=True)
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
