"""The README's quick start runs as written, on the fixture models: its
checkpoint paths point at tests/fixtures (the classifier's feature width
becomes the fixture's), and every value it computes has the shape its
comments give."""

import os
import re

import numpy as np

import mambago
from conftest import case_dir

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")


def quick_start():
    """The first python block after the README's "## Quick start" heading."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    start = text.index("```python", text.index("## Quick start")) + len("```python")
    return text[start:text.index("```", start)]


def test_quick_start_runs():
    code = quick_start()
    F = mambago.Model.from_pretrained(case_dir("features"), device="cpu").config.input_dim
    edits = [("path/to/checkpoint", case_dir("base")), ("path/to/classifier", case_dir("features"))]
    for old, new in edits:
        assert old in code, f"the quick start no longer loads {old!r}: update this test"
        code = code.replace(old, new)
    code, n = re.subn(r"np\.random\.rand\((\d+), (\d+), \d+\)", rf"np.random.rand(\1, \2, {F})", code)
    assert n == 1, "the quick start's features no longer match this test's edit"
    ns = {}
    exec(compile(code, "README.md quick start", "exec"), ns)
    model, clf = ns["model"], ns["clf"]
    d, V = model.config.hidden_size, model.config.vocab_size
    B, T = ns["ids"].shape
    assert ns["last"].shape == (B, d)
    assert ns["every"].shape == (B, T, d)
    assert ns["logits"].shape == (B, T, V)
    assert ns["next_logits"].shape == (B, V)
    assert ns["tokens"].shape[0] == B and 0 < ns["tokens"].shape[1] <= 32
    assert ns["pooled"].shape == (8, clf.config.hidden_size)
    for name in ("last", "every", "logits", "next_logits", "pooled"):
        assert not np.isnan(ns[name]).any(), name
