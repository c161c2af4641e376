"""Every public function, fed bad input of every kind: the right exception,
a message that names the argument, and an interpreter that survives."""

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mambago
from conftest import case_dir, read_safetensors


@pytest.fixture
def m(base_model):
    return base_model


@pytest.fixture
def fm(features_model):
    return features_model


def ids(m, B=2, T=5):
    return np.random.default_rng().integers(0, m.config.vocab_size, size=(B, T))


def test_from_pretrained(tmp_path):
    with pytest.raises(TypeError, match="from_pretrained"):
        mambago.Model(case_dir("base"))  # a path where a handle goes
    with pytest.raises(TypeError, match="from_pretrained"):
        mambago.Model(tmp_path)
    with pytest.raises(ValueError, match="handle"):
        mambago.Model(987654321)  # no such model
    with pytest.raises(TypeError, match="path"):
        mambago.Model.from_pretrained(123)
    with pytest.raises(ValueError, match="path"):
        mambago.Model.from_pretrained(str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="config.json"):
        mambago.Model.from_pretrained(str(tmp_path))
    with pytest.raises(ValueError, match="device"):
        mambago.Model.from_pretrained(case_dir("base"), device="tpu")
    if not mambago.cuda_is_available():
        with pytest.raises(ValueError, match="no usable GPU"):
            mambago.Model.from_pretrained(case_dir("base"), device="cuda")
    for device in ("cuda:x", "cuda:-1", "cuda:", "cpu:0"):
        with pytest.raises(ValueError, match="cuda:N"):
            mambago.Model.from_pretrained(case_dir("base"), device=device)
    with pytest.raises(ValueError, match="cuda:99"):  # a GPU index reads as "cuda:N", as torch reads it
        mambago.Model.from_pretrained(case_dir("base"), device=99)
    with pytest.raises(TypeError, match="device"):
        mambago.Model.from_pretrained(case_dir("base"), device=1.5)
    with pytest.raises(ValueError, match="dtype"):
        mambago.Model.from_pretrained(case_dir("base"), device="cpu", dtype="int8")
    with pytest.raises(ValueError, match="dlopen"):
        mambago.Model.from_pretrained(case_dir("base"), device="cpu", blas="/nonexistent/libblas.so")
    with pytest.raises(TypeError, match="blas"):
        mambago.Model.from_pretrained(case_dir("base"), device="cpu", blas=1)


def _write_safetensors(path, tensors):
    header, body = {}, b""
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [len(body), len(body) + len(raw)]}
        body += raw
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + body)


def test_bad_checkpoint_names_file_and_tensors(tmp_path):
    shutil.copy(os.path.join(case_dir("base"), "config.json"), tmp_path)
    tensors = read_safetensors(os.path.join(case_dir("base"), "model.safetensors"))
    del tensors["backbone.layers.0.mixer.A_log"]
    tensors["backbone.norm_f.weight"] = tensors["backbone.norm_f.weight"][:10]
    tensors["backbone.layers.1.mixer.surprise"] = np.ones(3, np.float32)
    _write_safetensors(tmp_path / "model.safetensors", tensors)
    with pytest.raises(ValueError) as err:
        mambago.Model.from_pretrained(str(tmp_path))
    msg = str(err.value)
    assert "model.safetensors" in msg
    assert "missing backbone.layers.0.mixer.A_log" in msg
    assert "backbone.norm_f.weight has shape [10], want [64]" in msg
    assert "unexpected tensor backbone.layers.1.mixer.surprise" in msg
    (tmp_path / "model.safetensors").write_bytes(b"\x0a\x00\x00\x00\x00\x00\x00\x00{not json}")
    with pytest.raises(ValueError, match="model.safetensors"):
        mambago.Model.from_pretrained(str(tmp_path))


def test_new_state(m):
    for bad, exc in (("2", TypeError), (2.5, TypeError), (True, TypeError), (None, TypeError),
                     (0, ValueError), (-3, ValueError)):
        with pytest.raises(exc, match="batch_size"):
            m.new_state(bad)


