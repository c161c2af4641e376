"""Markdown table of a bench/mamba_ssm/compare.py result, with the issue's
bars checked row by row.

    python3 bench/mamba_ssm/table.py result.json [--note TEXT ...] > result.md
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from roofline import design_ceiling  # noqa: E402


def main():
    """Print the markdown table of the JSON named on the command line."""
    p = argparse.ArgumentParser()
    p.add_argument("result")
    p.add_argument("--note", action="append", default=[], help="a line for the header (repeatable)")
    a = p.parse_args()
    r = json.load(open(a.result))
    lines = [
        f"# bf16: mambago vs mamba_ssm (`{r['commit']}`)",
        "",
        f"- GPU: {r['gpu']}; torch {r['torch']}; bf16 GEMM rate measured in the run: "
        f"{r['bf16_gemm_flops'] / 1e12:.0f} TFLOP/s",
        f"- Date: {r['date']}; mambago commit `{r['commit']}`",
        "- mamba_ssm 2.3.2.post1 and causal-conv1d 1.7.0 built from their sdists on the GPU machine, sm_90, "
        "forward kernels only (bench/mamba_ssm/build.sh)",
        "- Model: random weights (bench/random_checkpoint.py), bf16 on both sides; output: the last hidden state",
        f"- Timing: {r['timing']}",
        "- Roofline: the run's bf16 GEMM rate / GEMM FLOPs per token (2·L·(6.25·d² + 64·d))",
        "- §9 ceiling: design.md §9's measure: those FLOPs, plus one exp per scan update at 4.2e12/s, plus "
        "45·d·L activation bytes at 4.3 TB/s, one after the other (bench/roofline.py)",
        *[f"- {n}" for n in a.note],
    ]
    if r["prefill"]:
        lines += ["", "## Prefill", "",
                  "| shape | B | T | mambago ms | mambago tok/s | % of roofline | % of §9 ceiling | mamba_ssm ms | "
                  "speedup | last-hidden rel diff |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for x in r["prefill"]:
            # A row merged from another call carries that call's GEMM rate.
            ceiling = design_ceiling(x["d"], x["layers"], x.get("bf16_gemm_flops", r["bf16_gemm_flops"]))
            lines.append(f"| {x['shape']} | {x['B']} | {x['T']} | {x['mambago_ms']:.2f} | {x['mambago_tok_s']:,.0f} | "
                         f"{100 * x['roofline_fraction']:.0f}% | {100 * x['mambago_tok_s'] / ceiling:.0f}% | "
                         f"{x['mamba_ssm_ms']:.2f} | {x['speedup']:.2f}× | {x['max_rel_err_vs_mamba_ssm']:.1e} |")
    if r["decode"]:
        lines += ["", "## Decode step, CUDA graphs on both sides", "",
                  "| shape | B | mambago µs | mamba_ssm µs | speedup |", "|---|---|---|---|---|"]
        for x in r["decode"]:
            # Results from before the batched step have B=1 rows only, without the key.
            lines.append(f"| {x['shape']} | {x.get('B', 1)} | {1e3 * x['mambago_step_ms']:.0f} | "
                         f"{1e3 * x['mamba_ssm_step_ms']:.0f} | {x['speedup']:.2f}× |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
