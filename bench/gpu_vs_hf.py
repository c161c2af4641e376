"""GPU prefill, f32: mambago's CUDA engine against Hugging Face transformers on
the same GPU, same random weights, same inputs, one run.

    python3 bench/gpu_vs_hf.py --out results.json [--shapes 130m,370m] [--commit SHA]

mambago is timed through its device-pointer entry (prefill_ptr on torch's
current stream, output "last"), HF through MambaModel's forward (its installed
slow path, fp32, TF32 off); both with CUDA events. mambago: the median of
--repeats after half a second of warm-up prefills (the GPU's clocks ramp up), or of 3 when a run takes over 0.5 s.
HF: one run after a short warm-up forward per model, and the median of three
when a run takes under 1.5 s (HF's long shapes take tens of seconds each). The roofline uses the FP32 GEMM rate of a large torch SGEMM (TF32
off) measured in the same run and the GEMM FLOPs per token of design.md §9:
2·L·(6.25·d² + 64·d).
"""

import argparse
import datetime
import json
import os
import statistics
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import random_checkpoint  # noqa: E402
from cuda_timing import cuda_time, gemm_rate  # noqa: E402
from roofline import gemm_flops_per_token  # noqa: E402


def main():
    """Parse the arguments, time mambago and HF on each shape and write the JSON."""
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    random_checkpoint.add_matrix_args(p)
    p.add_argument("--commit", default="unknown")
    a = p.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    import transformers

    import mambago

    rate = gemm_rate(torch.float32)
    gpu = torch.cuda.get_device_name()
    print(f"{gpu}: torch FP32 SGEMM {rate / 1e12:.1f} TFLOP/s; transformers {transformers.__version__}", flush=True)
    rows = []
    rng = np.random.default_rng(0)
    for shape in a.shapes:
        d, L = random_checkpoint.SHAPES[shape]
        path = random_checkpoint.cached(shape)
        mg = mambago.Model.from_pretrained(path, device="cuda")
        hf = transformers.MambaModel.from_pretrained(path, dtype=torch.float32).cuda().eval()
        with torch.no_grad():  # HF's warm-up
            hf(input_ids=torch.zeros(1, 16, dtype=torch.long, device="cuda"), use_cache=False)
        flops_per_token = gemm_flops_per_token(d, L)
        for B in a.batches:
            state = mg.new_state(B)
            for T in a.lengths:
                ids = torch.from_numpy(rng.integers(0, mg.config.vocab_size, size=(B, T))).cuda()
                out = torch.empty(B, d, device="cuda")
                stream = torch.cuda.current_stream().cuda_stream

                def run_mg():
                    mg.prefill_ptr(ids.data_ptr(), (B, T), out_ptr=out.data_ptr(), state=state, stream=stream)

                ms, times = cuda_time(run_mg, 1, warm_seconds=0.5)
                ms, times = cuda_time(run_mg, a.repeats if ms < 500 else 3, warmup=0)
                tok_s = B * T / (ms / 1e3)
                row = {"shape": shape, "d": d, "layers": L, "B": B, "T": T, "mambago_ms": ms, "mambago_tok_s": tok_s,
                       "mambago_times_ms": times, "roofline_tok_s": rate / flops_per_token,
                       "roofline_fraction": tok_s / (rate / flops_per_token)}
                ref = {}

                def run_hf():  # keeps its output: HF's forward is stateless, so any run is the reference
                    with torch.no_grad():
                        ref["last"] = hf(input_ids=ids, use_cache=False).last_hidden_state[:, -1]

                hms, htimes = cuda_time(run_hf, 1, warmup=0)
                if hms < 1500:
                    hms, more = cuda_time(run_hf, 2, warmup=0)
                    htimes += more
                    hms = statistics.median(htimes)
                state.reset()
                out.fill_(float("nan"))
                run_mg()
                torch.cuda.synchronize()
                err = float((out - ref["last"]).abs().max() / ref["last"].abs().max())
                row.update({"hf_ms": hms, "hf_tok_s": B * T / (hms / 1e3), "speedup_vs_hf": hms / ms,
                            "hf_times_ms": htimes, "max_rel_err_vs_hf": err})
                rows.append(row)
                extra = f", HF {row['hf_ms']:.1f} ms, {row['speedup_vs_hf']:.0f}x, err {row['max_rel_err_vs_hf']:.1e}"
                print(f"{shape} B={B} T={T}: {ms:.2f} ms, {tok_s:,.0f} tok/s, "
                      f"{100 * row['roofline_fraction']:.1f}% of roofline{extra}", flush=True)
        del hf, mg
        torch.cuda.empty_cache()
    result = {"bench": "gpu prefill f32 (true FP32 GEMMs, no TF32), random weights, output last",
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "commit": a.commit, "gpu": gpu, "sgemm_flops": rate, "torch": torch.__version__,
              "transformers": transformers.__version__, "timing": f"CUDA events; mambago: median of {a.repeats} (3 over 0.5 s) after "
              "0.5 s of warm-up; HF: one run, or the median of 3 when under 1.5 s, after a warm-up forward", "rows": rows}
    with open(a.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
