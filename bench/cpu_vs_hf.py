"""CPU prefill: mambago's Go engine against Hugging Face transformers (torch,
fp32, CPU), same random 130m-shaped weights, same inputs, same cores, one run.

    python3 bench/cpu_vs_hf.py --out results.json [--lengths 512] [--commit SHA]

Times the prefill of B x T tokens to the last hidden state (HF: MambaModel's
forward; mambago: Model.prefill(output="last")), median of repeats after a
warm-up, and checks that both give the same hidden state.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import random_checkpoint  # noqa: E402


def cpu_name():
    """The CPU model name, from /proc/cpuinfo where there is one."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def timed(fn, repeats):
    """Run fn once to warm up, then repeats times; return the median and all times in seconds."""
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def main():
    """Parse the arguments, time both engines on a random checkpoint and write the JSON."""
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--model-dir", default="/tmp/mambago-bench-130m")
    p.add_argument("--lengths", default="512")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--hf-repeats", type=int, default=3)
    p.add_argument("--commit", default="unknown")
    a = p.parse_args()

    import torch
    import transformers

    import mambago

    if not os.path.exists(os.path.join(a.model_dir, "model.safetensors")):
        random_checkpoint.write(a.model_dir, 768, 24)
    threads = os.cpu_count()
    torch.set_num_threads(threads)
    hf = transformers.MambaModel.from_pretrained(a.model_dir, dtype=torch.float32).eval()
    mg = mambago.Model.from_pretrained(a.model_dir, device="cpu")
    rng = np.random.default_rng(0)
    rows = []
    print(f"CPU: {cpu_name()}, {threads} cores; torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"transformers {transformers.__version__}, mambago {mambago.__version__}", flush=True)
    for T in [int(t) for t in a.lengths.split(",")]:
        ids = rng.integers(0, mg.config.vocab_size, size=(a.batch, T), dtype=np.int64)
        tids = torch.from_numpy(ids)

        def run_hf():
            with torch.no_grad():
                return hf(input_ids=tids, use_cache=False).last_hidden_state[:, -1].numpy()

        def run_mg():
            return mg.prefill(ids, output="last")

        ref, got = run_hf(), run_mg()
        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
        t_mg, mg_times = timed(run_mg, a.repeats)
        t_hf, hf_times = timed(run_hf, a.hf_repeats)
        row = {"B": a.batch, "T": T, "mambago_ms": t_mg * 1e3, "hf_ms": t_hf * 1e3,
               "mambago_tok_s": a.batch * T / t_mg, "hf_tok_s": a.batch * T / t_hf, "speedup": t_hf / t_mg,
               "max_rel_err_vs_hf": err, "mambago_times_ms": [t * 1e3 for t in mg_times],
               "hf_times_ms": [t * 1e3 for t in hf_times]}
        rows.append(row)
        print(f"B={a.batch} T={T}: mambago {row['mambago_ms']:.1f} ms ({row['mambago_tok_s']:,.0f} tok/s), "
              f"HF {row['hf_ms']:.1f} ms ({row['hf_tok_s']:,.0f} tok/s), speedup {row['speedup']:.2f}x, "
              f"max rel err {err:.2e}", flush=True)
    result = {
        "bench": "cpu prefill, 130m shape (d=768, 24 layers, vocab 50280), random weights, fp32",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": a.commit, "cpu": cpu_name(), "cores": threads, "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(), "transformers": transformers.__version__,
        "mambago": mambago.__version__, "timing": f"median of {a.repeats} (mambago) / {a.hf_repeats} (HF) "
        "wall-clock runs after one warm-up each", "rows": rows,
    }
    with open(a.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
