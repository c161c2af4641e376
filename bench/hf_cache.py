"""Times a hand-written greedy decoding loop through mambago.hf's forward
call, as scripts written for transformers run one:

  - cache: the prompt once, then model(next, cache=out.cache) a token
    (Model.step on the host; on the GPU Model.step_ptr, eager for the
    state's first 7 steps, then a kept step graph);
  - no_cache: the whole sequence again each token, with logits_to_keep=1
    (what such a script had to do before mambago.hf kept caches);
  - generate: the engine's own loop (Model.generate), its prompt's prefill
    taken out: (time of new tokens - time of 1) / (new - 1);
  - with --hf, transformers' own loop with its cache (the same weights).

Inputs are numpy arrays on the CPU engine, and CUDA tensors on the GPU
(--device cuda), where nothing waits for the host until the loop ends.
Prints a JSON line per way: the median ms a new token over --repeats runs,
after a warm-up run.

Usage: python bench/hf_cache.py CHECKPOINT [--device cpu|cuda] [--dtype bfloat16]
       [--B 1] [--T 512] [--new 64] [--repeats 5] [--hf]
"""

import argparse
import copy
import inspect
import json
import statistics
import time

import numpy as np

import mambago
from mambago.hf import MambaForCausalLM


def timed(run, repeats, sync):
    """run()'s seconds, median over repeats after a warm-up, and each run's."""
    run()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None)
    p.add_argument("--B", type=int, default=1)
    p.add_argument("--T", type=int, default=512)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--hf", action="store_true", help="also time transformers' loop (needs torch and transformers)")
    a = p.parse_args()
    m = MambaForCausalLM.from_pretrained(a.checkpoint, device=a.device, dtype=a.dtype)
    ids = np.random.default_rng(0).integers(1, m.config.vocab_size, size=(a.B, a.T))
    sync = lambda: None  # noqa: E731
    if a.device.startswith("cuda"):
        import torch

        ids = torch.from_numpy(ids).to(a.device)
        sync = torch.cuda.synchronize
    prompt = m(ids)

    def cache():
        state, tokens = prompt.cache.copy(), ids[:, -1:]
        for _ in range(a.new):
            tokens = m(tokens, cache=state).logits[:, -1:].argmax(-1)

    def no_cache():
        seq = ids
        for _ in range(a.new):
            nxt = m(seq, use_cache=False, logits_to_keep=1).logits.argmax(-1)
            seq = np.concatenate([seq, nxt], axis=1) if isinstance(seq, np.ndarray) else torch.cat([seq, nxt], 1)

    ways = {"cache": (cache, a.new), "no_cache": (no_cache, a.new)}
    if a.hf:
        import torch
        import transformers

        hf = transformers.MambaForCausalLM.from_pretrained(a.checkpoint, dtype=getattr(torch, a.dtype or "float32"))
        hf = hf.to(a.device).eval()
        t_ids = torch.as_tensor(ids).to(a.device)
        with torch.no_grad():
            hf_prompt = hf(t_ids, use_cache=True)

        # transformers 5.17 names the cache cache_params (and wants each
        # step's cache_position); later releases name it cache.
        params = inspect.signature(hf.forward).parameters
        key = "cache" if "cache" in params else "cache_params"
        T = t_ids.shape[1]

        def hf_cache():
            state, tokens = copy.deepcopy(getattr(hf_prompt, key)), t_ids[:, -1:]
            with torch.no_grad():
                for i in range(a.new):
                    step = {key: state, "use_cache": True}
                    if "cache_position" in params:
                        step["cache_position"] = torch.tensor([T + i], device=t_ids.device)
                    tokens = hf(tokens, **step).logits[:, -1:].argmax(-1)

        ways["transformers_cache"] = (hf_cache, a.new)
    host_ids = ids if isinstance(ids, np.ndarray) else ids.cpu().numpy()
    one, _ = timed(lambda: m.model.generate(host_ids, 1), a.repeats, sync)
    rows = []
    for name, (run, n) in ways.items():
        t, times = timed(run, a.repeats, sync)
        rows.append({"way": name, "ms_per_token": 1e3 * t / n, "runs_ms_per_token": [1e3 * x / n for x in times]})
    t, times = timed(lambda: m.model.generate(host_ids, a.new), a.repeats, sync)
    rows.append({"way": "generate", "ms_per_token": 1e3 * (t - one) / (a.new - 1),
                 "runs_ms_per_token": [1e3 * (x - one) / (a.new - 1) for x in times]})
    for r in rows:
        r.update(device=a.device, dtype=m.model.dtype, B=a.B, T=a.T, new=a.new, mambago=mambago.__version__)
        r["ms_per_token"] = round(r["ms_per_token"], 4)
        r["runs_ms_per_token"] = [round(x, 4) for x in r["runs_ms_per_token"]]
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
