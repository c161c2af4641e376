"""Padded batches (attention_mask): each row gives what its tokens alone
give, on every engine this machine has, and transformers' own left-padded
results where torch and transformers are installed."""

import numpy as np
import pytest

import mambago
from conftest import case_dir, rel_err
from mambago.hf import MambaForCausalLM

# Equivalent runs of one engine sum in different orders (another batch
# size): f32 takes the Go suite's bound for such runs (enginetest.EquivTol,
# measured there; 1.05e-5 seen here), and bf16 also rounds their
# activations differently.
TOL = {"float32": 3e-4, "bfloat16": 3e-2}

ENGINES = [("cpu", "float32")]
if mambago.cuda_is_available():
    ENGINES += [("cuda", "float32"), ("cuda", "bfloat16")]


@pytest.fixture(scope="module", params=ENGINES, ids=lambda e: "-".join(e))
def engine(request):
    return request.param


def load(name, engine):
    device, dtype = engine
    return mambago.Model.from_pretrained(case_dir(name), device=device, dtype=dtype)


def random_batch(rng, B, T):
    """A mask of B rows of T positions with padding on the left, the right,
    both or neither, and every row at least one token long."""
    mask = np.zeros((B, T), np.int64)
    for b in range(B):
        n = int(rng.integers(1, T + 1))
        first = int(rng.integers(0, T - n + 1))
        mask[b, first:first + n] = 1
    mask[0] = 0
    mask[0, T // 2:] = 1  # at least one row padded on the left
    return mask


def prompt(rng, model, B, T):
    cfg = model.config
    if cfg.input_dim:
        return {"features": rng.standard_normal((B, T, cfg.input_dim)).astype(np.float32)}
    return {"input_ids": rng.integers(0, cfg.vocab_size, size=(B, T))}


def row(x, b, first, n):
    """Row b's tokens of a prompt given as keyword arguments, as a batch of one."""
    return {k: v[b:b + 1, first:first + n] for k, v in x.items()}


def check_outputs(outs, b, f, n, want_all, tol):
    """Row b of a padded batch's outputs (outs by output kind), its n tokens
    from position f, against what the tokens gave alone ("all")."""
    got_all = outs["all"][b]
    assert rel_err(got_all[f:f + n], want_all) <= tol, (b, f, n)
    assert not np.any(got_all[:f]) and not np.any(got_all[f + n:]), "padding's output is not zero"
    assert rel_err(outs["last"][b], want_all[-1]) <= tol
    assert rel_err(outs["sum"][b], want_all.astype(np.float64).sum(0)) <= tol
    assert rel_err(outs["mean"][b], want_all.astype(np.float64).mean(0)) <= tol


@pytest.mark.parametrize("name", ["base", "features", "conv3_bias"])
def test_rows_as_if_alone(name, engine):
    model = load(name, engine)
    tol = TOL[engine[1]]
    rng = np.random.default_rng()
    B, T = 5, 23
    mask = random_batch(rng, B, T)
    x = prompt(rng, model, B, T)
    first, count = mask.argmax(axis=1), mask.sum(axis=1)
    # A state carried in first, so the rows also continue as they would alone.
    lead = prompt(rng, model, B, 4)
    outs = {}
    for output in ("all", "last", "sum", "mean"):
        st = model.new_state(B)
        model.prefill(**lead, state=st)
        outs[output] = model.prefill(**x, attention_mask=mask, output=output, state=st)
        if output == "last":
            state = st  # its final state, checked below
    for b in range(B):
        f, n = int(first[b]), int(count[b])
        alone = model.new_state(1)
        model.prefill(**row(lead, b, 0, 4), state=alone)
        want_all = model.prefill(**row(x, b, f, n), output="all", state=alone)[0]
        check_outputs(outs, b, f, n, want_all, tol)
        for layer in range(model.config.num_hidden_layers):
            assert rel_err(state.ssm_state(layer)[b], alone.ssm_state(layer)[0]) <= tol, (b, layer)
            assert rel_err(state.conv_state(layer)[b], alone.conv_state(layer)[0]) <= tol, (b, layer)


@pytest.mark.parametrize("name", ["base", "features", "conv3_bias"])
def test_new_rows_as_if_alone(name, engine):
    """Without a state (mambago.Model.StartSpans: one prefill on the CUDA
    engine, a prefill a row length on the CPU) every output is still what
    each row's tokens alone give."""
    model = load(name, engine)
    tol = TOL[engine[1]]
    rng = np.random.default_rng()
    B, T = 6, 29
    mask = random_batch(rng, B, T)
    x = prompt(rng, model, B, T)
    first, count = mask.argmax(axis=1), mask.sum(axis=1)
    outs = {output: model.prefill(**x, attention_mask=mask, output=output) for output in ("all", "last", "sum", "mean")}
    for b in range(B):
        f, n = int(first[b]), int(count[b])
        want_all = model.prefill(**row(x, b, f, n), output="all")[0]
        check_outputs(outs, b, f, n, want_all, tol)


def test_rows_of_one_length(engine):
    """Every row the same number of tokens at different places: one prefill
    on the batch's own state."""
    model = load("base", engine)
    tol = TOL[engine[1]]
    rng = np.random.default_rng()
    B, T, n = 4, 12, 7
    mask = np.zeros((B, T), np.int64)
    for b, first in enumerate((0, 5, 2, 3)):
        mask[b, first:first + n] = 1
    x = prompt(rng, model, B, T)
    state = model.new_state(B)
    got = model.prefill(**x, attention_mask=mask, output="all", state=state)
    for b in range(B):
        f = int(mask[b].argmax())
        alone = model.new_state(1)
        want = model.prefill(**row(x, b, f, n), output="all", state=alone)[0]
        assert rel_err(got[b, f:f + n], want) <= tol and not np.any(got[b, :f]) and not np.any(got[b, f + n:])
        for layer in range(model.config.num_hidden_layers):
            assert rel_err(state.ssm_state(layer)[b], alone.ssm_state(layer)[0]) <= tol, (b, layer)
            assert rel_err(state.conv_state(layer)[b], alone.conv_state(layer)[0]) <= tol, (b, layer)


@pytest.mark.parametrize("engine", [e for e in ENGINES if e[1] == "float32"], ids=lambda e: "-".join(e))
def test_generate_continues_each_row(engine):
    """Greedy tokens, bit for bit, in f32 (GenerateSpans is the same Go code
    for every engine; in bf16 a near tie may pick differently in another
    batch)."""
    model = load("base", engine)
    rng = np.random.default_rng()
    B, T = 4, 9
    mask = random_batch(rng, B, T)
    ids = rng.integers(0, model.config.vocab_size, size=(B, T))
    got = model.generate(ids, 6, attention_mask=mask)
    for b in range(B):
        tokens = ids[b:b + 1, mask[b] == 1]
        want = model.generate(tokens, 6)
        assert np.array_equal(got[b, :want.shape[1]], want[0]), b


def test_mask_of_ones_changes_nothing(base_model):
    rng = np.random.default_rng()
    ids = rng.integers(0, base_model.config.vocab_size, size=(3, 11))
    for output in ("all", "last", "mean"):
        want = base_model.prefill(ids, output=output)
        assert np.array_equal(base_model.prefill(ids, output=output, attention_mask=np.ones_like(ids)), want)
        assert np.array_equal(base_model.prefill(ids, output=output, attention_mask=np.ones(ids.shape, bool)), want)
        assert np.array_equal(base_model.prefill(ids, output=output, attention_mask=np.ones(ids.shape)), want)
    assert np.array_equal(base_model.generate(ids, 4, attention_mask=np.ones_like(ids)), base_model.generate(ids, 4))


def test_one_row_without_batch_axis(base_model):
    rng = np.random.default_rng()
    ids = rng.integers(0, base_model.config.vocab_size, size=7)
    got = base_model.prefill(ids, attention_mask=[0, 0, 1, 1, 1, 1, 1])
    assert np.array_equal(got, base_model.prefill(ids[2:]))


def test_bad_masks(base_model):
    ids = np.array([[5, 17, 33, 2], [1, 2, 3, 4]])
    bad = [
        (np.ones((2, 3), int), ValueError, "shape"),
        (np.ones((3, 4), int), ValueError, "shape"),
        (np.array([[1, 1, 2, 1], [1, 1, 1, 1]]), ValueError, "only 0"),
        (np.array([[1, 1, 0.5, 1], [1, 1, 1, 1]]), ValueError, "only 0"),
        (np.array([[0, 0, 0, 0], [1, 1, 1, 1]]), ValueError, "row 0 has no tokens"),
        (np.array([[1, 1, 1, 1], [1, 0, 1, 1]]), ValueError, "row 1 has padding between"),
        (np.array([["1", "1", "1", "1"]] * 2), TypeError, "numbers or booleans"),
        (np.ones((2, 4, 1), int), ValueError, "dimensions"),
    ]
    for mask, err, match in bad:
        for call in (lambda: base_model.prefill(ids, attention_mask=mask),
                     lambda: base_model.generate(ids, 2, attention_mask=mask)):
            with pytest.raises(err, match=match):
                call()


def test_left_padding_matches_transformers():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    hf = transformers.MambaForCausalLM.from_pretrained(case_dir("base")).eval()
    ours = MambaForCausalLM.from_model(hf, device="cpu")
    B, T = 4, 10
    ids = torch.randint(1, hf.config.vocab_size, (B, T))
    mask = torch.ones_like(ids)
    for b, pad in enumerate((0, 3, 6, 9)):
        mask[b, :pad] = 0
        ids[b, :pad] = hf.config.pad_token_id or 0
    with torch.no_grad():
        want = hf(ids, attention_mask=mask).logits
        want_tokens = hf.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
    got = ours(ids, attention_mask=mask).logits
    real = mask.bool()
    assert rel_err(got[real].numpy(), want[real].numpy()) <= 1e-4
    assert not got[~real].any()
    assert torch.equal(ours.generate(ids, attention_mask=mask, max_new_tokens=6), want_tokens)
