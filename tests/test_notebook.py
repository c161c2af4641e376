"""mambago in a Jupyter notebook: a notebook that loads a model, prefills,
generates, raises on bad input and loads a big checkpoint's notice runs
headless through nbclient on an IPython kernel of this Python, and its cells
show what a user would see: outputs, the exception as an error in its cell
(the kernel survives it), and the load notice on stderr."""

import os
import sys

import pytest

from conftest import case_dir

nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (scripts/test.sh installs it)")
nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed")
pytest.importorskip("ipykernel", reason="ipykernel is not installed")


def run_notebook(cells, tmp_path):
    """Runs code cells in a fresh kernel of this interpreter and returns the
    executed notebook (errors stay in their cells)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                                     resources={"metadata": {"path": str(tmp_path)}})
    return client.execute()


def text(cell, name):
    """The cell's text on one stream ("stdout" or "stderr")."""
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == name)


def test_notebook_session(tmp_path):
    big = tmp_path / "big"
    big.mkdir()
    with open(big / "model.safetensors", "wb") as f:
        f.truncate(3 << 29)  # 1.6 GB, sparse: announced, then refused
    nb = run_notebook([
        f"import sys; print(sys.executable)\nimport numpy as np, mambago\n"
        f"m = mambago.Model.from_pretrained({case_dir('base')!r}, device='cpu')\nprint(m.config.hidden_size)",
        "h = m.prefill(np.array([[5, 17, 33, 2]]), output='all'); print(h.shape)",
        "print(m.generate(np.array([[5, 17, 33]]), max_new_tokens=4).shape)",
        "m.prefill(np.array([[5, 1000000]]))",  # an id out of range
        "print('still alive', m.prefill(np.array([[1, 2]])).shape)",
        f"mambago.Model.from_pretrained({str(big)!r}, device='cpu')",
    ], tmp_path)
    c = nb.cells
    # The kernel must be this interpreter (a user-level "python3" kernelspec could point elsewhere).
    exe, hidden = text(c[0], "stdout").split("\n")[:2]
    assert os.path.realpath(exe) == os.path.realpath(sys.executable) and hidden == "64", c[0].outputs
    assert text(c[1], "stdout").strip() == "(1, 4, 64)"
    assert text(c[2], "stdout").strip() == "(1, 4)"
    err = [o for o in c[3].outputs if o.output_type == "error"]
    assert len(err) == 1 and err[0].ename == "ValueError" and "input_ids" in err[0].evalue, c[3].outputs
    assert text(c[4], "stdout").strip() == "still alive (1, 64)"
    assert "mambago: reading 1.6 GB of weights from" in text(c[5], "stderr"), c[5].outputs
    assert [o.ename for o in c[5].outputs if o.output_type == "error"] == ["ValueError"]
