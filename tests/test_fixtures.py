"""Every Hugging Face fixture case, through the Python API, in float32."""

import numpy as np
import pytest

import mambago
from conftest import CASES, case_dir, read_safetensors, rel_err

TOL = 1e-4


DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not mambago.cuda_is_available(),
                                                  reason=f"no GPU: {mambago.cuda_unavailable_reason()}")),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", CASES)
def test_matches_hugging_face(name, device):
    exp = read_safetensors(f"{case_dir(name)}/expected.safetensors")
    m = mambago.Model.from_pretrained(case_dir(name), device=device)
    assert m.device == device
    B, T, d = exp["hidden"].shape
    st = m.new_state(B)
    if "input_ids" in exp:
        kw, nxt = {"input_ids": exp["input_ids"]}, exp["next_ids"]
    elif "inputs_embeds" in exp:
        kw, nxt = {"inputs_embeds": exp["inputs_embeds"]}, exp["next_embeds"]
    else:
        kw, nxt = {"features": exp["features"]}, exp["next_features"]
    hidden = m.prefill(**kw, state=st, output="all")
    assert rel_err(hidden, exp["hidden"]) <= TOL
    assert rel_err(m.logits(hidden), exp["logits"]) <= TOL
    for layer in range(m.config.num_hidden_layers):
        assert rel_err(st.conv_state(layer), exp[f"conv.{layer}"]) <= TOL, layer
        assert rel_err(st.ssm_state(layer), exp[f"ssm.{layer}"]) <= TOL, layer
    for i in range(nxt.shape[1]):
        if "input_ids" in exp:
            logits = m.step(np.ascontiguousarray(nxt[:, i]), st)
        else:
            key = "inputs_embeds" if "inputs_embeds" in exp else "features"
            logits = m.logits(m.prefill(**{key: np.ascontiguousarray(nxt[:, i:i + 1])}, state=st))
        assert rel_err(logits, exp["next_logits"][:, i]) <= TOL, i


def test_every_required_case_is_there():
    for need in ("t1", "long", "batch3", "dstate8", "dstate64", "conv3_bias", "bf16", "sharded", "falcon", "embeds"):
        assert need in CASES
    long = read_safetensors(f"{case_dir('long')}/expected.safetensors")
    assert long["hidden"].shape[1] > 256
