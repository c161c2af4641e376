"""What a token of generation costs a caller on the GPU: the decode step
eager (`model.step`), as a replayed step graph (`graph.step`), and inside
`model.generate`, on random models in bf16 (and f32 where asked).

    python3 bench/generate_speed.py --shapes 130m,1.4b --batches 1,8 --out gen.json

Every figure is host wall time around calls that return their results to the
host (logits or tokens), which is what a caller waits for; the medians of
--repeats runs:
- step_eager_us, step_graph_us: one call, over --steps calls a run;
- capture_ms: `model.capture_step(state)` once (a new state each run);
- generate_us_per_token: (generate(n) - generate(1)) / (n - 1), greedy,
  no EOS, n = --new-tokens, so the prefill and the first token cancel;
  sampled_k50_us_per_token and sampled_p95_us_per_token likewise, sampling
  at temperature 0.8 from the 50 best tokens, or from the nucleus of 0.95;
  penalty_us_per_token likewise, greedy under repetition_penalty=1.2 (on
  the device before each queued step's pick, from 86c1eea; before it, each
  step's logits came to the host, where the draw was made);
- bad_words_us_per_token likewise, greedy under bad_words_ids (two
  sequences; on the device before each queued step's pick from 024c76e,
  before it on the host), ngram_us_per_token greedy under
  no_repeat_ngram_size=3 (on the device from its branch `devgrams`),
  minp_us_per_token sampling from the 50 best under min_p=0.05 (drawn on
  the device from `devgrams` too, on the host before),
  minp_nucleus_us_per_token sampling from the whole row under min_p=0.05
  (no top_k: drawn from the nucleus on the device from its branch
  `devminp`, on the host before), and
  typical_us_per_token sampling at temperature 0.8 under typical_p=0.9:
  each step's logits come to the host, where the warpers run and the draw
  is made; typical_k50_us_per_token the same from the 50 best
  (transformers' default top_k): from its branch `warpk` the device ranks
  them and the warpers cut only those on the host;
  typical_penalty_us_per_token the same under repetition_penalty=1.2 and
  k2000_penalty_us_per_token sampling from the 2,000 best under it (past
  the device's queued draw, 1,024): from branch `warpproc` the device
  processes the logits before it ranks the k best, before it whole rows
  came to the host;
- stop_us_per_token likewise, greedy under a stop string of 12 bytes that
  never fires, read through a byte-level tokenizer of the model's whole
  vocabulary (random words; made here, with no download): the match runs
  in the engine on each step's tokens, and nothing else changes;
- beam_us_per_step: beam search with --beams beams (model.beam_search, no
  EOS, so every call runs its n steps) likewise: a step of B·beams
  sequences, their logits on the host for the search, the states reordered
  on the device; beam_sampled_us_per_step likewise with do_sample
  (temperature 0.8, top_k 50: each row's top_k ranked on the device from
  e6f98a3, whole rows on the host before it);
  beam_typical_us_per_step the same under typical_p=0.9 (from `warpk`,
  the top_k ranked on the device as without it, before it whole rows);
  beam_ngram_us_per_step likewise under no_repeat_ngram_size=3 (each row's
  log probabilities processed and ranked on the device from its branch
  `devbeams`; before it, every row's whole logits on the host).
The JSON goes to --out and a markdown table to stdout.
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import random_checkpoint  # noqa: E402


def wall(fn, repeats, calls=1):
    """Median wall seconds of one call of fn over repeats runs of calls calls."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times)


