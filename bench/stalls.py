"""Summarize ncu's per-instruction warp-state samples (a CSV from
`ncu --page source --print-source sass --csv`, as scripts/device_run.sh
sourceprof writes it): the share of samples each stall reason takes, and the
instructions that hold the most samples of each reason.

    python3 bench/stalls.py onepass_source.csv [--top 6]
"""

import argparse
import csv
import sys

REASONS = ["selected", "wait", "short_sb", "long_sb", "dispatch", "no_inst", "barrier", "mio", "math",
           "branch_resolving", "lg", "imc", "drain", "membar", "misc", "tex", "sleep", "not_selected"]


def read(path):
    """Return the header and the per-instruction rows of an ncu source CSV."""
    rows = list(csv.reader(open(path, newline="")))
    start = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if start is None:
        sys.exit(f"{path}: no 'Address' header row: not an ncu source CSV")
    header = rows[start]
    return header, [r for r in rows[start + 1:] if len(r) == len(header)]


def main():
    """Print the shares and hot instructions of the CSV named on the command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=6, help="instructions listed a reason")
    a = p.parse_args()
    header, rows = read(a.csv)
    col = {n: i for i, n in enumerate(header)}
    base = int(rows[0][col["Address"]], 16)
    total = sum(int(r[col["Warp Stall Sampling (All Samples)"]] or 0) for r in rows)
    executed = sum(int(r[col["Instructions Executed"]] or 0) for r in rows)
    print(f"{len(rows)} instructions, {executed} warp instructions executed, {total} samples")
    for reason in REASONS:
        name = "stall_" + reason
        if name not in col:
            continue
        per = [(int(r[col[name]] or 0), int(r[col["Address"]], 16) - base, r[col["Source"]].strip()) for r in rows]
        n = sum(v for v, _, _ in per)
        if n == 0 or total == 0:
            continue
        print(f"{reason:17s} {n:7d} samples  {n / total:6.1%}")
        if reason == "selected":
            continue
        for v, off, src in sorted(per, reverse=True)[:a.top]:
            if v:
                print(f"    {v:6d}  +{off:05x}  {src[:70]}")


if __name__ == "__main__":
    main()
