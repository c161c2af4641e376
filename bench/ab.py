"""Compares two builds' BenchmarkPrefillShapes runs (scripts/device_run.sh ab).

    python3 bench/ab.py base_1.log base_2.log ... -- new_1.log new_2.log ...

Each log holds one run of every shape. Per shape it prints the median over
the runs of each build's milliseconds a prefill and tokens/s, and the ratio
of the medians (base time over new time: above 1 is faster), as a markdown
table.
"""

import re
import statistics
import sys

LINE = re.compile(r"^BenchmarkPrefillShapes/(\S+?)(?:-\d+)?\s+\d+\s+.*?([\d.]+) ms\s+([\d.]+) tok/s")


def read(paths):
    """Returns {shape: [ms of each run]} from the logs at paths."""
    runs = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                m = LINE.match(line)
                if m:
                    runs.setdefault(m.group(1), []).append(float(m.group(2)))
    return runs


def main(argv):
    if "--" not in argv:
        sys.exit("usage: ab.py BASE_LOG... -- NEW_LOG...")
    cut = argv.index("--")
    base, new = read(argv[:cut]), read(argv[cut + 1 :])
    if not base or not new:
        sys.exit("ab.py: no BenchmarkPrefillShapes lines in one of the builds' logs")
    print("| shape | base ms | new ms | base tok/s | new tok/s | new/base speed | runs |")
    print("|---|---|---|---|---|---|---|")
    for shape in base:
        if shape not in new:
            print(f"| {shape} | missing in the new build's logs |||||")
            continue
        b, n = statistics.median(base[shape]), statistics.median(new[shape])
        m = re.search(r"B(\d+)_T(\d+)", shape)
        tok = int(m.group(1)) * int(m.group(2))
        print(f"| {shape} | {b:.3f} | {n:.3f} | {tok / b * 1e3:,.0f} | {tok / n * 1e3:,.0f} | "
              f"{b / n:.3f}x | {len(base[shape])}/{len(new[shape])} |")


if __name__ == "__main__":
    main(sys.argv[1:])
