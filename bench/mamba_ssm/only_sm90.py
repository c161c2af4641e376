"""Rewrite a mamba_ssm or causal-conv1d setup.py so that it builds for sm_90
only: every `cc_flag.append("-gencode")` followed by an
`cc_flag.append("arch=compute_XX,code=sm_XX")` for another architecture
becomes `pass`. Fails if no sm_90 pair is left.

    python3 only_sm90.py path/to/setup.py
"""

import re
import sys


def main(path):
    """Rewrite the setup.py at path to build for sm_90 only."""
    lines = open(path).read().split("\n")
    kept, dropped = 0, 0
    for i in range(len(lines) - 1):
        if lines[i].strip() != 'cc_flag.append("-gencode")':
            continue
        m = re.search(r'arch=compute_(\d+)', lines[i + 1])
        if not m:
            continue
        if m.group(1) == "90":
            kept += 1
            continue
        for j in (i, i + 1):
            indent = lines[j][: len(lines[j]) - len(lines[j].lstrip())]
            lines[j] = indent + "pass"
        dropped += 1
    if kept != 1:
        sys.exit(f"{path}: found {kept} sm_90 -gencode pairs, want 1")
    open(path, "w").write("\n".join(lines))
    print(f"{path}: kept sm_90, dropped {dropped} other architectures")


if __name__ == "__main__":
    main(sys.argv[1])
