"""Identities that must hold for any input: drawn fresh on every run."""

import platform
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import rel_err

C = np.ascontiguousarray  # slices of a batch are views; the engine takes contiguous arrays

# A prefill of T rows and T one-row steps sum in different orders: OpenBLAS,
# the engine's own SGEMM (blas="go") and its few-row kernel each pick their blocking
# by shape. On fresh random prompts that rounding is amplified where a
# position's residual nearly cancels before the final norm, and has reached
# 1.09e-4; the Go suite's enginetest.EquivTol says how it was measured.
TOL = 3e-4


@pytest.fixture
def rng():
    return np.random.default_rng()


def test_prefill_equals_steps(base_model, rng):
    m = base_model
    B, T = 3, 29
    ids = rng.integers(0, m.config.vocab_size, size=(B, T))
    st_full, st_step = m.new_state(B), m.new_state(B)
    last = m.prefill(C(ids[:, :-1]), state=st_full)
    full_logits = m.step(C(ids[:, -1]), st_full)
    m.prefill(C(ids[:, :1]), state=st_step)
    for t in range(1, T - 1):
        m.step(C(ids[:, t]), st_step)
    step_logits = m.step(C(ids[:, -1]), st_step)
    assert rel_err(step_logits, full_logits) <= TOL
    all_h = m.prefill(ids, output="all")
    assert rel_err(m.logits(C(all_h[:, -1])), full_logits) <= TOL
    assert last.shape == (B, m.config.hidden_size)
    for layer in range(m.config.num_hidden_layers):
        assert rel_err(st_step.ssm_state(layer), st_full.ssm_state(layer)) <= TOL
        assert rel_err(st_step.conv_state(layer), st_full.conv_state(layer)) <= TOL


@pytest.mark.parametrize("t1,t2", [(1, 1), (3, 40), (64, 7)])
def test_prefill_in_two_parts(base_model, rng, t1, t2):
    m = base_model
    B = 2
    ids = rng.integers(0, m.config.vocab_size, size=(B, t1 + t2))
    whole = m.new_state(B)
    want = m.prefill(ids, state=whole, output="all")
    parts = m.new_state(B)
    a = m.prefill(C(ids[:, :t1]), state=parts, output="all")
    b = m.prefill(C(ids[:, t1:]), state=parts, output="all")
    assert rel_err(np.concatenate([a, b], axis=1), want) <= TOL
    for layer in range(m.config.num_hidden_layers):
        assert rel_err(parts.ssm_state(layer), whole.ssm_state(layer)) <= TOL


def test_batch_rows_independent(base_model, rng):
    m = base_model
    ids = rng.integers(0, m.config.vocab_size, size=(4, 21))
    together = m.prefill(ids, output="all")
    for b in range(4):
        alone = m.prefill(ids[b:b + 1], output="all")
        assert rel_err(alone[0], together[b]) <= TOL


def test_pooling_and_features(features_model, rng):
    m = features_model
    F = m.config.input_dim
    x = rng.standard_normal((3, 17, F)).astype(np.float32)
    all_h = m.prefill(features=x, output="all")
    assert rel_err(m.prefill(features=x, output="last"), all_h[:, -1]) <= TOL
    assert rel_err(m.prefill(features=x, output="sum"), all_h.sum(axis=1)) <= TOL
    assert rel_err(m.prefill(features=x, output="mean"), all_h.mean(axis=1)) <= TOL
    # An unbatched input is one sequence.
    assert rel_err(m.prefill(features=x[0], output="mean"), all_h[:1].mean(axis=1)) <= TOL


def test_embeds_equal_ids(base_model, rng):
    """inputs_embeds = the embedding rows of the ids gives the same result."""
    from conftest import case_dir, read_safetensors

    m = base_model
    emb = read_safetensors(f"{case_dir('base')}/model.safetensors")["backbone.embeddings.weight"]
    ids = rng.integers(0, m.config.vocab_size, size=(2, 13))
    a = m.prefill(ids, output="all")
    b = m.prefill(inputs_embeds=np.ascontiguousarray(emb[ids]), output="all")
    assert np.array_equal(a, b)