def byte_level_tokenizer(V, seed=0):
    """A tokenizers.Tokenizer of V tokens with GPT-2's byte-level decoder:
    the 256 bytes' characters, then random words of 2 to 6 of them (no
    merges: it reads its texts, which is what stop strings need of it)."""
    from tokenizers import Tokenizer, decoders, models

    rng = np.random.default_rng(seed)
    chars = [chr(c) for c in (*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                              *range(ord("®"), ord("ÿ") + 1), *range(256, 256 + 68))]
    vocab = {c: i for i, c in enumerate(chars)}
    while len(vocab) < V:
        vocab.setdefault("".join(rng.choice(chars[:94], size=int(rng.integers(2, 7)))), len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.decoder = decoders.ByteLevel()
    return tok


def measure(mambago, shape, dtype, B, a):
    """One row: the step eager and as a graph, the capture, and generate's per-token cost."""
    model = mambago.Model.from_pretrained(random_checkpoint.cached(shape), device="cuda", dtype=dtype)
    try:
        rng = np.random.default_rng()
        V = model.config.vocab_size
        prompt = rng.integers(0, V, size=(B, a.prompt))
        model.reserve(B, a.prompt)
        state = model.new_state(B)
        model.prefill(prompt, state=state)
        ids = rng.integers(0, V, size=B)
        eager = wall(lambda: model.step(ids, state), a.repeats, a.steps)

        def capture():
            s = model.new_state(B)
            t0 = time.perf_counter()
            g = model.capture_step(s)
            took = time.perf_counter() - t0
            g.close()
            s.close()
            return took

        capture()  # the first capture in a process also loads what graphs need
        cap = statistics.median(capture() for _ in range(a.repeats))
        graph = model.capture_step(state)
        replay = wall(lambda: graph.step(ids), a.repeats, a.steps)
        graph.close()
        state.close()

        def per_token(**sampling):
            def gen(n):
                return lambda: model.generate(prompt, max_new_tokens=n, eos_token_id=None, seed=0, **sampling)

            gen(a.new_tokens)()  # warm-up: workspace and GEMM plans at this batch
            return (wall(gen(a.new_tokens), a.repeats) - wall(gen(1), a.repeats)) / (a.new_tokens - 1) * 1e6

        def per_beam_step(**sampling):
            def beam_step(n):
                return lambda: model.beam_search(prompt, n, a.beams, seed=0, **sampling)

            beam_step(a.new_tokens)()
            return (wall(beam_step(a.new_tokens), a.repeats) - wall(beam_step(1), a.repeats)) / (a.new_tokens - 1) * 1e6
        return {"shape": shape, "dtype": dtype, "B": B, "prompt": a.prompt, "generate_new_tokens": a.new_tokens,
                "step_eager_us": eager * 1e6, "step_graph_us": replay * 1e6, "capture_ms": cap * 1e3,
                "generate_us_per_token": per_token(),
                "sampled_k50_us_per_token": per_token(temperature=0.8, top_k=50),
                "sampled_p95_us_per_token": per_token(temperature=0.8, top_p=0.95),
                "penalty_us_per_token": per_token(repetition_penalty=1.2),
                "bad_words_us_per_token": per_token(bad_words_ids=[[1, 2], [3]]),
                "ngram_us_per_token": per_token(no_repeat_ngram_size=3),
                "minp_us_per_token": per_token(temperature=0.8, top_k=50, min_p=0.05),
                "minp_nucleus_us_per_token": per_token(temperature=0.8, min_p=0.05),
                "stop_us_per_token": per_token(stop_strings=["\x00\x01\x02 never \x03"],
                                               tokenizer=byte_level_tokenizer(V)),
                "typical_us_per_token": per_token(temperature=0.8, typical_p=0.9),
                "typical_k50_us_per_token": per_token(temperature=0.8, top_k=50, typical_p=0.9),
                "typical_penalty_us_per_token": per_token(temperature=0.8, top_k=50, typical_p=0.9,
                                                          repetition_penalty=1.2),
                "k2000_penalty_us_per_token": per_token(temperature=0.8, top_k=2000, repetition_penalty=1.2),
                "beams": a.beams,
                "beam_us_per_step": per_beam_step(),
                "beam_sampled_us_per_step": per_beam_step(do_sample=True, temperature=0.8, top_k=50),
                "beam_typical_us_per_step": per_beam_step(do_sample=True, temperature=0.8, top_k=50, typical_p=0.9),
                "beam_ngram_us_per_step": per_beam_step(no_repeat_ngram_size=3)}
    finally:
        model.close()


def main():
    """Parse the arguments, measure every row, write the JSON and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="130m,1.4b", type=lambda v: v.split(","))
    p.add_argument("--dtypes", default="bfloat16", type=lambda v: v.split(","))
    p.add_argument("--batches", default="1,8", type=lambda v: [int(x) for x in v.split(",")])
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--new-tokens", type=int, default=129)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--beams", type=int, default=4, help="beam search's beams (beam_us_per_step)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    import mambago

    rows = []
    print(f"| shape | dtype | B | step eager µs | step graph µs | eager/graph | capture ms | generate µs/token: greedy | top-k 50 | top-p 0.95 | greedy, penalty 1.2 | greedy, bad words | greedy, 3-grams | top-k 50, min_p 0.05 | min_p 0.05 | greedy, stop string | typical_p 0.9 | top-k 50, typical_p 0.9 | the same, penalty 1.2 | top-k 2000, penalty 1.2 | beam search µs/step ({a.beams} beams) | beam sampling µs/step | beam sampling, typical_p 0.9 | beam search, 3-grams µs/step |")
    print("|---" * 24 + "|")
    for shape in a.shapes:
        for dtype in a.dtypes:
            for B in a.batches:
                r = measure(mambago, shape, dtype, B, a)
                rows.append(r)
                print(f"| {shape} | {dtype} | {B} | {r['step_eager_us']:.0f} | {r['step_graph_us']:.0f} | "
                      f"{r['step_eager_us'] / r['step_graph_us']:.2f} | {r['capture_ms']:.2f} | "
                      f"{r['generate_us_per_token']:.0f} | {r['sampled_k50_us_per_token']:.0f} | "
                      f"{r['sampled_p95_us_per_token']:.0f} | {r['penalty_us_per_token']:.0f} | "
                      f"{r['bad_words_us_per_token']:.0f} | {r['ngram_us_per_token']:.0f} | "
                      f"{r['minp_us_per_token']:.0f} | {r['minp_nucleus_us_per_token']:.0f} | "
                      f"{r['stop_us_per_token']:.0f} | "
                      f"{r['typical_us_per_token']:.0f} | {r['typical_k50_us_per_token']:.0f} | "
                      f"{r['typical_penalty_us_per_token']:.0f} | {r['k2000_penalty_us_per_token']:.0f} | "
                      f"{r['beam_us_per_step']:.0f} | {r['beam_sampled_us_per_step']:.0f} | "
                      f"{r['beam_typical_us_per_step']:.0f} | "
                      f"{r['beam_ngram_us_per_step']:.0f} |",
                      flush=True)
    with open(a.out, "w") as f:
        json.dump({"rows": rows, "args": vars(a)}, f, indent=1)


if __name__ == "__main__":
    main()
