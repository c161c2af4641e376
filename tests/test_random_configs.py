"""Models of random shape against transformers' own MambaForCausalLM, a
reference nobody here wrote: hidden and state sizes, conv widths, ranks,
expansions, biases, ties and prompt shapes drawn fresh on every run, through
every engine this machine has. The fixtures hold a few shapes; these reach
the odd ones (a width of 5, a state of 31, a rank of 13) that fixed shapes
miss. Skips without torch and transformers."""

import numpy as np
import pytest

import mambago
from conftest import rel_err
from mambago.hf import MambaForCausalLM

torch = pytest.importorskip("torch", reason="torch is not installed")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")

MODELS = 8  # a test's models; each is drawn anew, with its own prompt
STEPS = 3  # decode steps after each prefill

# The bound on max|ours - reference| / max|reference| over a model's logits,
# the reference in float64. f32 matches the fixtures' bound; bf16 and f16
# round the weights and the GEMM inputs (8 and 11 bits), so theirs only
# catches a wrong element, not rounding.
BOUND = {"float32": 1e-4, "bfloat16": 0.1, "float16": 0.02}


def random_model(rng):
    """A transformers model of random shape, its weights moved off their
    initial values so every bias, D and A differs across channels."""
    d = int(rng.integers(4, 97))
    rank = "auto" if rng.integers(2) else int(rng.integers(1, 17))
    config = transformers.MambaConfig(
        vocab_size=int(rng.integers(5, 300)), hidden_size=d, state_size=int(rng.integers(1, 33)),
        num_hidden_layers=int(rng.integers(1, 5)), expand=int(rng.integers(1, 4)),
        conv_kernel=int(rng.integers(2, 6)), use_bias=bool(rng.integers(2)),
        use_conv_bias=bool(rng.integers(2)), time_step_rank=rank,
        tie_word_embeddings=bool(rng.integers(2)), residual_in_fp32=bool(rng.integers(2)),
        layer_norm_epsilon=float(rng.choice([1e-5, 1e-6])), use_mambapy=False)
    torch.manual_seed(int(rng.integers(1 << 31)))
    hf = transformers.MambaForCausalLM(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return hf


def describe(hf, B, T):
    c = hf.config
    return (f"d={c.hidden_size} E={c.intermediate_size} N={c.state_size} K={c.conv_kernel} "
            f"R={c.time_step_rank} layers={c.num_hidden_layers} vocab={c.vocab_size} bias={c.use_bias} "
            f"conv_bias={c.use_conv_bias} tied={c.tie_word_embeddings} B={B} T={T}")


def check_random_models(device, dtype, max_len):
    """MODELS random models: the prefill's logits at every position and STEPS
    decode steps after it, against transformers' model in float64 on the
    prompt and its continuation."""
    rng = np.random.default_rng()
    for _ in range(MODELS):
        hf = random_model(rng)
        B, T = int(rng.integers(1, 10)), int(rng.integers(1, max_len + 1))
        ids = rng.integers(0, hf.config.vocab_size, size=(B, T + STEPS))
        with torch.no_grad():
            want = hf.double()(torch.from_numpy(ids)).logits.numpy()
        model = MambaForCausalLM.from_model(hf.float(), device=device, dtype=dtype).model
        try:
            where = f"{device} {dtype}: {describe(hf, B, T)}"
            state = model.new_state(B)
            got = model.logits(model.prefill(ids[:, :T], output="all", state=state))
            err = rel_err(got, want[:, :T])
            assert err <= BOUND[dtype], f"{where}: prefill logits rel err {err:.3g}"
            steps = [rel_err(model.step(ids[:, k], state), want[:, k]) for k in range(T, T + STEPS)]
            assert max(steps) <= BOUND[dtype], f"{where}: steps' logits rel err {steps}"
            print(f"{where}: rel err prefill {err:.2e}, steps {max(steps):.2e}")  # shown by pytest -s
        finally:
            model.close()


def test_cpu_matches_transformers():
    check_random_models("cpu", "float32", max_len=64)


gpu = pytest.mark.skipif(not mambago.cuda_is_available(),
                         reason=f"no GPU: {mambago.cuda_unavailable_reason()}")


@gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_cuda_matches_transformers(dtype):
    # Up to 300 positions: past the scan's 64-row tiles and the chunked scan's chunks.
    check_random_models("cuda", dtype, max_len=300)
