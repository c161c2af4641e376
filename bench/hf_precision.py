"""Issue 4's fixture bars applied to Hugging Face's own models in bf16 and
f16, beside mambago's mixed-precision engine, on the GPU: mean KL(reference
‖ ours) over positions and greedy argmax agreement, against each fixture's
float64 reference logits (tests/fixtures/*/expected.safetensors).

    PYTHONPATH=<installed wheel> python3 bench/hf_precision.py [--out result.json]

transformers runs each model as `from_pretrained(..., dtype=...)` puts it
on the GPU: its weights and activations in that dtype (its Mamba blocks
keep the residual in f32 where the config's `residual_in_fp32` says so,
the default). Without the mamba_ssm and causal-conv1d packages it runs its
own torch path. mambago runs every position through `prefill(...,
output="all")` and `logits`, as TestMixedPrecisionFixtures does. Cases
transformers cannot load as a causal LM (the state-spaces naming, a bare
MambaModel, the features model) are left out.
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from conftest import CASES, case_dir, read_safetensors  # noqa: E402

KL_BAR, ARGMAX_BAR = 1e-3, 0.99
CAUSAL_LMS = ("MambaForCausalLM", "FalconMambaForCausalLM")


def log_softmax(x):
    """Row-wise log-softmax of x [..., V] in float64."""
    x = np.asarray(x, np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def logit_stats(ref, got):
    """The mean over positions of KL(ref ‖ got) on [..., V] logits, and the
    number of positions whose argmax agrees (fixture.LogitStats)."""
    V = ref.shape[-1]
    ref, got = ref.reshape(-1, V), got.reshape(-1, V)
    lr, lg = log_softmax(ref), log_softmax(got)
    kl = (np.exp(lr) * (lr - lg)).sum(axis=-1)
    return float(kl.mean()), int((ref.argmax(-1) == got.argmax(-1)).sum())


def causal_lm_cases():
    """The fixture cases transformers loads as a causal LM: a causal-LM
    architecture, prompted by ids or embeddings (not mambago's raw features
    through an input_proj)."""
    out = []
    for name in CASES:
        path = os.path.join(case_dir(name), "config.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            archs = json.load(f).get("architectures") or []
        if any(a in CAUSAL_LMS for a in archs) and "features" not in expected_keys(name):
            out.append(name)
    return out


def expected_keys(name):
    """The tensor names in the case's expected.safetensors (its header only)."""
    with open(os.path.join(case_dir(name), "expected.safetensors"), "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return set(json.loads(f.read(n))) - {"__metadata__"}


def hf_logits(name, dtype, expected):
    """transformers' logits for the case's prompt, the model in dtype on the
    GPU, as float64 numpy."""
    import torch
    import transformers

    tdtype = getattr(torch, dtype)
    model = transformers.AutoModelForCausalLM.from_pretrained(case_dir(name), dtype=tdtype).to("cuda").eval()
    with torch.no_grad():
        if "inputs_embeds" in expected:
            emb = torch.from_numpy(expected["inputs_embeds"]).to("cuda", tdtype)
            out = model(inputs_embeds=emb, use_cache=False)
        else:
            ids = torch.from_numpy(expected["input_ids"]).to("cuda")
            out = model(input_ids=ids, use_cache=False)
    logits = out.logits.double().cpu().numpy()
    del model
    torch.cuda.empty_cache()
    return logits


def mambago_logits(name, dtype, expected):
    """mambago's logits for the case's prompt on the CUDA engine in dtype."""
    import mambago

    m = mambago.Model.from_pretrained(case_dir(name), device="cuda", dtype=dtype)
    try:
        if "inputs_embeds" in expected:
            h = m.prefill(inputs_embeds=expected["inputs_embeds"], output="all")
        else:
            h = m.prefill(expected["input_ids"], output="all")
        return m.logits(h)
    finally:
        m.close()


def main():
    """Run every case in each dtype through both, print the table and write
    the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="write the numbers as JSON here")
    p.add_argument("--dtypes", default="bfloat16,float16")
    a = p.parse_args()
    import torch
    import transformers

    dtypes = a.dtypes.split(",")
    rows, totals = [], {}
    for name in causal_lm_cases():
        expected = read_safetensors(os.path.join(case_dir(name), "expected.safetensors"))
        ref = expected["logits"]
        row = {"case": name, "positions": int(np.prod(ref.shape[:-1]))}
        for dtype in dtypes:
            for who, run in (("hf", hf_logits), ("mambago", mambago_logits)):
                kl, hits = logit_stats(ref, run(name, dtype, expected))
                row[f"{who}_{dtype}"] = {"kl": kl, "argmax_hits": hits}
                t = totals.setdefault(f"{who}_{dtype}", {"worst_kl": 0.0, "hits": 0, "positions": 0, "over_bar": 0})
                t["worst_kl"] = max(t["worst_kl"], kl)
                t["hits"] += hits
                t["positions"] += row["positions"]
                t["over_bar"] += kl > KL_BAR
        rows.append(row)
        print(name, {k: f"{v['kl']:.2e}" for k, v in row.items() if isinstance(v, dict)}, flush=True)

    cols = [f"{who}_{dt}" for dt in dtypes for who in ("hf", "mambago")]
    print(f"\nmean KL(reference ‖ run) on the logits (bar {KL_BAR:g}), GPU {torch.cuda.get_device_name()}, "
          f"transformers {transformers.__version__}, torch {torch.__version__}\n")
    print("| case | positions | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for r in rows:
        print(f"| {r['case']} | {r['positions']} | " + " | ".join(f"{r[c]['kl']:.2e}" for c in cols) + " |")
    print("| worst | | " + " | ".join(f"{totals[c]['worst_kl']:.2e}" for c in cols) + " |")
    print("| cases over the bar | | " + " | ".join(f"{totals[c]['over_bar']} of {len(rows)}" for c in cols) + " |")
    print(f"| argmax agreement (bar {ARGMAX_BAR:.0%}) | | " +
          " | ".join(f"{totals[c]['hits'] / totals[c]['positions']:.2%}" for c in cols) + " |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "transformers": transformers.__version__,
                       "torch": torch.__version__, "kl_bar": KL_BAR, "cases": rows, "totals": totals}, f, indent=1)


if __name__ == "__main__":
    main()
