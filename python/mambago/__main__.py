"""Command line: python -m mambago {info,run,bench} MODEL ...

  info MODEL                         the model's configuration and engine
  run MODEL --prompt-ids 1,2,3       prefill the prompt, generate, print tokens and timing
  run MODEL --prompt "Mamba is"      the same from text, through the checkpoint's tokenizer.json
  bench MODEL                        prefill tokens/s over prompt lengths
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from . import __version__
from .model import Model, _hub_options, _hub_snapshot


def _ids(text: str) -> list[list[int]]:
    """Prompts "1,2,3;4,5" as rows of token ids."""
    try:
        rows = [[int(t) for t in row.replace(" ", "").split(",") if t] for row in text.split(";")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--prompt-ids wants comma-separated integers (rows split by ';'), got {text!r}") from None
    if not rows or any(not r for r in rows):
        raise argparse.ArgumentTypeError("--prompt-ids rows must be non-empty")
    if any(not -2**63 <= t < 2**63 for r in rows for t in r):
        raise argparse.ArgumentTypeError(f"--prompt-ids holds an id outside the int64 range: {text!r}")
    return rows


def _batch(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray | None]:
    """Rows of token ids as int64 ids [B, T], left-padded with 0 where rows
    differ in length, and their attention mask (None when none is padded)."""
    T = max(len(r) for r in rows)
    ids = np.zeros((len(rows), T), dtype=np.int64)
    mask = np.zeros((len(rows), T), dtype=np.int64)
    for b, r in enumerate(rows):
        ids[b, T - len(r):], mask[b, T - len(r):] = r, 1
    return ids, (None if mask.all() else mask)


def _tokenizer(model: str, revision: str | None = None):
    """The tokenizer of the checkpoint model names: its tokenizer.json (in
    the folder, or fetched from the Hugging Face Hub as the weights are, at
    revision where given), read by the tokenizers package."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ValueError("--prompt needs the tokenizers package to read the checkpoint's tokenizer.json "
                         "(pip install tokenizers); --prompt-ids takes token ids without it") from None
    folder = model if os.path.isdir(model) else _hub_snapshot(model, ["tokenizer.json"], _hub_options(revision))
    path = os.path.join(folder, "tokenizer.json")
    if not os.path.exists(path):
        raise ValueError(f"--prompt needs the checkpoint's tokenizer.json, and {model} has none; "
                         "--prompt-ids takes token ids instead")
    return Tokenizer.from_file(path)


def _ints(text: str) -> list[int]:
    """A comma-separated list of positive integers (bench's --lengths and --batch)."""
    try:
        ints = [int(t) for t in text.split(",") if t]
    except ValueError:
        raise argparse.ArgumentTypeError(f"want comma-separated integers, got {text!r}") from None
    if not ints or min(ints) < 1:
        raise argparse.ArgumentTypeError(f"want comma-separated integers of at least 1, got {text!r}")
    return ints


def _positive(text: str) -> int:
    """An integer of at least 1 (--repeats, --num-beams)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"want an integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"want an integer of at least 1, got {text!r}")
    return n


def _load(args) -> Model:
    t0 = time.perf_counter()
    print(f"loading {args.model} (device={args.device}) ...", file=sys.stderr, flush=True)
    m = Model.from_pretrained(args.model, device=args.device, dtype=args.dtype, blas=args.blas, revision=args.revision)
    print(f"loaded {m} in {time.perf_counter() - t0:.2f} s", file=sys.stderr, flush=True)
    return m


class _TextStream:
    """A generate streamer that prints one sequence's text as it comes: the
    prompt, then each token's text once it decodes to whole characters."""

    def __init__(self, tok, label: str):
        self.tok, self.label, self.ids, self.shown = tok, label, [], ""

    def put(self, value) -> None:
        """Take the prompt [1, T], then each new token [1]; print the new text."""
        self.ids.extend(int(t) for t in np.asarray(value).reshape(-1))
        text = self.tok.decode(self.ids, skip_special_tokens=True)
        if not self.shown:
            print(self.label, end="")
        if text.endswith("\ufffd"):  # a character's bytes split over tokens: wait for the rest
            return
        print(text[len(self.shown):], end="", flush=True)
        self.shown = text

    def end(self) -> None:
        """End the line, with whatever text is left."""
        text = self.tok.decode(self.ids, skip_special_tokens=True)
        print(text[len(self.shown):], flush=True)


