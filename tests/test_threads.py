"""mambago.set_num_threads / get_num_threads: the CPU engine's thread count,
as torch.set_num_threads sets torch's; and one model used from several
Python threads at once."""

import os

import numpy as np
import pytest

import mambago
from conftest import case_dir, rel_err


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
    huge = max(1024, os.cpu_count() or 1) + 1  # Go's runtime would end the process past 10,000 threads
    for bad, exc in ((0, ValueError), (-2, ValueError), (huge, ValueError), (10**9, ValueError), (2**62, ValueError), (2**64, ValueError),
                     (1.5, TypeError), ("2", TypeError), (True, TypeError)):
        with pytest.raises(exc):
            mambago.set_num_threads(bad)
    assert mambago.get_num_threads() == was


def _devices():
    """The engines to run on: the CPU, and the GPU where one is usable."""
    gpu = pytest.param("cuda", marks=pytest.mark.skipif(
        not mambago.cuda_is_available(), reason=f"no GPU: {mambago.cuda_unavailable_reason()}"))
    return ["cpu", gpu]


@pytest.mark.parametrize("device", _devices())
def test_threads_share_a_model(device):
    """Six Python threads use one model at once, each with its own states:
    each thread's prefills (every position, then continued from a state),
    steps and greedy generations give the bits that the same calls give one
    after another on one thread."""
    import threading

    m = mambago.Model.from_pretrained(case_dir("base"), device=device)
    rng = np.random.default_rng()
    V, threads = m.config.vocab_size, 6
    prompts = [rng.integers(0, V, size=(2, int(rng.integers(50, 400)))) for _ in range(threads)]

    def work(ids):
        st = m.new_state(2)
        out = [m.prefill(ids, output="all", state=st)]
        for _ in range(3):
            out.append(m.step(ids[:, -1], st))
        out.append(m.generate(ids, 12))
        out.append(m.prefill(ids[:, :4], state=st))
        return out

    want = [work(ids) for ids in prompts]
    got, errors = [None] * threads, []

    def run(i):
        try:
            for _ in range(4):  # several rounds, so that the calls overlap
                got[i] = work(prompts[i])
        except Exception as e:  # reported below, not lost in the thread
            errors.append(e)

    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors, errors
    for i in range(threads):
        for j, (g, w) in enumerate(zip(got[i], want[i], strict=True)):
            assert np.array_equal(g, w), (i, j)
