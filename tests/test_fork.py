"""mambago after fork(): a child forked from a process that had imported it
raises a clear RuntimeError instead of hanging in the Go runtime, the parent
keeps working, and spawned workers run normally.

Each case runs in a fresh interpreter under a timeout, so a regression shows
as a failure, not as a hung test run."""

import subprocess
import sys
import textwrap

import pytest

import mambago
from conftest import case_dir

TIMEOUT_S = 60


def run_script(tmp_path, body, **names):
    """Runs body as a script, with `case` (the base fixture's folder) and names
    defined first, and returns its stdout."""
    names = {"case": case_dir("base"), **names}
    script = tmp_path / "script.py"
    script.write_text("".join(f"{k} = {v!r}\n" for k, v in names.items()) + textwrap.dedent(body))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=TIMEOUT_S,
                          cwd=tmp_path)
    assert proc.returncode == 0, f"script failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


GPU = pytest.mark.skipif(not mambago.cuda_is_available(), reason=f"no GPU: {mambago.cuda_unavailable_reason()}")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=GPU)])
def test_forked_child_raises_and_parent_goes_on(tmp_path, device):
    out = run_script(tmp_path, """
        import gc, os, sys
        import numpy as np
        import mambago

        model = mambago.Model.from_pretrained(case, device=device)
        ids = np.random.default_rng().integers(0, model.config.vocab_size, size=(2, 7))
        before = model.prefill(ids)

        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                model.prefill(ids)
            except RuntimeError as exc:
                code = 0 if "spawn" in str(exc) and "fork" in str(exc) else 4
            try:
                mambago.Model.from_pretrained(case, device=device)
                code = 5
            except RuntimeError:
                pass
            del model  # its close() must not enter Go either
            gc.collect()
            sys.stdout.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        after = model.prefill(ids)
        print("parent equal", bool(np.array_equal(before, after)))
    """, device=device)
    assert "child 0" in out
    assert "parent equal True" in out


def test_multiprocessing_fork_and_spawn(tmp_path):
    out = run_script(tmp_path, """
        import multiprocessing as mp
        import numpy as np
        import mambago

        def work(ids):
            return mambago.Model.from_pretrained(case, device="cpu").prefill(ids)

        if __name__ == "__main__":
            ids = np.random.default_rng().integers(0, 90, size=(1, 9))  # the base fixture has 96 tokens
            want = work(ids)
            with mp.get_context("fork").Pool(1) as pool:
                try:
                    pool.apply(work, (ids,))
                    print("fork: no error")
                except RuntimeError as exc:
                    print("fork: RuntimeError", "spawn" in str(exc))
            with mp.get_context("spawn").Pool(1) as pool:
                got = pool.apply(work, (ids,))
            print("spawn equal", bool(np.array_equal(got, want)))
    """)
    assert "fork: RuntimeError True" in out
    assert "spawn equal True" in out


def test_child_that_never_calls_exits(tmp_path):
    # The child leaves through the interpreter's own shutdown, which finalizes
    # the model it inherited: that must not enter Go.
    out = run_script(tmp_path, """
        import os, sys
        import mambago
        model = mambago.Model.from_pretrained(case, device="cpu")
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
    """)
    assert "child 0" in out