def cmd_info(args) -> int:
    """Print the model's configuration, device and backend as JSON."""
    m = _load(args)
    info = {"mambago": __version__, "device": m.device, "device_index": m.device_index, "dtype": m.dtype,
            "backend": m.backend, "config": m.config.__dict__}
    print(json.dumps(info, indent=2))
    return 0


def cmd_run(args) -> int:
    """Prefill the prompt, generate, and print the tokens and timings."""
    tok = None
    if args.prompt is not None:  # before the load, which may take a while
        tok = _tokenizer(args.model, args.revision)
        rows = [tok.encode(text).ids for text in args.prompt]
        if any(not r for r in rows):
            raise ValueError("--prompt encodes to no tokens: give it some text")
    else:
        rows = args.prompt_ids
    m = _load(args)
    ids, mask = _batch(rows)
    B, T = ids.shape
    tokens = B * T if mask is None else int(mask.sum())
    t0 = time.perf_counter()
    hidden = m.prefill(ids, output="last", attention_mask=mask)
    t_prefill = time.perf_counter() - t0
    t0 = time.perf_counter()
    if args.eos_token_id is None:  # the config's, as transformers' generate stops by default
        eos = [] if m.config.eos_token_id is None else [m.config.eos_token_id, *m.config.more_eos_token_ids]
    else:
        eos = [] if args.eos_token_id < 0 else args.eos_token_id
    processors = dict(repetition_penalty=args.repetition_penalty, min_new_tokens=args.min_new_tokens,
                      no_repeat_ngram_size=args.no_repeat_ngram_size)
    if args.stop:  # read as text through the checkpoint's tokenizer
        processors.update(stop_strings=args.stop, tokenizer=tok if tok is not None else _tokenizer(args.model, args.revision))
    stream = None
    if args.num_beams > 1:  # each row's best beam; with --temperature, beam sampling
        sample = {} if args.temperature == 0 else dict(
            do_sample=True, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
            seed=args.seed)
        out = m.beam_search(ids, args.max_new_tokens, args.num_beams, length_penalty=args.length_penalty,
                            eos_token_id=eos, attention_mask=mask, **processors, **sample).tokens
    else:
        # One text prompt prints as it is generated; several print at the end.
        stream = _TextStream(tok, "text[0]:      ") if tok is not None and B == 1 else None
        out = m.generate(ids, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                         top_p=args.top_p, min_p=args.min_p, seed=args.seed, eos_token_id=eos, attention_mask=mask,
                         streamer=stream, **processors)
    t_gen = time.perf_counter() - t0
    for b in range(B):
        prompt = ids[b] if mask is None else ids[b, mask[b] == 1]
        print(f"prompt[{b}]:    {' '.join(map(str, prompt))}")
        print(f"generated[{b}]: {' '.join(map(str, out[b]))}")
        if tok is not None and stream is None:
            print(f"text[{b}]:      {tok.decode([int(t) for t in (*prompt, *out[b])], skip_special_tokens=True)}")
    n = out.shape[1]
    shape = f"B={B} T={T}" if mask is None else f"B={B} T={T} ({tokens} tokens, rows left-padded)"
    print(f"prefill: {shape} in {t_prefill * 1e3:.2f} ms ({tokens / t_prefill:,.0f} tok/s); "
          f"last hidden norm {np.linalg.norm(hidden, axis=-1).round(3).tolist()}")
    if n:
        print(f"generate: {n} new tokens per row in {t_gen * 1e3:.2f} ms "
              f"(prefill + {n - 1} steps; {B * n / t_gen:,.0f} tok/s)")
    return 0


