"""CPU decode of a 130m-shaped random model: generate's time for 33 tokens
after a 16-token prompt, and one step's, at B=1 and B=8 (medians).

    python3 bench/cpu_decode.py out.json
"""
import time, sys, json, statistics
import numpy as np, mambago
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
import random_checkpoint  # noqa: E402

m = mambago.Model.from_pretrained(random_checkpoint.cached("130m"), device="cpu")
rng = np.random.default_rng(0)
out = {"mambago_backend": m.backend}
for B in (1, 8):
    ids = rng.integers(0, m.config.vocab_size, size=(B, 16))
    m.generate(ids, 4)
    ts = []
    for _ in range(3):
        t = time.perf_counter(); m.generate(ids, 33); ts.append(time.perf_counter() - t)
    # prefill of 16 + 32 steps; time the steps alone through step()
    st = m.new_state(B); m.prefill(ids, state=st)
    tok = np.ascontiguousarray(ids[:, -1])
    ss = []
    for _ in range(20):
        t = time.perf_counter(); m.step(tok, st); ss.append(time.perf_counter() - t)
    out[f"B{B}"] = {"generate_33_s": statistics.median(ts), "step_ms": statistics.median(ss) * 1e3}
    print(f"B={B}: generate 33 tokens {statistics.median(ts)*1e3:.0f} ms; step {statistics.median(ss)*1e3:.1f} ms "
          f"({B/statistics.median(ss):.1f} tok/s)", flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
