"""Shared helpers for the Python tests: the fixture cases and a tiny
safetensors reader (numpy only), so the tests need nothing beyond numpy."""

import json
import os
import struct

import numpy as np
import pytest

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
CASES = sorted(d for d in os.listdir(FIXTURES) if os.path.isdir(os.path.join(FIXTURES, d)))

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    """Every tensor of a safetensors file as a numpy array (BF16 upcast to float32)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        raw = body[a:b]
        if h["dtype"] == "BF16":
            arr = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=_DTYPES[h["dtype"]])
        out[name] = arr.reshape(h["shape"]).copy()
    return out


def norm_err(got, want):
    """‖got - want‖ / ‖want‖ (Frobenius); NaN anywhere in got gives inf."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    if not np.all(np.isfinite(got)):
        return np.inf
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def rel_err(got, want):
    """max|got - want| / max|want|; NaN anywhere in got gives inf."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    if not np.all(np.isfinite(got)):
        return np.inf
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def case_dir(name):
    return os.path.join(FIXTURES, name)


@pytest.fixture(scope="session")
def base_model():
    import mambago

    return mambago.Model.from_pretrained(case_dir("base"), device="cpu")


@pytest.fixture(scope="session")
def features_model():
    import mambago

    return mambago.Model.from_pretrained(case_dir("features"), device="cpu")


def early_stop_pair(model, rng):
    """Two prompts [2, 3] for model (a mambago.Model) whose greedy runs give
    row 0 a token to stop at, at its second new token, that row 1 never
    emits in 6: (ids, eos, the 6 free-running new tokens [2, 6]). Skips the
    test where 100 draws find none. The prompts never hold 0, the
    fixtures' pad id, which generate (as transformers') takes for padding
    where it is not an eos id."""
    for _ in range(100):
        ids = rng.integers(1, model.config.vocab_size, size=(2, 3))
        free = model.generate(ids, 6)  # new tokens, no stop
        eos = int(free[0, 1])
        if eos not in free[1] and eos != free[0, 0]:
            return ids, eos, free
    pytest.skip("no prompt pair found")


def unused_id(ids, vocab, *also):
    """The lowest id in [1, vocab) that is neither in ids nor among also:
    a pad id that generate (as transformers') will not take for padding
    in the prompts ids."""
    return next(p for p in range(1, vocab) if p not in also and p not in np.asarray(ids))


def hf_continue(hf, ids, out, seen):
    """transformers' forward call on ids (a torch tensor) continuing from the
    cache that its earlier call returned in out, seen positions in, under the
    name this transformers gives it: cache= where forward takes it (5.25), else
    cache_params= with cache_position=, which the older calls require."""
    import inspect

    import torch

    if "cache" in inspect.signature(hf.forward).parameters:
        return hf(ids, cache=out.cache, use_cache=True)
    return hf(ids, cache_params=out.cache_params, use_cache=True,
              cache_position=torch.arange(seen, seen + ids.shape[1]))