def cmd_bench(args) -> int:
    """Time prefill over batch sizes and prompt lengths; print a table (and JSON with --json)."""
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        raise ValueError(f"--json {args.json}: its folder does not exist")  # before the timing, not after it
    m = _load(args)
    rng = np.random.default_rng(args.seed)
    rows = []
    print(f"{'B':>3} {'T':>6} {'median ms':>10} {'tok/s':>12}   (median of {args.repeats} after 1 warm-up)")
    for B in args.batch:
        for T in args.lengths:
            ids = rng.integers(0, m.config.vocab_size, size=(B, T), dtype=np.int64)
            m.prefill(ids)  # warm-up
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                m.prefill(ids)
                times.append(time.perf_counter() - t0)
            ms = statistics.median(times) * 1e3
            rows.append({"B": B, "T": T, "ms": ms, "tok_s": B * T / (ms / 1e3), "times_ms": [t * 1e3 for t in times]})
            print(f"{B:>3} {T:>6} {ms:>10.2f} {B * T / (ms / 1e3):>12,.0f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "device": m.device, "config": m.config.__dict__, "rows": rows}, f, indent=2)
    return 0


def main(argv=None) -> int:
    """Entry point of `python -m mambago` and the `mambago` script; returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m mambago", description="Mamba-1 inference from PyTorch checkpoints.")
    p.add_argument("--version", action="version", version=f"mambago {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp):
        """Add the arguments every subcommand takes."""
        sp.add_argument("model", help="checkpoint folder (config.json + safetensors, or pytorch_model.bin with torch "
                        "installed), or a Hugging Face Hub id (downloaded with huggingface_hub)")
        sp.add_argument("--revision", default=None, help="a Hub id's branch, tag or commit (default: its main branch)")
        sp.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
        sp.add_argument("--dtype", default=None, help="float32 (default), bfloat16 or float16")
        sp.add_argument("--blas", default="auto", help="CPU GEMMs: auto (the engine's own with AVX2, else numpy's OpenBLAS), go, or a library path")

    sp = sub.add_parser("info", help="print the model's configuration")
    common(sp)
    sp.set_defaults(fn=cmd_info)

    sp = sub.add_parser("run", help="prefill a prompt and generate")
    common(sp)
    prompt = sp.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt-ids", type=_ids, help="token ids, e.g. 1,2,3 (rows split by ';'; rows may differ in length)")
    prompt.add_argument("--prompt", action="append", metavar="TEXT",
                        help="a text prompt, through the checkpoint's tokenizer.json (needs the tokenizers package); "
                             "repeat it for more rows, which may differ in length")
    sp.add_argument("--max-new-tokens", type=int, default=16)
    sp.add_argument("--temperature", type=float, default=0.0)
    sp.add_argument("--top-k", type=int, default=0)
    sp.add_argument("--top-p", type=float, default=1.0)
    sp.add_argument("--min-p", type=float, default=0.0,
                    help="when sampling, keep tokens at least this many times as likely as the best (default 0)")
    sp.add_argument("--seed", type=int, default=None)
    sp.add_argument("--min-new-tokens", type=int, default=0,
                    help="no row stops at eos before this many new tokens (default 0)")
    sp.add_argument("--no-repeat-ngram-size", type=int, default=0,
                    help="no row repeats an n-gram of its tokens of this size (default 0, none)")
    sp.add_argument("--repetition-penalty", type=float, default=1.0,
                    help="transformers' repetition_penalty: above 1, tokens already in the row are less likely (default 1, none)")
    sp.add_argument("--num-beams", type=_positive, default=1,
                    help="above 1, beam search with this many beams (transformers'), printing each row's best beam, "
                         "or beam sampling with --temperature (default 1: greedy, or sampling with --temperature)")
    sp.add_argument("--length-penalty", type=float, default=1.0,
                    help="beam search: a finished beam scores its log probability over its length to this power (default 1)")
    sp.add_argument("--eos-token-id", type=int, default=None,
                    help="a row stops after this token (default: the config's eos ids; -1: none)")
    sp.add_argument("--stop", action="append", metavar="TEXT",
                    help="a row stops at the token that completes this text (transformers' stop_strings; "
                         "repeat for more; needs the checkpoint's tokenizer.json)")
    sp.set_defaults(fn=cmd_run)

    sp = sub.add_parser("bench", help="prefill tokens/s over prompt lengths")
    common(sp)
    sp.add_argument("--lengths", type=_ints, default=[128, 512, 2048], help="prompt lengths T (default 128,512,2048)")
    sp.add_argument("--batch", type=_ints, default=[1], help="batch sizes B (default 1)")
    sp.add_argument("--repeats", type=_positive, default=5, help="timed prefills per shape (default 5)")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--json", default=None, help="also write the results to this JSON file")
    sp.set_defaults(fn=cmd_bench)

    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except (ValueError, TypeError, MemoryError, OSError) as exc:
        print(f"mambago: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mambago: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
