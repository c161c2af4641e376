"""The CUDA libraries the CUDA engine opens by name, found in NVIDIA's pip wheels.

The engine (mambago/cuda in Go) dlopens libnvrtc, libcublasLt and libcublas by
name, version 13 then 12, so it finds them where the system's loader does: a
CUDA toolkit in ldconfig's cache, or LD_LIBRARY_PATH. A machine whose CUDA
libraries came with PyTorch has them only in NVIDIA's pip wheels
(site-packages/nvidia/cu13/lib for CUDA 13, nvidia/<component>/lib for CUDA
12), which the loader does not search. preload loads them from there, once a
process, so that the engine's dlopen by name finds them already loaded (the
loader matches a library's soname).
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os

# Each library the engine opens, by the names it tries in order, with the
# libraries of the same wheel folder it needs loaded before it.
LIBRARIES = (
    (("libnvrtc.so.13", "libnvrtc.so.12"), "libnvrtc-builtins.so.*"),  # NVRTC opens its builtins by name
    (("libcublasLt.so.13", "libcublasLt.so.12"), None),
    (("libcublas.so.13", "libcublas.so.12"), None),  # needs cublasLt, loaded above
)

_done: list[str] | None = None


def wheel_dirs() -> list[str]:
    """The lib folders of NVIDIA's pip wheels installed for this Python."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [d for root in spec.submodule_search_locations for d in sorted(glob.glob(os.path.join(root, "*", "lib")))]


def _loads(name: str) -> bool:
    """Whether the loader finds library name by itself (it stays loaded)."""
    try:
        ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        return True
    except OSError:
        return False


def preload(dirs: list[str] | None = None, loads=_loads) -> list[str]:
    """Loads, from NVIDIA's pip wheels (dirs, default wheel_dirs()), each
    library in LIBRARIES that the loader does not find by name, and returns
    the paths loaded. Does nothing on a machine without the CUDA driver
    (libcuda.so.1), and nothing after its first call in a process. A library
    found nowhere is left to the engine, whose error names it."""
    global _done
    if _done is not None:
        return _done
    _done = []
    if not loads("libcuda.so.1"):
        return _done
    dirs = wheel_dirs() if dirs is None else dirs
    for names, deps in LIBRARIES:
        if any(loads(n) for n in names):
            continue
        for name in names:
            found = [os.path.join(d, name) for d in dirs if os.path.isfile(os.path.join(d, name))]
            if not found:
                continue
            here = os.path.dirname(found[0])
            before = sorted(p for p in glob.glob(os.path.join(here, deps)) if ".alt." not in p) if deps else []
            try:
                for path in before + found[:1]:
                    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                    _done.append(path)
            except OSError:
                pass  # the engine's own attempt then fails, naming the library
            break
    return _done
