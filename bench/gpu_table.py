"""Merge JSON results of bench/gpu_vs_hf.py (one per call on the GPU machine)
into one JSON file and a markdown table.

    python3 bench/gpu_table.py OUT_PREFIX part1.json part2.json ... [--note TEXT]

writes OUT_PREFIX.json and OUT_PREFIX.md.
"""

import argparse
import json


def main():
    """Merge the parts named on the command line into PREFIX.json and PREFIX.md."""
    p = argparse.ArgumentParser()
    p.add_argument("prefix")
    p.add_argument("parts", nargs="+")
    p.add_argument("--note", action="append", default=[], help="a line for the header (repeatable)")
    a = p.parse_args()
    parts = [json.load(open(f)) for f in a.parts]
    rows = [r for part in parts for r in part["rows"]]
    first = parts[0]
    merged = {k: v for k, v in first.items() if k != "rows"}
    merged["runs"] = [{k: v for k, v in part.items() if k != "rows"} for part in parts]
    merged["rows"] = rows
    with open(a.prefix + ".json", "w") as f:
        json.dump(merged, f, indent=2)
    rates = ", ".join(f"{part['sgemm_flops'] / 1e12:.1f}" for part in parts)
    commits = ", ".join(sorted({f"`{part['commit']}`" for part in parts}))
    dates = ", ".join(part["date"] for part in parts)
    lines = [
        f"# GPU prefill, f32: mambago vs Hugging Face transformers ({commits})",
        "",
        f"- GPU: {first['gpu']}; torch FP32 SGEMM (TF32 off) measured in each run: {rates} TFLOP/s",
        f"- Dates: {dates}; mambago commit(s) {commits}; torch {first['torch']}, transformers "
        f"{first['transformers']} (its slow path: no mamba_ssm or causal-conv1d installed)",
        "- Model: random weights, output = last hidden state; true FP32 GEMMs (cuBLAS pedantic math), no TF32",
        f"- Timing: {first['timing']}; mambago through its device-pointer entry on torch's stream",
        "- Roofline: FP32 SGEMM rate of the same run / GEMM FLOPs per token (2·L·(6.25·d² + 64·d))",
        *[f"- {n}" for n in a.note],
        "",
        "| shape | B | T | mambago ms | mambago tok/s | % of roofline | HF ms | speedup vs HF | max rel err vs HF |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        hf = (f"{r['hf_ms']:.1f} | {r['speedup_vs_hf']:.0f}× | {r['max_rel_err_vs_hf']:.1e}"
              if "hf_ms" in r else "– | – | –")
        lines.append(f"| {r['shape']} | {r['B']} | {r['T']} | {r['mambago_ms']:.2f} | {r['mambago_tok_s']:,.0f} | "
                     f"{100 * r['roofline_fraction']:.1f}% | {hf} |")
    with open(a.prefix + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
