"""mambago.set_num_threads / get_num_threads: the CPU engine's thread count,
as torch.set_num_threads sets torch's."""

import numpy as np
import pytest

import mambago
from conftest import rel_err


def test_set_num_threads(base_model):
    """One thread gives the outputs that the default count gives (within
    float32 rounding: the GEMMs split among fewer workers, in other tiles
    from 8 workers on, whose SGEMMs round some elements otherwise:
    3.4e-6 on the GPU machine's 16 cores; with GOMAXPROCS=16 on 2 cores,
    a median of 6.2e-6 and at worst 2.6e-5 over 20 prompts, 2026-12-05; a
    wrong split is off by about 1), the count reads back, and bad counts
    raise before anything changes."""
    m = base_model
    ids = np.random.default_rng().integers(0, m.config.vocab_size, size=(3, 300))
    was = mambago.get_num_threads()
    assert was >= 1
    want = m.prefill(ids, output="all")
    try:
        mambago.set_num_threads(1)
        assert mambago.get_num_threads() == 1
        got = m.prefill(ids, output="all")
        mambago.set_num_threads(np.int64(3))
        assert mambago.get_num_threads() == 3
    finally:
        mambago.set_num_threads(was)
    assert mambago.get_num_threads() == was
    assert rel_err(got, want) <= 1e-4
    for bad, exc in ((0, ValueError), (-2, ValueError), (1.5, TypeError), ("2", TypeError), (True, TypeError)):
        with pytest.raises(exc):
            mambago.set_num_threads(bad)
    assert mambago.get_num_threads() == was
