"""Summarise `device_run.sh inplace`: ncu's raw CSV of a prefill graph's nodes.

Each kernel name gets one row: how many launches ncu profiled, and the median
over them of its time (µs), DRAM bytes read and written (MB), L2 bytes (MB),
SM throughput (% of peak) and warps active (% of peak), in the order the
kernels first ran. Usage: python3 bench/inplace.py INPLACE_CSV
"""

import csv
import statistics
import sys

COLUMNS = [
    ("gpu__time_duration.sum", "µs", 1e-3),
    ("dram__bytes_read.sum", "DRAM read MB", 1e-6),
    ("dram__bytes_write.sum", "DRAM write MB", 1e-6),
    ("lts__t_bytes.sum", "L2 MB", 1e-6),
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "SM %", 1.0),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "warps active %", 1.0),
]


def number(text):
    """Parses one of ncu's CSV cells ("1,234.5"), or None."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def main():
    """Prints the markdown table for the CSV at sys.argv[1]."""
    with open(sys.argv[1], newline="", errors="replace") as f:
        lines = [line for line in f if line.startswith('"')]
    rows = list(csv.reader(lines))
    if len(rows) < 3:
        print("no profiled kernels in", sys.argv[1])
        return
    header, units, data = rows[0], rows[1], rows[2:]
    name_col = header.index("Kernel Name")
    index = {h: i for i, h in enumerate(header)}
    kernels = {}
    for row in data:
        values = kernels.setdefault(row[name_col][:60], [[] for _ in COLUMNS])
        for k, (metric, _, _) in enumerate(COLUMNS):
            if metric in index:
                v = number(row[index[metric]])
                if v is not None:
                    # ncu reports time in the unit its units row names; scale ns to µs below.
                    unit = units[index[metric]]
                    scale = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6}.get(unit, 1.0) if k == 0 else 1.0
                    if k in (1, 2, 3):
                        scale = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}.get(unit, 1.0)
                    values[k].append(v * scale)
    print("| kernel | launches | " + " | ".join(label for _, label, _ in COLUMNS) + " |")
    print("|---|---|" + "---|" * len(COLUMNS))
    for name, values in kernels.items():
        cells = [f"{statistics.median(v) * COLUMNS[k][2]:.2f}" if v else "" for k, v in enumerate(values)]
        print(f"| {name} | {len(values[0])} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
