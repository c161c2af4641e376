"""A padded batch of new sequences on the CPU engine, three ways: prefill
with an attention_mask and no state (mambago.Model.StartSpans), the same
continuing a state (Model.PrefillSpans: a prefill a row length, the state's
rows copied in and out), and the batch unpadded. Wall ms, median of 3 after
one warm-up; a random 130m-shaped checkpoint at /tmp/m130
(bench/random_checkpoint.py /tmp/m130 --shape 130m).

    python3 bench/cpu_padded.py
"""

import time, numpy as np, mambago
m = mambago.Model.from_pretrained("/tmp/m130", device="cpu")
rng = np.random.default_rng(0)
for B, lo, T in [(32, 16, 256), (16, 8, 128), (8, 128, 512)]:
    lengths = rng.integers(lo, T + 1, size=B)
    mask = np.zeros((B, T), np.int64)
    for b, n in enumerate(lengths):
        mask[b, T - n:] = 1
    ids = rng.integers(0, m.config.vocab_size, size=(B, T))
    st = m.new_state(B)
    def t(fn, n=3):
        fn(); ts = []
        for _ in range(n):
            t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
        return np.median(ts) * 1e3
    one = t(lambda: m.prefill(ids, attention_mask=mask, output="mean"))
    per = t(lambda: m.prefill(ids, attention_mask=mask, output="mean", state=st))
    full = t(lambda: m.prefill(ids, output="mean"))
    print(f"B={B} T={T} lo={lo} distinct={len(set(lengths))} tokens={lengths.sum()}: one {one:.0f} ms, per length {per:.0f} ms ({per/one:.2f}x), unpadded {full:.0f} ms", flush=True)