def test_prefill_inputs(m, fm):
    x = ids(m)
    with pytest.raises(ValueError, match="exactly one"):
        m.prefill()
    with pytest.raises(ValueError, match="exactly one"):
        m.prefill(x, inputs_embeds=np.zeros((2, 5, 64), np.float32))
    with pytest.raises(TypeError, match="input_ids"):
        m.prefill(x.astype(np.float32))
    with pytest.raises(TypeError, match="input_ids"):
        m.prefill("hello")
    with pytest.raises(TypeError, match="input_ids"):
        m.prefill(x.astype(bool))
    with pytest.raises(ValueError, match="input_ids"):
        m.prefill(x[None])  # rank 3
    with pytest.raises(ValueError, match="input_ids"):
        m.prefill(np.zeros((2, 0), np.int64))  # empty
    with pytest.raises(ValueError, match=r"empty dimension: shape \(0,\)"):
        m.prefill(np.zeros(0, np.int64))  # empty and unbatched: the shape given is the one named
    with pytest.raises(ValueError, match=r"input_ids.*shape \(\)"):
        m.prefill(np.array(5))  # a scalar is no prompt
    # ids in any layout are copied (they are small): the same as their contiguous copy
    for view in (np.asfortranarray(ids(m, 3, 4)), ids(m, 2, 8)[:, ::2], ids(m, 2, 8).astype(np.int32)[:, 1::3]):
        np.testing.assert_array_equal(m.prefill(view, output="all"), m.prefill(view.copy(order="C"), output="all"))
    too_big = x.copy()
    too_big[1, 3] = m.config.vocab_size
    with pytest.raises(ValueError, match="input_ids.*vocabulary"):
        m.prefill(too_big)
    with pytest.raises(ValueError, match="input_ids.*vocabulary"):
        m.prefill(-x - 1)
    with pytest.raises(ValueError, match="input_ids.*vocabulary"):
        m.prefill([[1, 2, 10**6]])
    with pytest.raises(ValueError, match="input_ids.*18446744073709551615"):
        m.prefill(np.array([[1, 2**64 - 1]], np.uint64))  # no wrap to -1 in the message
    assert m.prefill(np.array([[1, 2]], np.uint64)).shape == (1, 64)
    emb = np.random.default_rng().standard_normal((2, 5, 64)).astype(np.float32)
    with pytest.raises(TypeError, match="inputs_embeds.*float32"):
        m.prefill(inputs_embeds=emb.astype(np.float64))
    with pytest.raises(ValueError, match="inputs_embeds"):
        m.prefill(inputs_embeds=emb[:, :, :63].copy())
    with pytest.raises(ValueError, match="inputs_embeds"):
        m.prefill(inputs_embeds=emb[0, 0])  # rank 1
    for poison in (np.nan, np.inf, -np.inf):
        bad = emb.copy()
        bad[1, 2, 3] = poison
        with pytest.raises(ValueError, match="inputs_embeds.*non-finite"):
            m.prefill(inputs_embeds=bad)
    with pytest.raises(ValueError, match="features.*input_proj"):
        m.prefill(features=np.zeros((1, 3, 5), np.float32))
    F = fm.config.input_dim
    with pytest.raises(ValueError, match="features"):
        fm.prefill(features=np.zeros((1, 3, F + 1), np.float32))
    nanf = np.ones((1, 3, F), np.float32)
    nanf[0, 1, 0] = np.nan
    with pytest.raises(ValueError, match="features.*non-finite"):
        fm.prefill(features=nanf)
    with pytest.raises(ValueError, match="output"):
        m.prefill(x, output="max")
    with pytest.raises(ValueError, match="output"):
        m.prefill(x, output=None)


def test_prefill_state(m, fm):
    x = ids(m)
    with pytest.raises(ValueError, match="state holds 3 sequences.*batch size 2"):
        m.prefill(x, state=m.new_state(3))
    with pytest.raises(TypeError, match="state"):
        m.prefill(x, state="state")
    with pytest.raises(ValueError, match="another model"):
        m.prefill(x, state=fm.new_state(2))
    st = m.new_state(2)
    st.close()
    with pytest.raises(ValueError, match="state is closed"):
        m.prefill(x, state=st)


def test_failed_call_leaves_state_untouched(m):
    st = m.new_state(2)
    m.prefill(ids(m), state=st)
    before = st.ssm_state(1)
    emb = np.ones((2, 3, m.config.hidden_size), np.float32)
    emb[1, 2, 0] = np.nan
    with pytest.raises(ValueError):
        m.prefill(inputs_embeds=emb, state=st)
    assert np.array_equal(st.ssm_state(1), before)


