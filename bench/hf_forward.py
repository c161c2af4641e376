"""A transformers-style forward call, model(ids).logits, with the prompt on
the GPU: the logits made on the device (mambago.hf's path for a prompt on
the model's GPU since the device logits) against the same call through the
host (the path every prompt took before: ids to the host, the states and
logits through numpy, the logits back to the GPU), on a bf16 random model.

    python3 bench/hf_forward.py --shape 130m --cases 1x512,1x2048,8x512 --out hf_forward.json

Each way is timed with CUDA events around the call (the work it queued
included), the median of --repeats after warm-up calls. Beside it: the prefill alone into a device
buffer of every position's states (Model.prefill_ptr, output "all"), and
the floors of the LM head's GEMM (its FLOPs at the run's bf16 GEMM rate)
and of writing the logits (at 4.8 TB/s). The two ways' logits are checked
to agree (the same engine: max relative difference).
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import random_checkpoint  # noqa: E402
from cuda_timing import cuda_time, gemm_rate  # noqa: E402

HBM = 4.8e12  # the H200's HBM3e bytes/s


def timed(fn, repeats):
    """Median ms of fn (CUDA events around the call, the work it queued
    included), after two warm-up calls."""
    return cuda_time(fn, repeats, warmup=2)[0]


def main():
    """Time each case both ways and write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="130m", choices=random_checkpoint.SHAPES)
    p.add_argument("--cases", default="1x512,1x2048,8x512", help="BxT, comma-separated")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    from mambago.hf import MambaForCausalLM

    m = MambaForCausalLM.from_pretrained(random_checkpoint.cached(a.shape), device="cuda", dtype="bfloat16")
    d, V = m.config.hidden_size, m.config.vocab_size
    rate = gemm_rate(torch.bfloat16)
    rows = []
    print(f"{a.shape} bf16, V={V}, bf16 GEMM rate {rate / 1e12:.0f} TFLOP/s")
    print(f"{'B':>2} {'T':>5} {'via host ms':>11} {'on GPU ms':>9} {'speedup':>7} {'prefill ms':>10} "
          f"{'head floor ms':>13} {'max rel diff':>12}")
    for case in a.cases.split(","):
        B, T = (int(v) for v in case.split("x"))
        ids = torch.randint(0, V, (B, T), device="cuda")
        on_gpu = m(ids).logits
        via_host = m(ids.cpu()).logits.to("cuda")
        diff = ((on_gpu - via_host).abs().max() / via_host.abs().max()).item()
        del on_gpu, via_host
        stream = torch.cuda.current_stream()
        ms_gpu = timed(lambda: m(ids).logits, a.repeats)
        ms_host = timed(lambda: m(ids.cpu()).logits.to("cuda"), max(3, a.repeats // 3))
        states = torch.empty((B, T, d), device="cuda")
        ms_prefill = timed(lambda: m.model.prefill_ptr(ids.data_ptr(), (B, T), out_ptr=states.data_ptr(), output="all",
                                                       stream=stream.cuda_stream), a.repeats)
        head_floor = max(2 * B * T * d * V / rate, 4 * B * T * V / HBM) * 1e3
        row = {"B": B, "T": T, "via_host_ms": ms_host, "on_gpu_ms": ms_gpu, "speedup": ms_host / ms_gpu,
               "prefill_all_ms": ms_prefill, "head_floor_ms": head_floor, "max_rel_diff": diff}
        rows.append(row)
        print(f"{B:>2} {T:>5} {ms_host:11.2f} {ms_gpu:9.3f} {ms_host / ms_gpu:6.1f}x {ms_prefill:10.3f} "
              f"{head_floor:13.3f} {diff:12.2e}")
        if not np.isfinite(diff) or diff > 1e-5:
            raise SystemExit(f"B={B} T={T}: the two ways' logits differ by {diff:.3g}")
    with open(a.out, "w") as f:
        json.dump({"shape": a.shape, "dtype": "bfloat16", "gpu": torch.cuda.get_device_name(),
                   "bf16_gemm_flops": rate, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
