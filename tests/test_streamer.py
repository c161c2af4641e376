"""generate's streamer, as transformers' generate takes one: the prompt, then
each new column of tokens while the generation runs (not all at its end),
then end(); the same tokens generate returns; an error in the streamer stops
the generation; a generation in another thread streams to the main one
(transformers' TextIteratorStreamer pattern)."""

import queue
import threading
import time

import numpy as np
import pytest

import mambago
from conftest import case_dir, early_stop_pair, unused_id
from mambago.hf import MambaForCausalLM

DEVICES = [
    pytest.param("cpu", None, id="cpu"),
    pytest.param("cuda", "bfloat16", id="cuda-bf16", marks=pytest.mark.skipif(
        not mambago.cuda_is_available(), reason=f"no GPU: {mambago.cuda_unavailable_reason()}")),
]


class Recorder:
    """A streamer that keeps what it is given, and when."""

    def __init__(self, fail_after=None):
        self.puts, self.times, self.ended, self.fail_after = [], [], 0, fail_after

    def put(self, value):
        if self.fail_after is not None and len(self.puts) > self.fail_after:
            raise RuntimeError("the streamer gave up")
        self.puts.append(np.asarray(value).copy())
        self.times.append(time.perf_counter())

    def end(self):
        self.ended += 1


def long_enough(m, ids):
    """A token count whose generation takes about a second here."""
    t0 = time.perf_counter()
    m.generate(ids, 200)
    return int(min(10**6, max(1000, 200 / (time.perf_counter() - t0))))


@pytest.mark.parametrize("device,dtype", DEVICES)
def test_streamer_gets_each_token_as_it_comes(device, dtype):
    m = mambago.Model.from_pretrained(case_dir("base"), device=device, dtype=dtype)
    rng = np.random.default_rng()
    ids = rng.integers(1, m.config.vocab_size, size=(2, 6))
    n = long_enough(m, ids)
    rec = Recorder()
    t0 = time.perf_counter()
    out = m.generate(ids, n, temperature=0.8, top_k=20, seed=4, streamer=rec)
    took = time.perf_counter() - t0
    assert np.array_equal(out, m.generate(ids, n, temperature=0.8, top_k=20, seed=4))
    assert rec.ended == 1 and np.array_equal(rec.puts[0], ids)
    assert all(p.shape == (2,) for p in rec.puts[1:])
    assert np.array_equal(np.stack(rec.puts[1:], axis=1), out)
    # Streamed while it ran: the first token came in the first half of the call.
    assert rec.times[1] - t0 < took / 2, (rec.times[1] - t0, took)


def test_streamer_error_stops_the_generation():
    m = mambago.Model.from_pretrained(case_dir("base"), device="cpu")
    ids = np.array([[5, 17, 33]])
    n = long_enough(m, ids) * 20  # seconds of tokens, were it not stopped
    rec = Recorder(fail_after=3)
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match="the streamer gave up"):
        m.generate(ids, n, streamer=rec)
    assert time.perf_counter() - t0 < 5 and len(rec.puts) == 4 and rec.ended == 0
    assert np.array_equal(m.generate(ids, 8), mambago.Model.from_pretrained(case_dir("base"), device="cpu")
                          .generate(ids, 8))


def test_generation_in_a_thread_streams_to_the_main_one():
    """transformers' TextIteratorStreamer pattern: generate in a thread, read
    the tokens on the main thread as they come."""
    m = mambago.Model.from_pretrained(case_dir("base"), device="cpu")
    ids = np.array([[1, 2, 3, 4]])
    n = long_enough(m, ids)
    got = queue.Queue()

    class Iterated:
        def put(self, value):
            got.put(np.asarray(value).copy())

        def end(self):
            got.put(None)

    box = {}
    worker = threading.Thread(target=lambda: box.update(out=m.generate(ids, n, streamer=Iterated())))
    worker.start()
    first = got.get(timeout=60)  # the prompt
    second = got.get(timeout=60)  # the first new token, while the thread still generates
    still_running = worker.is_alive()
    rest = []
    while (v := got.get(timeout=60)) is not None:
        rest.append(v)
    worker.join()
    assert np.array_equal(first, ids) and still_running
    assert np.array_equal(np.stack([second] + rest, axis=1), box["out"])


def test_hf_streamer_gets_transformers_values():
    """Through mambago.hf: the same tokens as generate returns, a row's
    tokens after its eos given as pad_token_id, as transformers streams."""
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    ids, eos, _ = early_stop_pair(m.model, np.random.default_rng())
    pad = unused_id(ids, m.config.vocab_size, eos)  # not read as padding
    rec = Recorder()
    full = m.generate(ids, max_new_tokens=6, eos_token_id=eos, pad_token_id=pad, streamer=rec)
    assert np.array_equal(rec.puts[0], ids) and rec.ended == 1
    assert np.array_equal(np.stack(rec.puts[1:], axis=1), full[:, 3:])
    assert full[0, -1] == pad  # the stream's values are generate's own


def test_hf_streamer_gets_cpu_tensors_for_tensors():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    values = []

    class Kept:
        def put(self, value):
            values.append(value)

        def end(self):
            values.append(None)

    ids = torch.randint(1, m.config.vocab_size, (1, 5))
    out = m.generate(ids, max_new_tokens=4, streamer=Kept())
    assert values[-1] is None and all(isinstance(v, torch.Tensor) and v.device.type == "cpu" for v in values[:-1])
    assert torch.equal(values[0], ids) and torch.equal(torch.stack(values[1:-1], dim=1), out[:, 5:])
