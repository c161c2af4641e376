"""Summarise an `ncu --print-summary per-kernel` log with gpu__time_duration.sum (or the Duration of the SpeedOfLight section).

Prints one row per kernel and launch shape: invocations, mean and total time,
and the share of the total, largest first. Usage: python3 ncu_summary.py LOG
"""

import re
import sys

UNITS = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "nsecond": 1e-3}


def parse(path):
    """Returns [(kernel and launch shape, invocations, mean µs)] from the log at path."""
    rows, current = [], None
    with open(path, errors="replace") as f:
        for line in f:
            m = re.match(r"\s+(\S+) (\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)),.*Invocations (\d+)", line)
            if m:
                current = (f"{m.group(1)} {m.group(2)}", int(m.group(3)))
                continue
            m = re.match(r"\s+(?:gpu__time_duration\.sum|Duration)\s+(\S+)\s+[\d,.]+\s+[\d,.]+\s+([\d,.]+)", line)
            if m and current:
                rows.append((current[0], current[1], float(m.group(2).replace(",", "")) * UNITS[m.group(1)]))
                current = None
    return rows


def main():
    rows = parse(sys.argv[1])
    total = sum(n * t for _, n, t in rows)
    if not rows:
        print("no kernel summaries found")
        return
    print(f"{'kernel (grid)x(block)':70s} {'calls':>6s} {'mean us':>9s} {'total us':>10s} {'share':>6s}")
    for name, n, t in sorted(rows, key=lambda r: -r[1] * r[2]):
        print(f"{name[:70]:70s} {n:6d} {t:9.2f} {n * t:10.1f} {100 * n * t / total:5.1f}%")
    print(f"{'all':70s} {sum(n for _, n, _ in rows):6d} {'':9s} {total:10.1f}")


if __name__ == "__main__":
    main()