def test_step(m):
    st = m.new_state(2)
    m.prefill(ids(m), state=st)
    with pytest.raises(ValueError, match="token_ids"):
        m.step(np.array([[1, 2], [3, 4]]), st)
    with pytest.raises(ValueError, match="token_ids"):
        m.step(np.array([], np.int64), st)
    with pytest.raises(ValueError, match="batch size 3"):
        m.step([1, 2, 3], st)
    with pytest.raises(TypeError, match="token_ids"):
        m.step(np.array([1.0, 2.0]), st)
    with pytest.raises(ValueError, match="token_ids.*vocabulary"):
        m.step([1, m.config.vocab_size + 7], st)
    with pytest.raises(TypeError, match="state"):
        m.step([1, 2], None)
    col = np.array([[1, 2], [3, 4]])[:, 0]  # a strided view: copied
    views, copies = m.new_state(batch_size=2), m.new_state(batch_size=2)
    np.testing.assert_array_equal(m.step(col, views), m.step(col.copy(), copies))


def test_logits(m):
    d = m.config.hidden_size
    h = np.random.default_rng().standard_normal((3, d)).astype(np.float32)
    with pytest.raises(ValueError, match="hidden"):
        m.logits(h[:, :-1].copy())
    with pytest.raises(TypeError, match="hidden.*float32"):
        m.logits(h.astype(np.float64))
    with pytest.raises(TypeError, match="hidden"):
        m.logits(np.ones((3, d), np.int64))
    with pytest.raises(ValueError, match="hidden.*contiguous"):
        m.logits(np.asfortranarray(h))
    with pytest.raises(ValueError, match="hidden"):
        m.logits(np.float32(1.0).reshape(()))
    h[2, 5] = np.nan
    with pytest.raises(ValueError, match="hidden.*non-finite"):
        m.logits(h)
    for empty in ((0, d), (2, 0, d)):
        out = m.logits(np.zeros(empty, np.float32))
        assert out.shape == empty[:-1] + (m.config.vocab_size,) and out.dtype == np.float32
    with pytest.raises(ValueError, match="hidden"):
        m.logits(np.zeros((2, 0), np.float32))


def test_generate(m):
    x = ids(m)
    for kw, exc, what in (
        ({"max_new_tokens": -1}, ValueError, "max_new_tokens"),
        ({"max_new_tokens": "5"}, TypeError, "max_new_tokens"),
        ({"max_new_tokens": 4, "temperature": -1.0}, ValueError, "temperature"),
        ({"max_new_tokens": 4, "temperature": float("nan")}, ValueError, "temperature"),
        ({"max_new_tokens": 4, "temperature": float("inf")}, ValueError, "temperature"),
        ({"max_new_tokens": 4, "temperature": 1e-39}, ValueError, "temperature"),
        ({"max_new_tokens": 4, "temperature": "hot"}, TypeError, "temperature"),
        ({"max_new_tokens": 4, "top_p": 0.0}, ValueError, "top_p"),
        ({"max_new_tokens": 4, "top_p": 1.5}, ValueError, "top_p"),
        ({"max_new_tokens": 4, "top_k": -1}, ValueError, "top_k"),
        ({"max_new_tokens": 4, "top_k": 2.5}, TypeError, "top_k"),
        ({"max_new_tokens": 4, "seed": "x"}, TypeError, "seed"),
        ({"max_new_tokens": 4, "eos_token_id": 10**9}, ValueError, "eos_token_id"),
        ({"max_new_tokens": 4, "eos_token_id": 1.5}, TypeError, "eos_token_id"),
    ):
        with pytest.raises(exc, match=what):
            m.generate(x, **kw)
    texts = ["a", "b"] * 50  # a tokenizer stand-in: tokenizers' Tokenizer's methods that read the vocabulary
    for kw, exc, what in (
        ({"stop_strings": "ab"}, ValueError, "need the model's tokenizer"),
        ({"stop_strings": ["ab", ""], "tokenizer": _Letters(texts)}, ValueError, "empty string"),
        ({"stop_strings": [], "tokenizer": _Letters(texts)}, TypeError, "stop_strings"),
        ({"stop_strings": b"ab", "tokenizer": _Letters(texts)}, TypeError, "stop_strings"),
        ({"stop_strings": ["ab", 3], "tokenizer": _Letters(texts)}, TypeError, "stop_strings"),
        ({"stop_strings": "ab", "tokenizer": object()}, TypeError, "tokenizer"),
    ):
        with pytest.raises(exc, match=what):
            m.generate(x, 3, **kw)
        with pytest.raises(exc, match=what):
            m.beam_search(x, 3, 2, **kw)
    # What the stand-in reads: a row ends at its first even id, whose text is "a" (eos 0 among them), then eos.
    free = m.generate(x, 6)
    got = m.generate(x, 6, stop_strings="a", tokenizer=_Letters(texts), eos_token_id=0)
    for row, want in zip(got, free, strict=True):
        end = next((i for i, t in enumerate(want) if t % 2 == 0), len(want) - 1)
        assert list(row[:end + 1]) == list(want[:end + 1]) and set(row[end + 1:]) <= {0}
    with pytest.raises(TypeError, match="input_ids"):
        m.generate(x.astype(np.float64), 3)
    with pytest.raises(ValueError, match="input_ids.*vocabulary"):
        m.generate(x + m.config.vocab_size, 3)
    assert m.generate(x, 0).shape == (2, 0)
    # An output numpy cannot hold (2 rows of 2**62 int64) names the argument, from generate and beam_search alike.
    with pytest.raises(ValueError, match="max_new_tokens = 4611686018427387904 is too large"):
        m.generate(x, 2**62)
    with pytest.raises(ValueError, match="max_new_tokens = 4611686018427387904 is too large"):
        m.beam_search(x, 2**62, 2)
    # An int past int64, which the engine's integers are, is a ValueError naming it (was OverflowError).
    for call, what in ((lambda: m.generate(x, 2, temperature=1.0, top_k=10**20), "top_k"),
                       (lambda: m.generate(x, 2, min_new_tokens=10**20), "min_new_tokens"),
                       (lambda: m.generate(x, 2, no_repeat_ngram_size=10**20), "no_repeat_ngram_size"),
                       (lambda: m.beam_search(x, 2, 10**20), "num_beams"),
                       (lambda: m.beam_search(x, 2, 2, pad_token_id=-10**20), "pad_token_id"),
                       (lambda: m.beam_search(x, 2, 2, do_sample=True, top_k=10**20), "top_k"),
                       (lambda: m.new_state(10**20), "batch_size"),
                       (lambda: m.new_state(1).ssm_state(-10**20), "layer"),
                       (lambda: m.reserve(1, 10**20), "seq_len")):
        with pytest.raises(ValueError, match=f"{what} = -?100000000000000000000 is outside the engine's int64 range"):
            call()
    # One of 2**62 bytes, past any machine's address space, is numpy's MemoryError, named the same way.
    with pytest.raises(MemoryError, match="max_new_tokens = 288230376151711744 is too large"):
        m.generate(x, 2**58)
    with pytest.raises(MemoryError, match="max_new_tokens = 288230376151711744 is too large"):
        m.beam_search(x, 2**58, 2)


