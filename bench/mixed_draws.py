"""How far a bf16 or f16 model's outputs fall from the f32 model's over many
random prompts: the distribution behind tests/test_gpu.py's
test_mixed_precision_close_to_float32 (the norm of the difference over the
norm of f32's), on the `base` fixture, per output kind. Every prefill runs
twice and the two must agree bit for bit: a race in a kernel would show as
a rare outlier in the distribution, and as a mismatch here.

    PYTHONPATH=<installed wheel> python3 bench/mixed_draws.py [draws] [--random-shapes]

Without --random-shapes every draw is 3 prompts of 50 tokens (the test's
shape); with it, B in 1..4 and T in 1..400. The worst draws are listed with
their shapes and draw numbers (the generator's seed is 12345).
"""

import sys

import numpy as np

sys.path.insert(0, "tests")
from conftest import case_dir  # noqa: E402

import mambago  # noqa: E402

OUTPUTS = ("all", "last", "mean")


def main():
    """Print each dtype's and output kind's quantiles over the draws, the
    worst draws, and how many prefills differed from their repeat."""
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    draws = int(args[0]) if args else 200
    random_shapes = "--random-shapes" in sys.argv
    f32 = mambago.Model.from_pretrained(case_dir("base"), device="cuda")
    mismatches = 0
    for dtype in ("bfloat16", "float16", "float32"):
        m = f32 if dtype == "float32" else mambago.Model.from_pretrained(case_dir("base"), device="cuda", dtype=dtype)
        rng = np.random.default_rng(12345)
        ratios = {o: [] for o in OUTPUTS}
        for draw in range(draws):
            B, T = (int(rng.integers(1, 5)), int(rng.integers(1, 401))) if random_shapes else (3, 50)
            ids = rng.integers(0, m.config.vocab_size, size=(B, T))
            for o, r in ratios.items():
                got, again = m.prefill(ids, output=o), m.prefill(ids, output=o)
                if not np.array_equal(got, again):
                    mismatches += 1
                    print(f"MISMATCH {dtype} {o} draw {draw} B={B} T={T}: "
                          f"{np.count_nonzero(got != again)} of {got.size} elements differ on a repeat")
                if dtype != "float32":
                    want = f32.prefill(ids, output=o)
                    r.append((float(np.linalg.norm(got - want) / np.linalg.norm(want)), draw, B, T))
        if dtype == "float32":
            continue
        for o, r in ratios.items():
            v = np.array([x[0] for x in r])
            worst = sorted(r, reverse=True)[:3]
            print(f"{dtype} {o}: median {np.median(v):.4f} p90 {np.quantile(v, .9):.4f} p99 {np.quantile(v, .99):.4f} "
                  f"max {v.max():.4f}; above 0.1: {(v > .1).sum()}, above 0.02: {(v > .02).sum()} of {len(v)}; "
                  "worst: " + ", ".join(f"{x:.4f} (draw {d}, B={b} T={t})" for x, d, b, t in worst))
    print(f"repeats that differed: {mismatches} of {3 * len(OUTPUTS) * draws} prefills")


if __name__ == "__main__":
    main()
