"""mambago._cudalibs: the CUDA libraries of NVIDIA's pip wheels, loaded where
the system's loader does not find them, so that the CUDA engine's dlopen by
name does. Runs without a GPU: the driver's presence is faked, and the NVRTC
wheel (nvidia-cuda-nvrtc, which scripts/test.sh installs) is the library
found."""

import ctypes
import os

import pytest

from mambago import _cudalibs


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """Each test calls preload as a process's first call."""
    monkeypatch.setattr(_cudalibs, "_done", None)


def nvrtc_wheel_dir():
    for d in _cudalibs.wheel_dirs():
        if os.path.isfile(os.path.join(d, "libnvrtc.so.13")):
            return d
    return None


def test_no_driver_loads_nothing():
    asked = []
    assert _cudalibs.preload(dirs=["/nonexistent"], loads=lambda n: asked.append(n) or False) == []
    assert asked == ["libcuda.so.1"]  # nothing else is tried on a machine without the driver


def test_libraries_the_loader_finds_are_left_alone(tmp_path):
    (tmp_path / "libnvrtc.so.13").write_bytes(b"not a library")  # would fail to load if tried
    assert _cudalibs.preload(dirs=[str(tmp_path)], loads=lambda n: True) == []


def test_a_library_found_nowhere_is_left_to_the_engine(tmp_path):
    assert _cudalibs.preload(dirs=[str(tmp_path)], loads=lambda n: n == "libcuda.so.1") == []


def test_a_broken_wheel_library_is_left_to_the_engine(tmp_path):
    (tmp_path / "libcublasLt.so.13").write_bytes(b"not a library")
    assert _cudalibs.preload(dirs=[str(tmp_path)], loads=lambda n: n == "libcuda.so.1") == []


def test_preload_is_once_a_process():
    first = _cudalibs.preload(dirs=[], loads=lambda n: False)
    assert _cudalibs.preload(dirs=[], loads=lambda n: True) is first


@pytest.mark.skipif(nvrtc_wheel_dir() is None, reason="the nvidia-cuda-nvrtc wheel (CUDA 13) is not installed")
def test_nvrtc_from_its_wheel_then_by_name():
    d = nvrtc_wheel_dir()
    loaded = _cudalibs.preload(loads=lambda n: n == "libcuda.so.1")  # the driver faked, nothing else by name
    assert os.path.join(d, "libnvrtc.so.13") in loaded
    builtins = [p for p in loaded if "builtins" in os.path.basename(p)]
    assert builtins and loaded.index(builtins[0]) < loaded.index(os.path.join(d, "libnvrtc.so.13"))
    assert not any(".alt." in p for p in loaded)
    nvrtc = ctypes.CDLL("libnvrtc.so.13")  # by name, as the engine opens it: the loaded one
    major, minor = ctypes.c_int(), ctypes.c_int()
    assert nvrtc.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) == 0 and major.value == 13