def test_state_roundtrip_and_reset(base_model, rng):
    m = base_model
    c = m.config
    st = m.new_state(2)
    assert st.conv_state(0).shape == (2, c.intermediate_size, c.conv_kernel)
    assert st.ssm_state(1).shape == (2, c.intermediate_size, c.state_size)
    assert not st.ssm_state(0).any()
    ids = rng.integers(0, c.vocab_size, size=(2, 9))
    m.prefill(ids, state=st)
    saved = [(st.conv_state(i), st.ssm_state(i)) for i in range(c.num_hidden_layers)]
    nxt = rng.integers(0, c.vocab_size, size=2)
    want = m.step(nxt, st)
    st.reset()
    assert not st.ssm_state(0).any() and not st.conv_state(1).any()
    for i, (conv, ssm) in enumerate(saved):
        st.set_conv_state(i, conv)
        st.set_ssm_state(i, ssm)
    assert np.array_equal(m.step(nxt, st), want)


def test_generate_greedy_is_argmax_of_steps(base_model, rng):
    m = base_model
    ids = rng.integers(0, m.config.vocab_size, size=(2, 6))
    out = m.generate(ids, 7)
    st = m.new_state(2)
    logits = m.logits(m.prefill(ids, state=st))
    for i in range(7):
        tok = logits.argmax(axis=-1)
        assert np.array_equal(out[:, i], tok)
        logits = m.step(tok, st)


def test_generate_sampling(base_model, rng):
    m = base_model
    ids = rng.integers(0, m.config.vocab_size, size=(3, 5))
    a = m.generate(ids, 10, temperature=0.8, top_k=30, top_p=0.9, seed=123)
    b = m.generate(ids, 10, temperature=0.8, top_k=30, top_p=0.9, seed=123)
    c = m.generate(ids, 10, temperature=0.8, top_k=30, top_p=0.9, seed=124)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    # Any int seeds: its low 63 bits are used.
    big = m.generate(ids, 10, temperature=0.8, top_k=30, top_p=0.9, seed=123 + 2**63)
    neg = m.generate(ids, 10, temperature=0.8, top_k=30, top_p=0.9, seed=-1)
    top = m.generate(ids, 10, temperature=0.8, top_k=30, top_p=0.9, seed=2**63 - 1)
    assert np.array_equal(big, a) and np.array_equal(neg, top)
    assert a.dtype == np.int64 and a.shape == (3, 10)
    assert ((0 <= a) & (a < m.config.vocab_size)).all()
    # top_k=1 is greedy whatever the temperature.
    assert np.array_equal(m.generate(ids, 6, temperature=2.0, top_k=1, seed=1), m.generate(ids, 6))
    # A stop token ends the row and pads it.
    first = m.generate(ids[:1], 1)[0, 0]
    stopped = m.generate(ids[:1], 8, eos_token_id=int(first))
    assert stopped.shape == (1, 1) and stopped[0, 0] == first


def test_no_flush_to_zero_after_import(base_model):
    """gopy builds with -ffast-math unless told otherwise; it must not set FTZ/DAZ for the process."""
    tiny = np.float32(1e-40)
    assert tiny * np.float32(1.0) != 0


def test_go_and_openblas_backends_agree(rng):
    """The GEMMs through numpy's OpenBLAS and through the engine's own SGEMM
    (gonum's on a CPU without AVX2) give the same model."""
    import mambago
    from conftest import case_dir
    from mambago.model import numpy_blas

    blas_model = mambago.Model.from_pretrained(case_dir("dstate64"), device="cpu", blas=numpy_blas())
    go_model = mambago.Model.from_pretrained(case_dir("dstate64"), device="cpu", blas="go")
    assert go_model.backend in ("go sgemm (avx512)", "go sgemm (avx2)", "gonum"), go_model.backend
    assert "openblas" in blas_model.backend.lower(), blas_model.backend
    ids = rng.integers(0, go_model.config.vocab_size, size=(2, 40))
    assert rel_err(blas_model.prefill(ids, output="all"), go_model.prefill(ids, output="all")) <= TOL


