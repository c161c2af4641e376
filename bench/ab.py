"""Compares two builds' BenchmarkPrefillShapes runs (scripts/device_run.sh ab).

    python3 bench/ab.py base_1.log base_2.log ... -- new_1.log new_2.log ...

Each log holds one run of every shape. Per shape it prints the median over
the runs of each build's milliseconds a prefill and tokens/s, and the ratio
of the medians (base time over new time: above 1 is faster), as a markdown
table. Where the logs hold a model at B=1 at both T=2048 and T=8192, a
second table gives issue 4's window: how much faster a token goes at
T=8192 than at T=2048, in each run (both lengths from the same log) and
from the medians. Where the logs name the candidate each process's
cuBLASLt tuning chose for each GEMM ("tuned <shape>: in_proj 2, ..."), a
third table lists, per shape and build, each choice with the runs that
made it: a choice that differs between runs of one build is a difference
between processes, not between builds.
"""

import re
import statistics
import sys

LINE = re.compile(r"^BenchmarkPrefillShapes/(\S+?)(?:-\d+)?\s+\d+\s+.*?([\d.]+) ms\s+([\d.]+) tok/s")
TUNED = re.compile(r"\btuned (\S+): (.+?)\s*$")


def read_log(path):
    """Returns {shape: ms} from one log."""
    out = {}
    with open(path) as f:
        for line in f:
            m = LINE.match(line)
            if m:
                out[m.group(1)] = float(m.group(2))
    return out


def read(paths):
    """Returns {shape: [ms of each run]} from the logs at paths."""
    runs = {}
    for path in paths:
        for shape, ms in read_log(path).items():
            runs.setdefault(shape, []).append(ms)
    return runs


def picks(paths):
    """Returns {shape: {choice: [numbers of the runs (1-based) that made it]}}
    from the "tuned" lines of the logs at paths."""
    out = {}
    for run, path in enumerate(paths, 1):
        with open(path) as f:
            for line in f:
                m = TUNED.search(line)
                if m:
                    out.setdefault(m.group(1), {}).setdefault(m.group(2), []).append(run)
    return out


def choices(seen):
    """One cell of the third table: each choice with its runs."""
    return "; ".join(f"{c} (run {', '.join(map(str, runs))})" for c, runs in seen.items()) or "–"


def window(ms2048, ms8192):
    """T=8192's tokens/s over T=2048's, less 1, as a signed percentage."""
    return f"{(4 * ms2048 / ms8192 - 1) * 100:+.1f}%"


def windows(paths):
    """Returns {model: (the window of each log, the window of the medians)}
    for every model the logs run at B=1 at both T=2048 and T=8192. The
    medians are over the logs that hold both lengths."""
    logs = [read_log(p) for p in paths]
    out = {}
    for model in dict.fromkeys(s.split("/")[0] for log in logs for s in log):
        short, long = f"{model}/B1_T2048", f"{model}/B1_T8192"
        pairs = [(log[short], log[long]) for log in logs if short in log and long in log]
        if pairs:
            out[model] = ([window(a, b) for a, b in pairs],
                          window(statistics.median(a for a, _ in pairs), statistics.median(b for _, b in pairs)))
    return out


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
    wb, wn = windows(argv[:cut]), windows(argv[cut + 1 :])
    if wb or wn:
        print()
        print("| window, T=8192 over T=2048 (B=1) | base, each run | base, medians | new, each run | new, medians |")
        print("|---|---|---|---|---|")
        for model in dict.fromkeys([*wb, *wn]):
            b_runs, b_med = wb.get(model, ([], "–"))
            n_runs, n_med = wn.get(model, ([], "–"))
            print(f"| {model} | {', '.join(b_runs) or '–'} | {b_med} | {', '.join(n_runs) or '–'} | {n_med} |")
    pb, pn = picks(argv[:cut]), picks(argv[cut + 1 :])
    if pb or pn:
        print()
        print("| shape | base: cuBLASLt's tuned candidates (runs) | new: cuBLASLt's tuned candidates (runs) |")
        print("|---|---|---|")
        for shape in dict.fromkeys([*pb, *pn]):
            print(f"| {shape} | {choices(pb.get(shape, {}))} | {choices(pn.get(shape, {}))} |")


if __name__ == "__main__":
    main(sys.argv[1:])
