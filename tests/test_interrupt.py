"""Ctrl-C during generate: a KeyboardInterrupt on the main thread stops the
engine before its next token, rather than once the whole generation is
done, and the model goes on working. Each case runs in a fresh interpreter
that sends itself SIGINT, under a timeout, so a regression fails the test
rather than interrupting pytest."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import mambago
from conftest import case_dir

TIMEOUT_S = 120
ROOT = Path(__file__).resolve().parent.parent


# Each script is a user's process pressing Ctrl-C, so it takes SIGINT as
# Python's default handler does. A process started with SIGINT ignored (a
# background job of a shell without job control, as some CI runners start
# tests) inherits that, and then no Ctrl-C reaches any Python code.
DEFAULT_CTRL_C = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"


def run(tmp_path, body, **names):
    script = tmp_path / "script.py"
    names = {"case": case_dir("base"), **names}
    script.write_text(DEFAULT_CTRL_C + "".join(f"{k} = {v!r}\n" for k, v in names.items()) + textwrap.dedent(body))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=TIMEOUT_S,
                          cwd=tmp_path)
    assert proc.returncode == 0, f"script failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("device,dtype", [
    ("cpu", None),
    pytest.param("cuda", "bfloat16", marks=pytest.mark.skipif(
        not mambago.cuda_is_available(), reason=f"no GPU: {mambago.cuda_unavailable_reason()}")),
])
def test_ctrl_c_stops_generate(tmp_path, device, dtype):
    out = run(tmp_path, """
        import json, os, signal, threading, time
        import numpy as np, mambago

        m = mambago.Model.from_pretrained(case, device=device, dtype=dtype)
        rng = np.random.default_rng()
        ids = rng.integers(0, m.config.vocab_size, size=(2, 9))
        t0 = time.perf_counter()
        m.generate(ids, 300)
        per_token = (time.perf_counter() - t0) / 300
        n = int(min(2 * 10**7, max(10**6, 200 / per_token)))  # minutes of tokens
        want = m.generate(ids, 50, temperature=0.9, top_k=20, seed=5)
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        t0 = time.perf_counter()
        try:
            m.generate(ids[:1], n, temperature=0.9, seed=1)
            raised = False
        except KeyboardInterrupt:
            raised = True
        took = time.perf_counter() - t0
        after = m.generate(ids, 50, temperature=0.9, top_k=20, seed=5)
        # Ctrl-C pressed thrice: the later ones land while the first waits
        # for the call to stop, or after it is raised (taken here).
        for delay in (0.3, 0.3001, 0.3003):
            threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            m.generate(ids[:1], n, temperature=0.9, seed=2)
            raised_twice = False
        except KeyboardInterrupt:
            raised_twice = True
        end = time.perf_counter() + 0.5
        while time.perf_counter() < end:
            try:
                time.sleep(0.01)
            except KeyboardInterrupt:
                pass
        after_twice = m.generate(ids, 50, temperature=0.9, top_k=20, seed=5)
        # Off the main thread the call runs in place and is not stopped.
        box = {}
        t = threading.Thread(target=lambda: box.update(v=m.generate(ids, 50, temperature=0.9, top_k=20, seed=5)))
        t.start(); t.join()
        print(json.dumps({"raised": raised, "took": took, "whole": per_token * n,
                          "same_after": bool(np.array_equal(after, want)), "raised_twice": raised_twice,
                          "same_after_twice": bool(np.array_equal(after_twice, want)),
                          "same_in_thread": bool(np.array_equal(box["v"], want))}))
    """, device=device, dtype=dtype)
    assert out["raised"], "no KeyboardInterrupt reached the caller"
    assert out["whole"] > 60, f"the generation would take only {out['whole']:.0f} s: the case tests nothing"
    assert out["took"] < 10, f"KeyboardInterrupt came {out['took']:.1f} s after the call began (signal at 0.5 s)"
    assert out["same_after"], "the model's next generation differs from before the interrupt"
    assert out["same_in_thread"], "a generation off the main thread differs"
    assert out["raised_twice"] and out["same_after_twice"], "after Ctrl-C twice: " + json.dumps(out)


def test_ctrl_c_on_another_thread_stops_generate(tmp_path):
    """A SIGINT that the kernel hands to a thread other than the main one
    (one of Go's, or the worker's) still stops generate: Python runs its
    handler only on the main thread, which must wake from its wait to do
    so. Sent here with pthread_kill to a timer thread, so it always lands
    off the main thread."""
    out = run(tmp_path, """
        import json, signal, threading, time
        import numpy as np, mambago

        m = mambago.Model.from_pretrained(case, device="cpu")
        ids = np.random.default_rng().integers(0, m.config.vocab_size, size=(1, 9))
        t0 = time.perf_counter()
        m.generate(ids, 300)
        per_token = (time.perf_counter() - t0) / 300
        n = int(min(2 * 10**7, max(10**6, 200 / per_token)))  # minutes of tokens
        threading.Timer(0.5, lambda: signal.pthread_kill(threading.get_ident(), signal.SIGINT)).start()
        t0 = time.perf_counter()
        try:
            m.generate(ids, n, temperature=0.9, seed=1)
            raised = False
        except KeyboardInterrupt:
            raised = True
        print(json.dumps({"raised": raised, "took": time.perf_counter() - t0, "whole": per_token * n}))
    """)
    assert out["raised"], "no KeyboardInterrupt reached the caller"
    assert out["whole"] > 60, f"the generation would take only {out['whole']:.0f} s: the case tests nothing"
    assert out["took"] < 10, f"KeyboardInterrupt came {out['took']:.1f} s after the call began (signal at 0.5 s)"


def test_ctrl_c_stops_a_long_cpu_prefill(tmp_path):
    out = run(tmp_path, """
        import json, os, signal, threading, time
        import numpy as np, mambago

        m = mambago.Model.from_pretrained(case, device="cpu")
        rng = np.random.default_rng()
        V, L = m.config.vocab_size, m.config.num_hidden_layers
        probe = rng.integers(0, V, size=(1, 100_000))
        t0 = time.perf_counter()
        m.prefill(probe)
        per_position = (time.perf_counter() - t0) / probe.size
        # half a minute of positions or more (a fast CPU, 1 µs a position, had
        # hit a cap of 2e7 at 19.6 s: the cap is 1e8 now, 400 MB of ids)
        T = int(min(10**8, max(10**6, 30 / per_position)))
        ids = rng.integers(0, V, size=(1, T), dtype=np.int32)
        st = m.new_state(1)
        m.prefill(rng.integers(0, V, size=(1, 9)), state=st)
        before = st.copy()
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        t0 = time.perf_counter()
        try:
            m.prefill(ids, state=st)
            raised = False
        except KeyboardInterrupt:
            raised = True
        took = time.perf_counter() - t0
        kept = all(np.array_equal(st.ssm_state(l), before.ssm_state(l)) and
                   np.array_equal(st.conv_state(l), before.conv_state(l)) for l in range(L))
        nxt = rng.integers(0, V, size=(1, 5))
        same_after = np.array_equal(m.prefill(nxt, state=st), m.prefill(nxt, state=before))
        print(json.dumps({"raised": raised, "took": took, "whole": per_position * T, "kept": kept,
                          "same_after": bool(same_after)}))
    """)
    assert out["raised"], "no KeyboardInterrupt reached the caller"
    assert out["whole"] > 20, f"the prefill would take only {out['whole']:.0f} s: the case tests nothing"
    assert out["took"] < 10, f"KeyboardInterrupt came {out['took']:.1f} s after the call began (signal at 0.5 s)"
    assert out["kept"], "the interrupted prefill changed the state"
    assert out["same_after"], "the state does not continue as its copy from before the prefill"


@pytest.mark.parametrize("to_thread", [False, True], ids=["to_process", "to_another_thread"])
def test_ctrl_c_leaves_a_load(tmp_path, to_thread):
    """Ctrl-C during from_pretrained raises at once, though a load cannot
    stop part way (reading the checkpoint, or on the GPU compiling the
    kernels): the load finishes alone and its model is freed, and the next
    load works. The SIGINT goes to the process, or (pthread_kill) to a
    thread other than the main one, which the main thread must wake for."""
    out = run(tmp_path, """
        import json, os, signal, sys, threading, time
        sys.path.insert(0, bench)
        import mambago, random_checkpoint
        from mambago import _native

        random_checkpoint.write("ckpt", 768, 24)  # 130m-shaped: 640 MB of float32
        open_models = lambda: json.loads(_native.call(_native.bindings.OpenHandles))["models"]

        def timed_load():
            t0 = time.perf_counter()
            mambago.Model.from_pretrained("ckpt", device="cpu").close()
            return time.perf_counter() - t0

        # The first loads also pay one-time costs (BLAS, the runtime's threads)
        # and fault in the memory that later loads reuse: on this VM a later
        # load has run over 16x faster than the second and third.
        timed_load(), timed_load()
        whole = min(timed_load() for _ in range(3))
        base = open_models()
        # The signal must land inside the load: a load that ends before it is
        # tried again with the signal earlier, and no timer outlives its try.
        for delay in (whole / 4, whole / 8, whole / 16, whole / 32, whole / 64):
            timer = threading.Timer(delay, lambda: signal.pthread_kill(threading.get_ident(), signal.SIGINT)
                                    if to_thread else os.kill(os.getpid(), signal.SIGINT))
            timer.start()
            t0 = time.perf_counter()
            try:
                try:
                    loaded = mambago.Model.from_pretrained("ckpt", device="cpu")
                finally:
                    timer.cancel()
            except KeyboardInterrupt:
                raised = True
                break
            raised = False
            loaded.close()
        took = time.perf_counter() - t0
        during = open_models()
        # The abandoned load runs on to its end on its thread, which frees its model before it exits.
        for t in threading.enumerate():
            if t.name == "mambago-load":
                t.join(60)
        m = mambago.Model.from_pretrained("ckpt", device="cpu")
        print(json.dumps({"raised": raised, "took": took, "delay": delay, "whole": whole, "during": during,
                          "base": base, "after": open_models() - 1, "works": m.prefill([[1, 2, 3]]).shape[-1]}))
    """, bench=str(ROOT / "bench"), to_thread=to_thread)
    assert out["raised"], "no KeyboardInterrupt reached the caller"
    assert out["took"] < out["delay"] + 0.5 * (out["whole"] - out["delay"]), \
        f"KeyboardInterrupt came {out['took']:.2f} s into a load of {out['whole']:.2f} s (signal at {out['delay']:.2f} s)"
    assert out["after"] == out["base"], "the abandoned load's model was not freed"
    assert out["works"] == 768


def test_ctrl_c_during_a_collection_is_not_lost(monkeypatch):
    """A KeyboardInterrupt that lands while a State is freed by garbage
    collection (Python drops any exception leaving __del__) still reaches the
    main thread once __del__ has returned, and the state is freed."""
    import time
    from mambago import model as model_module
    m = mambago.Model.from_pretrained(case_dir("base"), device="cpu")
    freed = []
    free = model_module._b.FreeState

    def free_then_ctrl_c(h):
        free(h)
        freed.append(h)
        raise KeyboardInterrupt

    monkeypatch.setattr(model_module._b, "FreeState", free_then_ctrl_c)
    st = m.new_state(1)
    with pytest.raises(KeyboardInterrupt):
        del st
        for _ in range(100):  # it comes once the thread that re-delivers it gets the GIL
            time.sleep(0.01)
    assert len(freed) == 1
