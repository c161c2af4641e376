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
    edits = [("path/to/checkpoint", case_dir("base")), ("path/to/classifier", case_dir("features")),
             ("path/to/bf16-checkpoint", case_dir("bf16"))]
    for old, new in edits:
        assert old in code, f"the quick start no longer loads {old!r}: update this test"
        code = code.replace(old, new)
    code, n = re.subn(r"np\.random\.rand\((\d+), (\d+), \d+\)", rf"np.random.rand(\1, \2, {F})", code)
    assert n == 1, "the quick start's features no longer match this test's edit"
    ns = {}
    threads = mambago.get_num_threads()
    try:
        exec(compile(code, "README.md quick start", "exec"), ns)
        assert mambago.get_num_threads() == 4
    finally:
        mambago.set_num_threads(threads)
    assert ns["big"].dtype == "bfloat16" and ns["big"].device == "cpu"
    assert "device='cpu', dtype='bfloat16'" in repr(ns["big"])
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


def api_rows():
    """Each call the README's API table documents: (owner, name, the text
    between its parentheses)."""
    with open(README, encoding="utf-8") as f:
        lines = [line for line in f if line.startswith("| `")]
    calls = []
    for line in lines:
        first = line.split(" | ")[0]
        calls += re.findall(r"`(\w+)\.(\w+)\(([^)`]*)\)`", first)
    return calls


def test_api_table_matches_the_signatures():
    """Every call in the README's API table names a real function whose
    parameters, their order, keyword-only marks and defaults are as the
    table writes them."""
    import inspect

    owners = {"Model": mambago.Model, "model": mambago.Model, "state": mambago.State,
              "graph": mambago.Graph, "mambago": mambago}
    calls = api_rows()
    assert len(calls) >= 20, calls  # the table is where this test looks
    for owner, name, args in calls:
        fn = getattr(owners[owner], name, None)
        assert fn is not None, f"the README documents {owner}.{name}, which does not exist"
        params = [p for p in inspect.signature(fn).parameters.values() if p.name not in ("self", "cls")]
        documented, keyword_only = [], False
        for part in filter(None, (a.strip() for a in args.split(","))):
            if part == "*":
                keyword_only = True
                continue
            pname, _, default = part.partition("=")
            documented.append((pname, default, keyword_only))
        assert [p.name for p in params] == [d[0] for d in documented], f"{owner}.{name}({args})"
        for p, (pname, default, kw) in zip(params, documented, strict=True):
            assert (p.kind == p.KEYWORD_ONLY) == kw, f"{owner}.{name}: {pname} keyword-only is {kw} in the README"
            if default:
                assert p.default is not p.empty and p.default == eval(default), \
                    f"{owner}.{name}: {pname}={default} in the README, {p.default!r} in the code"
            else:
                assert p.default is p.empty, f"{owner}.{name}: {pname} has a default the README omits"
