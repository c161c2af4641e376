"""The CUDA engine through the Python API: it matches the CPU engine on fresh
random inputs. Skips, saying why, on a machine without a GPU."""

import numpy as np
import pytest

import mambago
from conftest import case_dir, rel_err

pytestmark = pytest.mark.skipif(not mambago.cuda_is_available(),
                                reason=f"no GPU: {mambago.cuda_unavailable_reason()}")


@pytest.mark.parametrize("name", ["base", "falcon", "conv3_bias", "dstate64", "features"])
def test_gpu_matches_cpu(name):
    cpu = mambago.Model.from_pretrained(case_dir(name), device="cpu")
    gpu = mambago.Model.from_pretrained(case_dir(name), device="cuda")
    assert gpu.device == "cuda" and "FP32" in gpu.backend
    rng = np.random.default_rng()
    B, T = 3, 300
    if cpu.config.input_dim:
        kw = {"features": rng.standard_normal((B, T, cpu.config.input_dim)).astype(np.float32)}
    else:
        kw = {"input_ids": rng.integers(0, cpu.config.vocab_size, size=(B, T))}
    for output in ("all", "last", "sum", "mean"):
        assert rel_err(gpu.prefill(**kw, output=output), cpu.prefill(**kw, output=output)) <= 1e-4, output
    sg, sc = gpu.new_state(B), cpu.new_state(B)
    gpu.prefill(**kw, state=sg)
    cpu.prefill(**kw, state=sc)
    for layer in range(cpu.config.num_hidden_layers):
        assert rel_err(sg.ssm_state(layer), sc.ssm_state(layer)) <= 1e-4
        assert rel_err(sg.conv_state(layer), sc.conv_state(layer)) <= 1e-4
    if not cpu.config.input_dim:
        tok = rng.integers(0, cpu.config.vocab_size, size=B)
        assert rel_err(gpu.step(tok, sg), cpu.step(tok, sc)) <= 1e-4
        ids = rng.integers(0, cpu.config.vocab_size, size=(2, 9))
        assert np.array_equal(gpu.generate(ids, 8), cpu.generate(ids, 8))


def test_auto_picks_the_gpu():
    assert mambago.Model.from_pretrained(case_dir("base")).device == "cuda"