class _Letters:
    """A tokenizer of one letter a token (texts[i] for id i), with the
    methods of tokenizers' Tokenizer that reading its vocabulary takes."""

    decoder = None

    def __init__(self, texts):
        self.texts = texts

    def get_vocab(self, with_added_tokens=True):
        return {f"{t}{i}": i for i, t in enumerate(self.texts)}

    def get_vocab_size(self, with_added_tokens=True):
        return len(self.texts)

    def encode(self, text, add_special_tokens=False):
        class Encoding:
            ids, tokens = [0] * len(text), ["a0"] * len(text)
        return Encoding()

    def decode(self, ids, skip_special_tokens=False):
        return "abcdef"[:len(ids) - 1] + self.texts[ids[-1]]


def test_state_methods(m):
    st = m.new_state(2)
    c = m.config
    for bad, exc in ((c.num_hidden_layers, ValueError), (-1, ValueError), ("0", TypeError), (1.0, TypeError)):
        with pytest.raises(exc, match="layer"):
            st.conv_state(bad)
        with pytest.raises(exc, match="layer"):
            st.ssm_state(bad)
    good = np.ones((2, c.intermediate_size, c.state_size), np.float32)
    with pytest.raises(ValueError, match="value.*shape"):
        st.set_ssm_state(0, good[:1].copy())
    with pytest.raises(TypeError, match="value.*float32"):
        st.set_ssm_state(0, good.astype(np.float64))
    bad = good.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        st.set_ssm_state(0, bad)
    with pytest.raises(ValueError, match="value.*shape"):
        st.set_conv_state(0, good)
    assert not st.ssm_state(0).any()  # nothing written by the failed calls


def test_with_blocks_close():
    """Model, State and Graph are context managers that close at the block's end."""
    with mambago.Model.from_pretrained(case_dir("base"), device="cpu") as mm:
        with mm.new_state(1) as st:
            mm.prefill([[1, 2]], state=st)
        with pytest.raises(ValueError, match="state is closed"):
            st.ssm_state(0)
        assert mm.prefill([[1, 2]]).shape == (1, mm.config.hidden_size)
    with pytest.raises(ValueError, match="model is closed"):
        mm.prefill([[1, 2]])


