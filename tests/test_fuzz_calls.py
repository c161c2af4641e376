"""Random calls into the CPU engine's Python API, most of them wrong: each
must end in a Python exception or a result, the interpreter must survive,
a call that raises must leave the state it was given as it was, and the
model must still give the bits it gave before. A fresh seed each run,
named in any failure; `python tests/test_fuzz_calls.py SEED CASE` replays one."""

import os
import random
import subprocess
import sys

import numpy as np
import pytest

import mambago
from conftest import case_dir

CALLS = 60
# What a bad argument may raise. MemoryError: an output too large to allocate,
# named as such (generate's max_new_tokens of 2**40).
RAISED = (TypeError, ValueError, RuntimeError, IndexError, KeyError, OverflowError, MemoryError)


class _Calls:
    """Draws arguments, good and bad, and calls one public function."""

    def __init__(self, model, other, seed):
        self.m, self.c, self.other = model, model.config, other
        self.rng, self.np = random.Random(seed), np.random.default_rng(seed)

    def array(self):
        """Token ids, embeddings, features or something that is none of them."""
        c, r = self.c, self.rng
        width = r.choice([c.hidden_size, c.input_dim or 3, 1])
        return r.choice([
            lambda: self.np.integers(-3, c.vocab_size + 3, size=(r.choice([1, 2]), r.choice([1, 3, 7]))),
            lambda: self.np.integers(0, c.vocab_size, size=(r.choice([1, 2]), r.choice([1, 4]))),
            lambda: np.zeros((1, 0), np.int64),
            lambda: np.zeros((0, 3), np.int64),
            lambda: np.array(5),
            lambda: np.array([[1, 2]], dtype=object),
            lambda: np.array([[1.5, 2.0]]),
            lambda: np.array([[2**62, 1]], dtype=np.uint64),
            lambda: np.zeros((1, 2), dtype=[("a", "i4"), ("b", "f4")]),
            lambda: np.zeros((1, 2, 3, 4), np.float32),
            lambda: np.full((1, 3, width), np.nan, np.float32),
            lambda: self.np.standard_normal((2, 3, width)).astype(np.float32)[:, ::-1],
            lambda: self.np.standard_normal((r.choice([1, 2]), r.choice([1, 5]), width)).astype(
                r.choice([np.float32, np.float64, np.float16])),
            lambda: [[1, 2, 3]],
            lambda: "abc",
        ])()

    def state(self):
        """None, a live state of some batch, a closed one, another model's, or not a state."""
        r = self.rng
        k = r.randrange(5)
        if k == 0:
            return None
        if k == 1:
            s = self.m.new_state(r.choice([1, 2, 3]))
            # A state that holds something, so that a change to it shows.
            s.set_ssm_state(0, self.np.standard_normal(s.ssm_state(0).shape).astype(np.float32))
            return s
        if k == 2:
            s = self.m.new_state(1)
            s.close()
            return s
        if k == 3:
            return "state"
        return self.other.new_state(r.choice([1, 2]))

    def call(self):
        """One random call; returns the State it was given, if any, for the caller to check."""
        m, r = self.m, self.rng
        op = r.randrange(8)
        st = None
        if op == 0:
            kw = {r.choice(["input_ids", "inputs_embeds", "features"]): self.array(),
                  "output": r.choice(["last", "all", "sum", "mean", "bad", None])}
            if r.random() < 0.3:
                kw["attention_mask"] = self.array()
            if r.random() < 0.5:
                kw["state"] = st = self.state()
            return lambda: m.prefill(**kw), st
        if op == 1:
            st = self.state()
            return lambda: m.step(self.array(), st), st
        if op == 2:
            return lambda: m.logits(self.array()), None
        if op == 3:
            return lambda: m.generate(
                self.array(), r.choice([0, 1, 3, -1, 2**40]),
                temperature=r.choice([0.0, 1.0, -1.0, float("nan"), 1e-45]),
                top_k=r.choice([0, 5, -3, 2**40]), top_p=r.choice([1.0, 0.5, 0.0, 2.0, float("nan")]),
                seed=r.choice([None, 1, -1, 2**70])), None
        if op == 4:
            st = m.new_state(r.choice([1, 2]))
            layer = r.choice([0, self.c.num_hidden_layers, -1, 2**40])
            setter = r.choice([st.set_conv_state, st.set_ssm_state])
            return lambda: setter(layer, self.array()), st
        if op == 5:
            return lambda: m.beam_search(self.array(), r.choice([1, 2, 0, -1]), r.choice([1, 2, 0, -2, 2**40]),
                                         num_return_sequences=r.choice([1, 2, 3, 0])), None
        if op == 6:
            st = self.state()
            mask = self.array() if r.random() < 0.3 else None
            return lambda: m.prefill_layers(input_ids=self.array(), state=st, attention_mask=mask), st
        return lambda: m.new_state(r.choice([0, -1, 2**40, 2.0, "2"])), None


def _snapshot(st, layers):
    """A live state's arrays, every layer's conv then SSM state, or None for anything else."""
    if not isinstance(st, mambago.State):
        return None
    try:
        return [a for l in range(layers) for a in (st.conv_state(l), st.ssm_state(l))]
    except RAISED:  # a closed state
        return None


def main(seed, case):
    """The child: CALLS random calls on case's model; exits 1 naming the first finding."""
    m = mambago.Model.from_pretrained(case_dir(case), device="cpu")
    other = mambago.Model.from_pretrained(case_dir("dstate8" if case != "dstate8" else "base"), device="cpu")
    c = m.config
    probe = np.random.default_rng(seed).integers(0, c.vocab_size, size=(2, 9))
    want = m.prefill(probe, output="all")
    calls = _Calls(m, other, seed)
    for i in range(CALLS):
        fn, st = calls.call()
        before = _snapshot(st, c.num_hidden_layers)
        try:
            fn()
        except RAISED as e:
            after = _snapshot(st, c.num_hidden_layers)
            if before is not None and after is not None and not all(
                    np.array_equal(a, b, equal_nan=True) for a, b in zip(before, after, strict=True)):
                sys.exit(f"call {i}: {type(e).__name__} ({e}) changed the state it was given")
        except BaseException as e:  # noqa: BLE001 -- any other kind is the finding
            sys.exit(f"call {i}: {type(e).__name__}: {e}")
    if not np.array_equal(m.prefill(probe, output="all"), want):
        sys.exit("the model's outputs changed after the bad calls")


@pytest.mark.parametrize("case", ["base", "conv2", "embeds", "features", "dstate8", "bf16"])
def test_random_calls_raise_cleanly(case):
    seed = random.SystemRandom().randrange(2**31)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), str(seed), case],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"seed {seed} on {case} (replay: python tests/test_fuzz_calls.py {seed} {case}): " \
                              f"rc {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-4000:]}"


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