def test_auto_blas_picks_own_gemms_with_avx2():
    """blas="auto" runs the engine's own GEMMs on a CPU with AVX2, FMA and
    F16C (where they were measured faster than OpenBLAS), on their AVX-512
    kernel where it has AVX-512F too, else numpy's OpenBLAS."""
    import mambago
    from conftest import case_dir
    from mambago._native import cpu_flags

    # x86 flags (an x86 host's /proc/cpuinfo under an emulated aarch64 process says nothing of its CPU)
    flags = (cpu_flags() or set()) if platform.machine() in ("x86_64", "AMD64") else set()
    backend = mambago.Model.from_pretrained(case_dir("dstate64"), device="cpu").backend
    if {"avx2", "fma", "f16c", "avx512f"} <= flags:
        assert backend == "go sgemm (avx512)", backend
    elif {"avx2", "fma", "f16c"} <= flags:
        assert backend == "go sgemm (avx2)", backend
    else:
        assert "openblas" in backend.lower(), backend


def test_state_copy_continues_like_the_original(base_model, rng):
    """A copied state is the original's sequences: both continue alike, and
    each is its own memory (stepping or closing one leaves the other)."""
    import copy

    m = base_model
    B = 2
    ids = rng.integers(0, m.config.vocab_size, size=(B, 17))
    st = m.new_state(B)
    m.prefill(ids, state=st)
    twins = [st.copy(), copy.copy(st), copy.deepcopy(st)]
    for t in twins:
        assert t is not st and t.batch_size == B and t._model is m
        for layer in range(m.config.num_hidden_layers):
            assert np.array_equal(t.conv_state(layer), st.conv_state(layer))
            assert np.array_equal(t.ssm_state(layer), st.ssm_state(layer))
    nxt = rng.integers(0, m.config.vocab_size, size=B)
    want = m.step(nxt, st)  # moves st on; the copies stay where they were
    for t in twins:
        assert np.array_equal(m.step(nxt, t), want)
    other = rng.integers(0, m.config.vocab_size, size=(B, 5))
    fork = st.copy()
    m.prefill(other, state=fork)  # one branch goes elsewhere
    assert not np.array_equal(fork.ssm_state(0), st.ssm_state(0))
    st.close()
    assert np.isfinite(m.step(nxt, fork)).all()  # the copy outlives the original
    with pytest.raises(ValueError, match="state is closed"):
        st.copy()


def test_a_large_token_cap_costs_no_memory():
    """generate and beam_search with max_new_tokens = 2·10⁸ that end at an eos
    after one token: the output buffers' untouched pages (1.6 GB for the
    tokens alone) are never committed, so the process's peak memory stays
    well under them. A fresh interpreter, so the peak is this call's."""
    from conftest import case_dir

    script = textwrap.dedent(f"""
        import resource, numpy as np, mambago
        m = mambago.Model.from_pretrained({case_dir('base')!r}, device="cpu")
        ids = np.array([[3, 1, 4, 1, 5]])
        # Every id an eos but the first step's least likely (beam search keeps one that is not):
        # each row and beam ends at its first token.
        least = int(m.logits(m.prefill(ids))[0].argmin())
        every = [i for i in range(m.config.vocab_size) if i != least]
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        cap = 200_000_000
        out = m.generate(ids, cap, eos_token_id=every)
        beams = m.beam_search(ids, cap, 2, eos_token_id=every, early_stopping=True)
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        print("shapes", out.shape, beams.tokens.shape, beams.beam_indices.shape)
        print("grown_kb", grown)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert lines["shapes"] == "(1, 1) (1, 1) (1, 1)", r.stdout
    assert int(lines["grown_kb"]) < 200_000, r.stdout  # the buffers alone would be 1,600,000 kB and more
