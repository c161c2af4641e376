"""Strip the backward kernels out of a mamba_ssm or causal-conv1d source tree
before it is built for the benchmark, which runs inference only.

Each backward .cu file keeps its explicit instantiations (`template void
..._bwd_cuda<...>(...);`), so the extension still links, but the template they
instantiate becomes a stub that throws instead of launching a kernel. With
sm_90 alone, the full build took about 8 minutes on the GPU machine and left
88 MB of extensions, too much to carry between calls; the forward kernels are
a fraction of both.

    python3 forward_only.py path/to/source-tree
"""

import glob
import os
import sys

# Per package: the backward sources, the headers a stub needs, and the
# templates the instantiations name.
PACKAGES = {
    "selective_scan": {
        "sources": "csrc/selective_scan/selective_scan_bwd_*.cu",
        "headers": ["selective_scan.h", "selective_scan_common.h"],
        "params": "SSMParamsBwd",
        "templates": ["selective_scan_bwd_cuda"],
    },
    "causal_conv1d": {
        "sources": "csrc/causal_conv1d_bwd.cu",
        "headers": ["causal_conv1d.h"],
        "params": "ConvParamsBwd",
        "templates": ["causal_conv1d_bwd_cuda", "causal_conv1d_channellast_bwd_cuda"],
    },
}


def stub(pkg, instantiations):
    """A source file that keeps pkg's headers and replaces its backward kernels' instantiations with stubs that raise."""
    lines = ["// Backward kernels stripped by bench/mamba_ssm/forward_only.py (inference benchmark).",
             "#include <stdexcept>", "#include <c10/util/BFloat16.h>", "#include <c10/util/Half.h>",
             "#include <c10/cuda/CUDAException.h>"]
    lines += [f'#include "{h}"' for h in pkg["headers"]]
    for name in pkg["templates"]:
        lines += ["template<typename input_t, typename weight_t>",
                  f"void {name}({pkg['params']} &params, cudaStream_t stream) {{",
                  f'    throw std::runtime_error("{name}: built forward-only for the benchmark");', "}"]
    return "\n".join(lines + instantiations) + "\n"


def main(root):
    """Stub the backward kernels of every package source under root."""
    done = 0
    for pkg in PACKAGES.values():
        for path in sorted(glob.glob(os.path.join(root, pkg["sources"]))):
            inst = [ln for ln in open(path).read().splitlines() if ln.startswith("template void ")]
            if not inst:
                sys.exit(f"{path}: no explicit instantiations found")
            open(path, "w").write(stub(pkg, inst))
            print(f"{path}: backward stubbed ({len(inst)} instantiations)")
            done += 1
    if done == 0:
        sys.exit(f"{root}: no backward sources found")


if __name__ == "__main__":
    main(sys.argv[1])
