"""How far a bf16 or f16 model's outputs fall from the f32 model's over many
random prompts: the distribution behind tests/test_gpu.py's
test_mixed_precision_close_to_float32 (the norm of the difference over the
norm of f32's), on the `base` fixture, per output kind.

    PYTHONPATH=<installed wheel> python3 bench/mixed_draws.py [draws]
"""

import sys

import numpy as np

sys.path.insert(0, "tests")
from conftest import case_dir  # noqa: E402

import mambago  # noqa: E402


def main():
    """Print each dtype's and output kind's quantiles over the draws."""
    draws = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    f32 = mambago.Model.from_pretrained(case_dir("base"), device="cuda")
    for dtype in ("bfloat16", "float16"):
        m = mambago.Model.from_pretrained(case_dir("base"), device="cuda", dtype=dtype)
        rng = np.random.default_rng(12345)
        ratios = {o: [] for o in ("all", "last", "mean")}
        for _ in range(draws):
            ids = rng.integers(0, m.config.vocab_size, size=(3, 50))
            for o, r in ratios.items():
                got, want = m.prefill(ids, output=o), f32.prefill(ids, output=o)
                r.append(float(np.linalg.norm(got - want) / np.linalg.norm(want)))
        for o, r in ratios.items():
            v = np.array(r)
            print(f"{dtype} {o}: median {np.median(v):.4f} p90 {np.quantile(v, .9):.4f} p99 {np.quantile(v, .99):.4f} "
                  f"max {v.max():.4f}; above 0.1: {(v > .1).sum()}, above 0.02: {(v > .02).sum()} of {len(v)}")


if __name__ == "__main__":
    main()