def test_closed_model():
    mm = mambago.Model.from_pretrained(case_dir("base"), device="cpu")
    st = mm.new_state(1)
    mm.close()
    with pytest.raises(ValueError, match="model is closed"):
        mm.prefill([[1, 2]])
    with pytest.raises(ValueError, match="closed"):
        mm.step([1], st)


def test_no_copies_or_pickles_of_engine_objects(m):
    """A model or graph owns engine memory: a copy sharing its handle would
    free it with the copy, and a pickled handle means nothing elsewhere. Each
    refuses, saying what to do; a state pickles neither, but copies."""
    import copy
    import pickle

    st = m.new_state(1)
    for obj, instead in ((m, "from_pretrained"), (st, r"state\.copy\(\)")):
        with pytest.raises(TypeError, match=f"cannot be copied or pickled.*{instead}"):
            pickle.dumps(obj)
    for copier in (copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match="mambago.Model .*cannot be copied"):
            copier(m)
    assert m.prefill([[1, 2]]).shape == (1, m.config.hidden_size)  # still open
    closed = m.new_state(1)
    closed.close()
    with pytest.raises(ValueError, match="state is closed"):
        copy.copy(closed)


def test_interpreter_survives_everything():
    """Run every kind of bad call in a fresh interpreter; it must exit normally."""
    script = textwrap.dedent(f"""
        import numpy as np, mambago
        m = mambago.Model.from_pretrained({case_dir('base')!r}, device="cpu")
        calls = [
            lambda: m.prefill(np.array([[1, 2, 999]])),
            lambda: m.prefill(inputs_embeds=np.full((1, 2, 64), np.nan, np.float32)),
            lambda: m.prefill(inputs_embeds=np.asfortranarray(np.ones((3, 3, 64), np.float32))),
            lambda: m.step([1, 2], m.new_state(1)),
            lambda: m.logits(np.ones((2, 3), np.float32)),
            lambda: m.generate([[1, 2]], 3, top_p=-1.0),
            lambda: m.new_state(0).reset(),
            lambda: m.new_state(1).ssm_state(99),
            lambda: mambago.Model.from_pretrained("/nonexistent"),
        ]
        failures = 0
        for c in calls:
            try:
                c()
            except (ValueError, TypeError):
                failures += 1
        assert failures == len(calls), failures
        print("alive", m.generate([[1, 2, 3]], 4).shape)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "alive (1, 4)" in r.stdout


def test_raw_bindings_survive_bad_handles_and_pointers():
    """The flat Go functions themselves: closed handles and null buffers are errors, not crashes."""
    from mambago._native import bindings as b
    from mambago._native import call

    with pytest.raises(ValueError, match="handle"):
        call(b.ModelInfo, 987654)
    with pytest.raises(ValueError, match="handle"):
        call(b.NewState, -1, 2)
    m = call(b.LoadModel, case_dir("base"), "cpu", "", "")
    st = call(b.NewState, m, 1)
    with pytest.raises(ValueError, match="buffer"):
        call(b.Prefill, m, st, "ids", 0, 4, 1, 4, "last", 0, 64, 0, 0, False, 0)
    with pytest.raises(ValueError, match="input kind"):
        buf = np.zeros(4, np.int64)
        out = np.zeros(64, np.float32)
        call(b.Prefill, m, st, "tokens", buf.ctypes.data, 4, 1, 4, "last", out.ctypes.data, 64, 0, 0, False, 0)
    with pytest.raises(ValueError, match="output buffer"):
        call(b.Prefill, m, st, "ids", buf.ctypes.data, 4, 1, 4, "last", out.ctypes.data, 63, 0, 0, False, 0)
    with pytest.raises(ValueError, match="spans"):
        call(b.Prefill, m, st, "ids", buf.ctypes.data, 4, 1, 4, "last", out.ctypes.data, 64, 0, 1, False, 0)
    with pytest.raises(ValueError, match="2 spans for a batch of 1"):
        call(b.Prefill, m, st, "ids", buf.ctypes.data, 4, 1, 4, "last", out.ctypes.data, 64, buf.ctypes.data, 2, False, 0)
    for first, count in ((0, 0), (-1, 2), (3, 2), (2, 3)):
        spans = np.array([first, count], np.int64)
        for fresh in (False, True):
            with pytest.raises(ValueError, match="row 0: tokens at"):
                call(b.Prefill, m, st, "ids", buf.ctypes.data, 4, 1, 4, "last", out.ctypes.data, 64, spans.ctypes.data, 1,
                     fresh, 0)
    every, layers = np.zeros(256, np.float32), np.zeros(512, np.float32)  # [1, 4, 64] and [2, 1, 4, 64]
    for args, match in (((every.ctypes.data, 256, 0, 512), "buffer"),
                        ((every.ctypes.data, 256, layers.ctypes.data, 511), "layers buffer has 511 values"),
                        ((every.ctypes.data, 255, layers.ctypes.data, 512), "output buffer")):
        with pytest.raises(ValueError, match=match):
            call(b.PrefillLayers, m, st, "ids", buf.ctypes.data, 4, 1, 4, *args, 0, 0, False, 0)
    for fn in (b.Stop, b.FreeStop):
        with pytest.raises(ValueError, match="stop handle"):
            call(fn, 987654)
    with pytest.raises(ValueError, match="stop handle"):  # a signal that was never made
        call(b.Prefill, m, st, "ids", buf.ctypes.data, 4, 1, 4, "last", out.ctypes.data, 64, 0, 0, False, 987654)
    gen = np.zeros(2, np.int64)
    with pytest.raises(ValueError, match="stop handle"):
        call(b.Generate, m, buf.ctypes.data, 1, 4, 2, 0.0, 0, 1.0, 0.0, 1.0, 0, 0, 0, -1, 0, 0, gen.ctypes.data, 2, 0, 0, "", 987654)
    with pytest.raises(ValueError, match="eos ids: bad buffer"):
        call(b.Generate, m, buf.ctypes.data, 1, 4, 2, 0.0, 0, 1.0, 0.0, 1.0, 0, 0, 0, 3, 0, 2, gen.ctypes.data, 2, 0, 0, "", 0)
    more = np.array([-4], np.int64)
    with pytest.raises(ValueError, match="eos id -4"):
        call(b.Generate, m, buf.ctypes.data, 1, 4, 2, 0.0, 0, 1.0, 0.0, 1.0, 0, 0, 0, 3, more.ctypes.data, 1, gen.ctypes.data, 2, 0, 0, "", 0)
    with pytest.raises(ValueError, match="min_new_tokens = -1"):
        call(b.Generate, m, buf.ctypes.data, 1, 4, 2, 0.0, 0, 1.0, 0.0, 1.0, -1, 0, 0, -1, 0, 0, gen.ctypes.data, 2, 0, 0, "", 0)
    with pytest.raises(ValueError, match="min_p = 1.5"):
        call(b.Generate, m, buf.ctypes.data, 1, 4, 2, 0.0, 0, 1.0, 1.5, 1.0, 0, 0, 0, -1, 0, 0, gen.ctypes.data, 2, 0, 0, "", 0)
    with pytest.raises(ValueError, match="no_repeat_ngram_size = -3"):
        call(b.Generate, m, buf.ctypes.data, 1, 4, 2, 0.0, 0, 1.0, 0.0, 1.0, 0, -3, 0, -1, 0, 0, gen.ctypes.data, 2, 0, 0, "", 0)
    with pytest.raises(ValueError, match="repetition_penalty = -2"):
        call(b.Generate, m, buf.ctypes.data, 1, 4, 2, 0.0, 0, 1.0, 0.0, -2.0, 0, 0, 0, -1, 0, 0, gen.ctypes.data, 2, 0, 0, "", 0)
    for procs, match in (("{not json", "logits processors"), ('{"top_h": 0.5}', "unknown field"),
                         ('{"max_time": -1}', "max_time = -1"), ('{"bad_words_ids": [[-2]]}', "id -2"),
                         ('{"sequence_bias": [{"tokens": [1], "bias": 1e39}]}', "want finite")):
        with pytest.raises(ValueError, match=match):
            call(b.Generate, m, buf.ctypes.data, 1, 4, 2, 0.0, 0, 1.0, 0.0, 1.0, 0, 0, 0, -1, 0, 0, gen.ctypes.data, 2,
                 0, 0, procs, 0)
    data, lengths = np.frombuffer(b"abc", np.uint8), np.array([1, -1, 2], np.int64)
    vocab = call(b.NewVocab, data.ctypes.data, 3, lengths.ctypes.data, 3)
    for bad, match in (((data.ctypes.data, 2), "run past"), ((data.ctypes.data, 4), "sum to 3 bytes"),
                       ((0, 3), "bad buffer")):
        with pytest.raises(ValueError, match=match):
            call(b.NewVocab, *bad, lengths.ctypes.data, 3)
    for procs, match in (('{"stop_strings": {"strings": ["YQ=="], "vocab": 987654}}', "vocabulary handle"),
                         ('{"stop_strings": {"strings": [""], "vocab": %d}}' % vocab, "an empty string"),
                         ('{"stop_strings": {"strings": ["YQ=="], "vocab": %d, "fill": -2}}' % vocab, "fill id -2")):
        with pytest.raises(ValueError, match=match):
            call(b.Generate, m, buf.ctypes.data, 1, 4, 2, 0.0, 0, 1.0, 0.0, 1.0, 0, 0, 0, -1, 0, 0, gen.ctypes.data, 2,
                 0, 0, procs, 0)
    assert call(b.FreeVocab, vocab) is True and call(b.FreeVocab, vocab) is False
    tokens, idx, scores, counts = np.zeros(2, np.int64), np.zeros(2, np.int32), np.zeros(1, np.float32), np.zeros(2, np.int64)
    with pytest.raises(ValueError, match="only when it samples"):
        call(b.BeamSearch, m, buf.ctypes.data, 1, 4, 2, 2, 1, 1.0, 0, -1, 0, 0, -1, 1.0, 0, 0, 0, 0, tokens.ctypes.data,
             idx.ctypes.data, scores.ctypes.data, 0, 0, counts.ctypes.data, '{"typical_p": 0.5}', 0)
    assert call(b.FreeModel, m) is True


def test_prefill_ptr_needs_the_cuda_engine(m):
    with pytest.raises(ValueError, match="CUDA engine"):
        m.prefill_ptr(16, (1, 2), out_ptr=16)


def test_prefill_ptr_buffer_dtypes_checked(m):
    with pytest.raises(ValueError, match="out_dtype"):
        m.prefill_ptr(16, (1, 2), out_ptr=16, out_dtype="int8")
    with pytest.raises(ValueError, match="input_dtype"):
        m.prefill_ptr(16, (1, 2, m.config.hidden_size), out_ptr=16, kind="embeds", input_dtype="float64")
    with pytest.raises(ValueError, match="int64"):
        m.prefill_ptr(16, (1, 2), out_ptr=16, input_dtype="float32")


def test_prefill_ptr_logits_of_states_only(m):
    """logits=True is for the last or every position's state: a pooled sum
    or mean has none, and logits must be a bool."""
    for output in ("sum", "mean"):
        with pytest.raises(ValueError, match="logits=True takes output"):
            m.prefill_ptr(16, (1, 2), out_ptr=16, output=output, logits=True)
    with pytest.raises(TypeError, match="logits must be a bool"):
        m.prefill_ptr(16, (1, 2), out_ptr=16, logits="yes")


def test_prefill_ptr_layers_with_every_position_only(m):
    """layers_ptr is a device address (an int, 0 for none) and comes with
    output "all" only: the layers' states of every position."""
    for output in ("last", "sum", "mean"):
        with pytest.raises(ValueError, match="layers_ptr takes output 'all'"):
            m.prefill_ptr(16, (1, 2), out_ptr=16, output=output, layers_ptr=16)
    for bad, exc in (("16", TypeError), (True, TypeError), (1.5, TypeError), (-16, ValueError)):
        with pytest.raises(exc, match="layers_ptr must be"):
            m.prefill_ptr(16, (1, 2), out_ptr=16, output="all", layers_ptr=bad)


def test_graphs_need_the_cuda_engine(base_model):
    st = base_model.new_state(1)
    with pytest.raises(ValueError, match="CUDA engine"):
        base_model.capture_step(st)
    with pytest.raises(ValueError, match="CUDA engine"):
        base_model.capture_prefill(st, 4)
    with pytest.raises(ValueError, match="kind"):
        base_model.capture_prefill(st, 4, kind="tokens")
    with pytest.raises(TypeError, match="seq_len"):
        base_model.capture_prefill(st, 4.0)


def test_reserve(base_model):
    base_model.reserve(2, 16)  # a no-op on the CPU, but checked
    with pytest.raises(ValueError, match="batch_size"):
        base_model.reserve(0, 16)
    with pytest.raises(TypeError, match="seq_len"):
        base_model.reserve(1, "16")


def test_set_tf32_needs_the_cuda_engine(base_model):
    with pytest.raises(ValueError, match="CUDA engine"):
        base_model.set_tf32(True)
    with pytest.raises(TypeError, match="bool"):
        base_model.set_tf32("yes")


def test_set_gemm(base_model):
    with pytest.raises(ValueError, match="unknown GEMM algorithm"):
        base_model.set_gemm("cutlass")
    with pytest.raises(ValueError, match="CUDA engine"):
        base_model.set_gemm("cublaslt")
    with pytest.raises(TypeError, match="str"):
        base_model.set_gemm(1)


def test_set_prefill_graphs_needs_the_cuda_engine(base_model):
    with pytest.raises(ValueError, match="CUDA engine"):
        base_model.set_prefill_graphs(4)
    with pytest.raises(ValueError, match="0 or more"):
        base_model.set_prefill_graphs(-1)


def test_load_notice(tmp_path, capsys):
    """No notice where a load is quick: a small checkpoint, or a state dict,
    on the CPU. A checkpoint of a GB or more (here a sparse file) is
    announced on stderr with its size before it is read, and a load that
    then fails says no more."""
    from mambago._native import bindings, call

    assert call(bindings.LoadNotice, case_dir("base"), "cpu") == ""
    assert call(bindings.LoadNotice, "", "cpu") == ""
    if not mambago.cuda_is_available():
        assert call(bindings.LoadNotice, case_dir("base"), "auto") == ""
    shutil.copy(os.path.join(case_dir("base"), "config.json"), tmp_path)
    with open(tmp_path / "model.safetensors", "wb") as f:
        f.truncate(3 << 29)  # 1.6 GB of zeros, sparse: not a valid file
    with pytest.raises(ValueError, match="model.safetensors"):
        mambago.Model.from_pretrained(str(tmp_path), device="cpu")
    err = capsys.readouterr().err
    assert f"mambago: reading 1.6 GB of weights from {tmp_path}" in err and "loaded in" not in err, err


def test_step_ptr_needs_the_cuda_engine_and_its_arguments(m):
    """step_ptr: ints for the addresses and the stream, non-null, a State
    of this model; on the CPU engine a ValueError that names the engine."""
    st = m.new_state(1)
    with pytest.raises(ValueError, match="CUDA engine"):
        m.step_ptr(16, st, logits_ptr=16)
    with pytest.raises(TypeError, match="ids_ptr"):
        m.step_ptr("0x10", st, logits_ptr=16)
    with pytest.raises(ValueError, match="non-null"):
        m.step_ptr(16, st, logits_ptr=0)
    with pytest.raises(ValueError, match="stream must be non-negative"):
        m.step_ptr(16, st, logits_ptr=16, stream=-1)
    with pytest.raises(TypeError, match="state must be a mambago.State"):
        m.step_ptr(16, None, logits_ptr=16)


def test_import_refuses_a_cpu_without_the_builds_instructions(tmp_path):
    """A wheel built for x86-64-v3 (AVX2) on a CPU without it: ImportError,
    not Go's runtime ending the process as the extension loads."""
    from mambago._gopy import build_info
    from mambago._native import _check_cpu, cpu_flags

    here = cpu_flags()
    v3 = {"abm", "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "xsave"}
    if build_info.GOAMD64_PICKED:  # setup.py's own pick (not a wheel built for a level): v3 where this CPU has it
        assert build_info.GOAMD64 == ("v3" if v3 <= here else "v1")
    assert set(build_info.CPU_FLAGS) <= here
    _check_cpu()  # the CPU that built it passes
    if not build_info.CPU_FLAGS:
        pytest.skip(f"built for x86-64-{build_info.GOAMD64}, which needs no flags to check")
    old = tmp_path / "cpuinfo"
    old.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt\n")
    with pytest.raises(ImportError, match=r"built for x86-64-v\d CPUs, and this one lacks .*avx2"):
        _check_cpu(str(old))
    none = tmp_path / "missing"
    _check_cpu(str(none))  # no cpuinfo to read: nothing to refuse on


def test_beam_search_refuses_bad_settings(base_model):
    """Model.beam_search's bad settings are a ValueError or TypeError naming
    them, before any work."""
    ids = np.array([[1, 2, 3]])
    for kw, exc, match in ((dict(num_beams=0), ValueError, "num_beams"),
                           (dict(max_new_tokens=-1), ValueError, "max_new_tokens"),
                           (dict(num_return_sequences=3), ValueError, "num_return_sequences"),
                           (dict(length_penalty=float("nan")), ValueError, "length_penalty"),
                           (dict(early_stopping="no"), ValueError, "early_stopping"),
                           (dict(pad_token_id="x"), TypeError, "pad_token_id"),
                           (dict(eos_token_id=10**6), ValueError, "vocabulary"),
                           (dict(repetition_penalty=0.0), ValueError, "repetition_penalty"),
                           (dict(attention_mask=np.ones((1, 2))), ValueError, "attention_mask"),
                           (dict(num_beams=2.0), TypeError, "num_beams")):
        args = {"max_new_tokens": 4, "num_beams": 2, **kw}
        with pytest.raises(exc, match=match):
            base_model.beam_search(ids, **args)
