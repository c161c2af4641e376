"""mambago.hf.MambaForCausalLM, the stand-in for transformers' class in
inference scripts: the same numbers as mambago.Model's calls, transformers'
shapes and conventions, and, where torch and transformers are installed,
transformers' own logits and greedy tokens."""

import importlib.util
import inspect
import json
import os

import numpy as np
import pytest

import mambago
from conftest import case_dir, early_stop_pair, hf_continue, read_safetensors, rel_err, unused_id
from mambago.hf import MambaCache, MambaForCausalLM, MambaModel


def test_forward_and_generate_follow_transformers_conventions():
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    ref = mambago.Model.from_pretrained(case_dir("base"), device="cpu")
    rng = np.random.default_rng()
    ids = rng.integers(1, m.config.vocab_size, size=(2, 7))
    out = m(ids, attention_mask=np.ones_like(ids))
    assert np.array_equal(out.logits, ref.logits(ref.prefill(ids, output="all")))
    assert out["logits"] is out.logits and out.logits.shape == (2, 7, m.config.vocab_size)
    full = m.generate(ids, max_new_tokens=5)
    new = ref.generate(ids, 5, eos_token_id=ref.config.eos_token_id)
    # Fewer than 5 new tokens where both rows reach eos first (about 1 prompt in 1000).
    assert 1 <= new.shape[1] <= 5 and full.shape == (2, 7 + new.shape[1])
    assert np.array_equal(full[:, :7], ids) and np.array_equal(full[:, 7:], new)
    sampled = m.generate(ids, max_new_tokens=5, do_sample=True, temperature=0.7, top_k=10, seed=3)
    assert np.array_equal(sampled, m.generate(ids, max_new_tokens=5, do_sample=True, temperature=0.7, top_k=10,
                                              seed=3))
    emb = rng.standard_normal((1, 4, m.config.hidden_size)).astype(np.float32)
    assert np.array_equal(m(inputs_embeds=emb).logits, ref.logits(ref.prefill(inputs_embeds=emb, output="all")))
    assert m.eval() is m and m.to("cpu") is m and m.to("float32") is m


def test_num_return_sequences_samples_each_prompt_n_times():
    """num_return_sequences=n with do_sample: n rows a prompt, together,
    each the prompt and a continuation drawn on a stream of its own (the
    repeated batch's rows, which differ), reproducible for a seed, padding
    repeated with its row; greedy with n > 1 is a ValueError, as in
    transformers."""
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    rng = np.random.default_rng()
    V = m.config.vocab_size
    ids = rng.integers(1, V, size=(2, 5))
    mask = np.ones_like(ids)
    mask[1, :2] = 0
    kw = dict(max_new_tokens=12, do_sample=True, temperature=1.5, top_k=0, seed=11)
    out = m.generate(ids, attention_mask=mask, num_return_sequences=3, **kw)
    assert out.shape[0] == 6 and 5 < out.shape[1] <= 5 + 12  # shorter where every row drew eos
    assert np.array_equal(out[:3, :5], np.repeat(ids[:1], 3, axis=0)) and np.array_equal(out[3:, :5],
                                                                                          np.repeat(ids[1:], 3, axis=0))
    assert np.array_equal(out, m.generate(ids, attention_mask=mask, num_return_sequences=3, **kw))
    # The same as asking for the repeated batch directly, whose rows draw on
    # streams of their own: without eos (which this random model often
    # draws first, ending a row), a prompt's copies differ.
    assert np.array_equal(out, m.generate(np.repeat(ids, 3, axis=0), attention_mask=np.repeat(mask, 3, axis=0), **kw))
    free = m.model.generate(np.repeat(ids, 3, axis=0), 12, temperature=1.5, seed=11, attention_mask=np.repeat(mask, 3, 0))
    assert len({tuple(r) for r in free[:3]}) == 3 and len({tuple(r) for r in free[3:]}) == 3
    assert m.generate(ids[0], num_return_sequences=2, **kw).shape[0] == 2
    with pytest.raises(ValueError, match="needs do_sample=True"):
        m.generate(ids, max_new_tokens=3, num_return_sequences=2)
    with pytest.raises(ValueError, match="at least 1"):
        m.generate(ids, max_new_tokens=3, num_return_sequences=0)


def test_sampling_edges_follow_transformers():
    """With do_sample, temperature 0 is a ValueError (transformers refuses
    it too), and top_p=0 keeps only the most likely token, as transformers'
    top_p keeps at least one: greedy's tokens, its scores -inf but there.
    Where transformers is installed, its own generate gives those tokens."""
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    ids = np.random.default_rng().integers(1, m.config.vocab_size, size=(2, 6))
    with pytest.raises(ValueError, match="strictly positive"):
        m.generate(ids, max_new_tokens=3, do_sample=True, temperature=0.0)
    greedy = m.generate(ids, max_new_tokens=8)
    out = m.generate(ids, max_new_tokens=8, do_sample=True, top_p=0.0, temperature=0.7, seed=3,
                     return_dict_in_generate=True, output_scores=True)
    assert np.array_equal(out.sequences, greedy)
    assert all((np.isfinite(z).sum(axis=-1) == 1).all() for z in out.scores)
    if importlib.util.find_spec("torch") and importlib.util.find_spec("transformers"):
        torch, hf, ours, t_ids, _ = _against_transformers()
        want = hf.generate(t_ids, max_new_tokens=8, do_sample=True, top_p=0.0, pad_token_id=hf.config.pad_token_id)
        got = ours.generate(t_ids, max_new_tokens=8, do_sample=True, top_p=0.0)
        assert torch.equal(got, want)


def test_repetition_penalty_follows_transformers():
    """repetition_penalty scales the logits of each row's tokens so far
    before the draw: greedy tokens follow the penalized scores (which
    output_scores returns), a penalty of 1 changes nothing, and one that is
    not finite and > 0 is refused. Where transformers is installed, its own
    generate gives the same tokens and scores (1e-4), also for a
    left-padded batch where it leaves the padding out (transformers 5.25
    does; 5.17 counted the padding's ids too)."""
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    ids = np.random.default_rng().integers(1, m.config.vocab_size, size=(2, 6))
    assert np.array_equal(m.generate(ids, max_new_tokens=8, repetition_penalty=1.0), m.generate(ids, max_new_tokens=8))
    for by in (1.5, 0.7):
        out = m.generate(ids, max_new_tokens=8, repetition_penalty=by, eos_token_id=[],
                         return_dict_in_generate=True, output_scores=True, output_logits=True)
        for i, (z, raw) in enumerate(zip(out.scores, out.logits, strict=True)):
            assert np.array_equal(np.argmax(z, axis=-1), out.sequences[:, 6 + i])
            seen = out.sequences[:, :6 + i]
            for b in range(2):
                held = np.isin(np.arange(m.config.vocab_size), seen[b])
                assert np.array_equal(z[b, ~held], raw[b, ~held])
                r = raw[b, held]
                assert np.array_equal(z[b, held], np.where(r < 0, r * np.float32(by), r / np.float32(by)))
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="repetition_penalty"):
            m.generate(ids, max_new_tokens=3, repetition_penalty=bad)
    with pytest.raises(TypeError, match="repetition_penalty"):
        m.model.generate(ids, 3, repetition_penalty="1.2")
    if importlib.util.find_spec("torch") and importlib.util.find_spec("transformers"):
        from transformers.generation.utils import GenerationMixin

        torch, hf, ours, t_ids, left = _against_transformers()
        kw = dict(max_new_tokens=8, return_dict_in_generate=True, output_scores=True)
        leaves_out_padding = "prompt_ignore_length" in inspect.getsource(GenerationMixin._get_logits_processor)
        for mask in (None, left) if leaves_out_padding else (None,):
            for by in (1.5, 0.7):
                with torch.no_grad():
                    want = hf.generate(t_ids, attention_mask=mask, do_sample=False, repetition_penalty=by,
                                       pad_token_id=hf.config.pad_token_id, **kw)
                got = ours.generate(t_ids, attention_mask=mask, repetition_penalty=by, **kw)
                assert torch.equal(got.sequences, want.sequences), (by, mask)
                for g, w in zip(got.scores, want.scores, strict=True):
                    assert rel_err(g.numpy(), w.numpy()) <= 1e-4


def test_min_p_keeps_the_likely_tokens():
    """min_p, when sampling, draws only tokens at least min_p times as
    likely as the best among those top_k and top_p leave: every token drawn
    has a finite score, and the scores keep exactly those. Greedy decoding
    ignores it, as transformers does; one outside [0, 1] is refused."""
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    ids = np.random.default_rng().integers(1, m.config.vocab_size, size=(4, 5))
    for kw in (dict(min_p=0.3), dict(min_p=0.1, top_k=0, top_p=0.9), dict(min_p=0.5, top_k=20)):
        out = m.generate(ids, max_new_tokens=12, do_sample=True, temperature=1.5, seed=4, eos_token_id=[],
                         return_dict_in_generate=True, output_scores=True, output_logits=True, **kw)
        for i, (z, raw) in enumerate(zip(out.scores, out.logits, strict=True)):
            assert np.all(np.isfinite(z[np.arange(4), out.sequences[:, 5 + i]])), (kw, i)
            p = np.exp((raw - raw.max(axis=-1, keepdims=True)).astype(np.float64) / 1.5)
            assert not np.any(np.isfinite(z) & (p < kw["min_p"])), kw
    assert np.array_equal(m.generate(ids, max_new_tokens=6, min_p=0.9), m.generate(ids, max_new_tokens=6))
    with pytest.raises(ValueError, match="min_p must be in"):
        m.generate(ids, max_new_tokens=3, do_sample=True, min_p=1.5)


def test_beam_search_scores_and_refusals():
    """num_beams > 1 is beam search: each prompt's num_return_sequences
    best beams, best first, each beam's sequences_scores the sum of its
    transition scores (read through beam_indices) over its length to the
    length penalty, and the rows past an end filled with the pad id; so
    too with beam sampling (do_sample), whose transition scores are the
    warped log probabilities, and which a seed makes reproducible. A
    streamer, and more returned sequences than beams are refused, as
    transformers refuses them."""
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    rng = np.random.default_rng()
    ids = rng.integers(1, m.config.vocab_size, size=(2, 7))
    eos = int(m.generate(ids[:1], max_new_tokens=2)[0, -1])  # a token the search meets
    pad = unused_id(ids, m.config.vocab_size, eos)
    for lp, sample in ((1.0, {}), (0.0, {}), (1.7, {}), (1.0, dict(do_sample=True, temperature=1.3, seed=5)),
                       (0.5, dict(do_sample=True, top_k=10, temperature=0.8, eta_cutoff=1e-4, seed=6))):
        out = m.generate(ids, max_new_tokens=6, num_beams=4, num_return_sequences=3, length_penalty=lp,
                         eos_token_id=eos, pad_token_id=pad, return_dict_in_generate=True, output_scores=True,
                         **sample)
        assert out.sequences.shape[0] == 6 and out.beam_indices.shape == (6, out.sequences.shape[1] - 7)
        assert len(out.scores) >= out.beam_indices.shape[1] and out.scores[0].shape == (8, m.config.vocab_size)
        assert np.array_equal(out.sequences[:, :7], np.repeat(ids, 3, axis=0))
        steps = m.compute_transition_scores(out.sequences, out.scores, out.beam_indices)
        length = (out.beam_indices >= 0).sum(axis=1)
        assert np.allclose(steps.sum(axis=1) / length.astype(np.float64) ** lp, out.sequences_scores, rtol=1e-5)
        for r in range(6):
            new = out.sequences[r, 7:]
            if length[r] < new.size:  # ended at eos, then filled
                assert new[length[r] - 1] == eos and (new[length[r]:] == pad).all()
                assert (out.beam_indices[r, length[r]:] == -1).all()
            assert set(out.beam_indices[r, :length[r]]) <= set(range(4 * (r // 3), 4 * (r // 3) + 4))
        for b in range(2):
            assert (np.diff(out.sequences_scores[3 * b:3 * b + 3]) <= 0).all()
    one = m.generate(ids, max_new_tokens=5, num_beams=1, eos_token_id=[])
    assert np.array_equal(one, m.generate(ids, max_new_tokens=5, eos_token_id=[]))
    drawn = [m.generate(ids, max_new_tokens=8, num_beams=3, do_sample=True, temperature=1.5, top_k=0, seed=s,
                        eos_token_id=[]) for s in (1, 1, 2, 3)]
    assert np.array_equal(drawn[0], drawn[1]) and not all(np.array_equal(drawn[0], d) for d in drawn[2:])
    with pytest.raises(ValueError, match="streamer"):
        m.generate(ids, max_new_tokens=3, num_beams=2, streamer=object())
    with pytest.raises(ValueError, match="num_return_sequences"):
        m.generate(ids, max_new_tokens=3, num_beams=2, num_return_sequences=3)
    with pytest.raises(ValueError, match="early_stopping"):
        m.model.beam_search(ids, 3, 2, early_stopping="sometimes")
    for beams in (1, 2):  # stop strings need the tokenizer, and strings
        with pytest.raises(ValueError, match="tokenizer"):
            m.generate(ids, max_new_tokens=3, num_beams=beams, stop_strings="ab")
        with pytest.raises(TypeError, match="stop_strings must be"):
            m.generate(ids, max_new_tokens=3, num_beams=beams, stop_strings=5, tokenizer=object())
        with pytest.raises(TypeError, match="renormalize_logits must be a bool"):
            m.generate(ids, max_new_tokens=3, num_beams=2, renormalize_logits="yes")


def test_beam_search_follows_transformers():
    """transformers' own beam search (do_sample=False) gives the same
    sequences and beam indices, step scores to 1e-4 (rel_err), and
    sequences_scores and transition scores (its compute_transition_scores)
    within 1e-4 of the step scores' range, over fresh
    random prompts and settings: beams, returned sequences, length
    penalties, the three early_stopping modes, an eos the search meets,
    repetition_penalty, no_repeat_ngram_size (not in a padded batch, whose
    pad ids transformers counts in a row's n-grams: a beam that takes the
    pad id may not take it again there), min_new_tokens, and a left-padded
    batch."""
    torch, hf, ours, _, _ = _against_transformers()
    V = hf.config.vocab_size
    rng = np.random.default_rng()
    for trial in range(16):
        B, K = int(rng.integers(1, 4)), int(rng.integers(2, 6))
        ids = torch.from_numpy(rng.integers(1, V, size=(B, int(rng.integers(4, 9)))))
        mask = torch.ones_like(ids)  # given: else transformers takes pad ids in the prompt for padding
        if trial % 4 == 3 and B > 1:
            mask[0, :2] = 0
            ids[0, :2] = hf.config.pad_token_id
        kw = dict(max_new_tokens=int(rng.integers(3, 10)), num_beams=K, num_return_sequences=int(rng.integers(1, K + 1)),
                  length_penalty=float(rng.choice([1.0, 0.0, 2.0, -0.5])), early_stopping=[False, True, "never"][trial % 3],
                  eos_token_id=int(rng.integers(1, V)), pad_token_id=hf.config.pad_token_id, do_sample=False,
                  return_dict_in_generate=True, output_scores=True)
        if trial % 5 == 4:
            kw["repetition_penalty"] = 1.3
        if trial % 7 == 3 and not (mask == 0).any():  # transformers counts the left padding's ids in n-grams
            kw["no_repeat_ngram_size"] = 2
        if trial % 6 == 5:
            kw["min_new_tokens"] = 2
        with torch.no_grad():
            want = hf.generate(ids, attention_mask=mask, **kw)
            want_steps = hf.compute_transition_scores(want.sequences, want.scores, want.beam_indices)
        got = ours.generate(ids, attention_mask=mask, **kw)
        assert torch.equal(got.sequences, want.sequences), (trial, kw)
        assert torch.equal(got.beam_indices, want.beam_indices.to(got.beam_indices.dtype)), (trial, kw)
        assert len(got.scores) == len(want.scores)
        scale = 0.0  # the log probabilities' range: the engine's logits agree to 1e-4 of theirs (rel_err)
        for g, w in zip(got.scores, want.scores, strict=True):
            finite = torch.isfinite(w)
            assert torch.equal(torch.isfinite(g), finite)
            assert rel_err(g[finite].numpy(), w[finite].numpy()) <= 1e-4
            scale = max(scale, float(w[finite].abs().max()))
        got_steps = ours.compute_transition_scores(got.sequences, got.scores, got.beam_indices)
        for g, w in ((got.sequences_scores, want.sequences_scores), (got_steps, want_steps)):
            assert float((g - w).abs().max()) <= 1e-4 * scale, (trial, kw, g, w)


def test_logits_processors_follow_transformers():
    """sequence_bias, bad_words_ids, suppress_tokens, begin_suppress_tokens,
    forced_eos_token_id, forced_bos_token_id (after one-token prompts),
    exponential_decay_length_penalty and max_time, alone and together, with
    repetition_penalty, min_new_tokens and renormalize_logits beside them: transformers' own
    generate gives the same sequences (and beam indices) and scores (1e-4),
    greedy and by beam search, over fresh random prompts and settings
    drawn from the tokens the free run generates, so that they fire; a
    left-padded batch among them (without the penalty where transformers
    counts the padding's ids as the row's, as 5.17 does; the length decay
    alone where transformers makes an eos logit of -inf NaN, as 5.17
    does)."""
    torch, hf, ours, _, _ = _against_transformers()
    from transformers.generation.logits_process import ExponentialDecayLengthPenalty
    from transformers.generation.utils import GenerationMixin

    leaves_out_padding = "prompt_ignore_length" in inspect.getsource(GenerationMixin._get_logits_processor)
    # transformers 5.17's length decay adds inf to an eos logit of -inf, and takes the NaN for the best (5.25
    # leaves it): there the decay goes alone, without the processors that set eos logits to -inf
    finite_decay = "isfinite" in inspect.getsource(ExponentialDecayLengthPenalty.__call__)
    V = hf.config.vocab_size
    rng = np.random.default_rng()
    for trial in range(12):
        kinds = [k for k in range(8) if rng.random() < 0.4] or [trial % 8]
        if 7 in kinds and not finite_decay:
            kinds = [7]
        B, T = int(rng.integers(1, 4)), 1 if 6 in kinds else int(rng.integers(5, 9))
        ids = torch.from_numpy(rng.integers(1, V, size=(B, T)))
        mask = torch.ones_like(ids)
        if trial % 4 == 1 and B > 1 and T > 2:
            mask[0, :2] = 0
            ids[0, :2] = hf.config.pad_token_id
        base = dict(max_new_tokens=int(rng.integers(4, 10)), pad_token_id=hf.config.pad_token_id,
                    eos_token_id=int(rng.integers(1, V)), do_sample=False)
        with torch.no_grad():
            free = hf.generate(ids, attention_mask=mask, **base)[:, T:].numpy()
        tok = lambda: int(rng.choice(free.reshape(-1)))  # noqa: E731  a token the free run generates
        pair = [int(t) for t in free[0, :2]]
        kw = dict(base, return_dict_in_generate=True, output_scores=True)
        if 0 in kinds or trial % 3 == 2:  # with the repetition penalty below, a bias on a prompt's token
            kw["sequence_bias"] = {(tok(),): float(rng.normal() * 3), tuple(pair): float(rng.normal() * 3),
                                   (int(ids[-1, -1]), tok()): 2.5, (int(ids[0, -1]),): 1.5}
        if 1 in kinds:
            kw["bad_words_ids"] = [[tok()], pair, [int(rng.integers(1, V)), tok(), tok()]]
        if 2 in kinds:
            kw["suppress_tokens"] = [tok(), tok()]
        if 3 in kinds:
            kw["begin_suppress_tokens"] = [int(t) for t in free[:, 0]]
        if 4 in kinds:  # two forced ids tie (log probability 0): torch.topk ranks ties in no set order
            kw["forced_eos_token_id"] = [tok(), tok()] if trial % 2 == 0 else tok()
        if 5 in kinds:
            kw["max_time"] = 0.0  # one token, then the time is up
        if 6 in kinds:
            kw["forced_bos_token_id"] = tok()
        if 7 in kinds:
            kw["exponential_decay_length_penalty"] = (int(rng.integers(0, 3)), float(rng.uniform(1.05, 2.5)))
        if trial % 3 == 2 and (leaves_out_padding or not (mask == 0).any()):
            kw["repetition_penalty"] = 1.4
        if trial % 5 == 4 and (finite_decay or 7 not in kinds):
            kw["min_new_tokens"] = 2
        if trial % 2:
            kw.update(num_beams=int(rng.integers(2, 5)))
        if rng.random() < 0.4:
            kw["renormalize_logits"] = True
        try:
            with torch.no_grad():
                want = hf.generate(ids, attention_mask=mask, **kw)
        except ValueError as refusal:  # every forced id suppressed: both refuse it
            assert "suppress_tokens" in str(refusal), refusal
            with pytest.raises(ValueError, match="every forced [be]os id"):
                ours.generate(ids, attention_mask=mask, **kw)
            continue
        got = ours.generate(ids, attention_mask=mask, **kw)
        assert torch.equal(got.sequences, want.sequences), (trial, kw, got.sequences, want.sequences)
        if "num_beams" in kw:
            assert torch.equal(got.beam_indices, want.beam_indices.to(got.beam_indices.dtype)), (trial, kw)
        assert len(got.scores) == len(want.scores), (trial, kw)
        for g, w in zip(got.scores, want.scores, strict=True):
            finite = torch.isfinite(w)
            assert torch.equal(torch.isfinite(g), finite), (trial, kw)
            assert rel_err(g[finite].numpy(), w[finite].numpy()) <= 1e-4, (trial, kw)


def _trained_tokenizers(V: int):
    """Two transformers tokenizers of at most V tokens, trained here on a
    few sentences: a byte-level BPE (GPT-NeoX's kind, as Mamba checkpoints
    have) and a BPE over Metaspace pieces (SentencePiece's kind, whose
    texts transformers decodes after a prefix)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    text = ["the stop sign stood at the top of a stopped street", "stars start to spot the sea at dusk",
            "a tapestry of taste: pots, posts and spots", "the quick brown fox jumps over the lazy dog",
            "abcdef"] * 20  # every letter: transformers decodes each token after "abcdef"
    made = []
    for pre, dec in ((pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()),
                     (pre_tokenizers.Metaspace(), decoders.Metaspace())):
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer, tok.decoder = pre, dec
        tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=V, special_tokens=["<pad>"]))
        made.append(PreTrainedTokenizerFast(tokenizer_object=tok))
    return made


def test_stop_strings_follow_transformers():
    """stop_strings with a tokenizer (byte-level and Metaspace BPEs trained
    here), greedy and by beam search: transformers' own generate gives the
    same sequences (and beam indices), over fresh random prompts, eos ids
    and stop strings cut at random from the text the free run generates,
    so that they fire within tokens, across them and past their ends; a
    left-padded batch among them. Plain Model.generate takes a
    tokenizers.Tokenizer too."""
    torch, hf, ours, _, _ = _against_transformers()
    V = hf.config.vocab_size
    rng = np.random.default_rng()
    fired = 0
    for trial, tokenizer in enumerate(_trained_tokenizers(V) * 6):
        B, T = int(rng.integers(1, 4)), int(rng.integers(3, 8))
        ids = torch.from_numpy(rng.integers(1, V, size=(B, T)))
        mask = torch.ones_like(ids)
        if trial % 3 == 1 and B > 1:
            mask[0, :2] = 0
            ids[0, :2] = hf.config.pad_token_id
        base = dict(max_new_tokens=int(rng.integers(6, 12)), pad_token_id=hf.config.pad_token_id,
                    eos_token_id=int(rng.integers(1, V)), do_sample=False)
        with torch.no_grad():
            free = hf.generate(ids, attention_mask=mask, **base)[:, T:]
        text = tokenizer.decode(free[-1, 1:5])
        a = int(rng.integers(0, max(1, len(text) - 1)))
        cut = text[a:a + int(rng.integers(1, 6))] or "st"
        kw = dict(base, stop_strings=[cut, "stop"] if trial % 2 else cut, tokenizer=tokenizer)
        if trial % 4 >= 2:
            kw.update(num_beams=int(rng.integers(2, 4)), return_dict_in_generate=True)
        with torch.no_grad():
            want = hf.generate(ids, attention_mask=mask, **kw)
        got = ours.generate(ids, attention_mask=mask, **kw)
        if "num_beams" in kw:
            assert torch.equal(got.beam_indices, want.beam_indices.to(got.beam_indices.dtype)), (trial, kw)
            got, want = got.sequences, want.sequences
        assert torch.equal(got, want), (trial, kw, got, want, free)
        fired += want.shape[1] < T + base["max_new_tokens"] or bool((want[:, -1] == hf.config.pad_token_id).any())
    assert fired >= 3, f"the stop strings ended rows in only {fired} of 12 trials"

    m = ours.model
    prompt = np.asarray(ids[-1:, :])
    for tokenizer in _trained_tokenizers(V):
        raw = tokenizer.backend_tokenizer  # a tokenizers.Tokenizer
        free = m.generate(prompt, 8)
        cut = tokenizer.decode(free[0, 2:4].tolist())
        if cut:
            by_hf = m.generate(prompt, 8, eos_token_id=V - 1, stop_strings=cut, tokenizer=tokenizer)
            by_raw = m.generate(prompt, 8, eos_token_id=V - 1, stop_strings=cut, tokenizer=raw)
            assert np.array_equal(by_hf, by_raw) and by_hf.shape[1] <= 4, (cut, free, by_hf, by_raw)


def test_warpers_draw_from_what_transformers_keeps():
    """Sampling under typical_p, epsilon_cutoff and eta_cutoff (with
    temperature, top_k and top_p beside them) draws only tokens that
    transformers' warpers keep (_warped, checked against them above), at
    their odds: 20000 rows of one prompt, one draw each on a stream of
    its own, within 0.05 in total variation of the warped softmax (about
    0.02 is expected of 50 tokens)."""
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    from mambago.hf import _warped

    rng = np.random.default_rng()
    prompts = rng.integers(1, m.config.vocab_size, size=(20, 6))
    every = m.model.logits(m.model.prefill(prompts)).astype(np.float64)
    p = np.exp(every - every.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    flat = int(np.argmax(-(p * np.log(p)).sum(axis=-1)))  # the prompt of the flattest next token: more to cut
    prompt, logits = prompts[flat:flat + 1], every[flat:flat + 1].astype(np.float32)
    for temp, k, p, typ, eps, eta in ((1.5, 0, 1.0, 0.6, 0.0, 0.0), (2.0, 0, 1.0, 1.0, 0.004, 0.0),
                                      (2.0, 0, 1.0, 1.0, 0.0, 0.01), (1.8, 40, 0.95, 0.8, 0.002, 0.003)):
        z = _warped(logits, temp, k, p, 0.0, typ, eps, eta)[0].astype(np.float64)
        want = np.exp(z - z.max())
        want /= want.sum()
        N = 20000
        got = m.model.generate(np.repeat(prompt, N, axis=0), 1, temperature=temp, top_k=k, top_p=p, typical_p=typ,
                               epsilon_cutoff=eps, eta_cutoff=eta, seed=int(rng.integers(2**31)))[:, 0]
        assert np.all(np.isfinite(z[got])), (temp, k, p, typ, eps, eta, sorted(set(got[~np.isfinite(z[got])])))
        freq = np.bincount(got, minlength=z.size) / N
        assert 0.5 * np.abs(freq - want).sum() < 0.05, (temp, k, p, typ, eps, eta)
        assert 1 < np.isfinite(z).sum() < z.size  # the warpers cut some tokens and leave others
    # through generate: each token drawn has a finite score (the warped logits); settings that transformers
    # leaves off (typical_p at 1 or more, cutoffs outside (0, 1)) are off here too
    out = m.generate(np.repeat(prompt, 3, axis=0), do_sample=True, temperature=1.5, typical_p=0.7, eta_cutoff=0.01,
                     max_new_tokens=6, eos_token_id=[], return_dict_in_generate=True, output_scores=True)
    for i, z in enumerate(out.scores):
        assert np.all(np.isfinite(z[np.arange(3), out.sequences[:, 6 + i]])) and not np.all(np.isfinite(z))
    plain = m.generate(prompt, do_sample=True, seed=4, max_new_tokens=5)
    assert np.array_equal(m.generate(prompt, do_sample=True, seed=4, max_new_tokens=5, typical_p=1.5,
                                     epsilon_cutoff=2.0, eta_cutoff=0.0), plain)
    for kw, match in ((dict(typical_p=0.0), "typical_p must be in"), (dict(epsilon_cutoff=1.0), "epsilon_cutoff"),
                      (dict(eta_cutoff=-0.1), "eta_cutoff")):
        with pytest.raises(ValueError, match=match):
            m.model.generate(prompt, 2, temperature=1.0, **kw)


def test_logits_processors_refuse_bad_settings():
    """Each malformed processor setting is a ValueError or a TypeError that
    names it, from generate and beam_search alike; ids outside the
    vocabulary are refused by mambago.Model and, as transformers ignores
    them, left out of the hf generate's suppress lists."""
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    V = m.config.vocab_size
    ids = np.random.default_rng().integers(1, V, size=(2, 5))
    for kw, error, match in ((dict(bad_words_ids=[[]]), ValueError, "at least one id"),
                             (dict(bad_words_ids=[3]), ValueError, "list of lists"),
                             (dict(bad_words_ids=[[V]]), ValueError, "outside the vocabulary"),
                             (dict(sequence_bias={(1,): float("nan")}), ValueError, "want finite or -inf"),
                             (dict(sequence_bias={(1,): "big"}), TypeError, "must be a number"),
                             (dict(sequence_bias={(): 1.0}), ValueError, "at least one id"),
                             (dict(forced_eos_token_id=-1), ValueError, "outside the vocabulary"),
                             (dict(suppress_tokens=[1.5]), TypeError, "list of ints"),
                             (dict(max_time=-1.0), ValueError, "max_time"),
                             (dict(exponential_decay_length_penalty=(-1, 1.5)), ValueError, "start_index"),
                             (dict(exponential_decay_length_penalty=(2, 0.0)), ValueError, "decay_factor"),
                             (dict(exponential_decay_length_penalty=2), TypeError, "start_index, decay_factor"),
                             (dict(forced_bos_token_id=V), ValueError, "outside the vocabulary"),
                             (dict(forced_eos_token_id=4, suppress_tokens=[4, 5]), ValueError, "every forced eos id")):
        for call in (lambda: m.model.generate(ids, 3, **kw), lambda: m.model.beam_search(ids, 3, 2, **kw),
                     lambda: m.generate(ids, max_new_tokens=3, **kw)):
            with pytest.raises(error, match=match):
                call()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        m.model.generate(ids, 3, suppress_tokens=[V])
    want = m.generate(ids, max_new_tokens=4, suppress_tokens=[3])
    assert np.array_equal(m.generate(ids, max_new_tokens=4, suppress_tokens=[3, V, V + 9]), want)
    # a bias of -inf bans its sequence, as a bad word does (but for a lone eos id, which bad words leave out, as
    # transformers does: no eos here)
    first = int(m.generate(ids, max_new_tokens=1, eos_token_id=[])[0, -1])
    assert np.array_equal(m.generate(ids, max_new_tokens=4, eos_token_id=[], sequence_bias={(first,): -float("inf")}),
                          m.generate(ids, max_new_tokens=4, eos_token_id=[], bad_words_ids=[[first]]))


def test_beam_sampling_follows_transformers():
    """Beam sampling (num_beams with do_sample) draws as transformers'
    does: 2000 rows of one prompt (the flattest of 20 fresh ones) each
    searched by both, under temperature with top_k, and with top_p and
    typical_p; each new token of the best beam is distributed alike
    (total variation under 0.1; about 0.03 is expected of 2000 draws),
    and so are the sequences_scores (means within 5 standard errors and
    float32's rounding, which catches a warper applied otherwise). transformers before 5.25
    (5.17) did not rank the drawn candidates before taking the first
    num_beams of them as those that may finish; mambago ranks them, as
    5.25 does: the test skips an older transformers."""
    torch, hf, ours, _, _ = _against_transformers()
    from transformers.generation.utils import GenerationMixin

    if ".sort(" not in inspect.getsource(GenerationMixin._get_top_k_continuations):
        pytest.skip("this transformers does not rank beam sampling's drawn candidates (5.25 does)")
    V = hf.config.vocab_size
    rng = np.random.default_rng()
    # Not the pad id V - 1 set below: transformers' generate would take it
    # in a prompt for padding, mambago for a token (CI at ec10c2d drew one).
    prompts = rng.integers(1, V - 1, size=(20, 6))
    every = ours.model.logits(ours.model.prefill(prompts)).astype(np.float64)
    p = np.exp(every - every.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    prompt = torch.from_numpy(prompts[int(np.argmax(-(p * np.log(p)).sum(axis=-1)))][None])
    N = 2000
    for kw in (dict(temperature=1.3, top_k=20), dict(temperature=0.8, top_k=0, top_p=0.95, typical_p=0.97)):
        kw = dict(kw, do_sample=True, num_beams=3, max_new_tokens=3, eos_token_id=[], pad_token_id=V - 1,
                  return_dict_in_generate=True, output_scores=True)
        with torch.no_grad():
            want = hf.generate(prompt.repeat(N, 1), **kw)
        got = ours.generate(prompt.repeat(N, 1), **kw)
        for col in range(6, 9):
            f_want, f_got = (np.bincount(out.sequences[:, col].numpy(), minlength=V) / N for out in (want, got))
            assert 0.5 * np.abs(f_want - f_got).sum() < 0.1, (kw, col)
        s_want, s_got = want.sequences_scores.numpy(), got.sequences_scores.numpy()
        se = np.sqrt((s_want.var() + s_got.var()) / N)
        # 2e-5: float32's rounding of a score summed over the steps (-0.47 apart by 2.3e-6 in CI once, where the
        # warpers left every row the same beams and se was 1.5e-9); a warper applied otherwise moves it by far more.
        assert abs(s_want.mean() - s_got.mean()) < 5 * se + 2e-5, (kw, s_want.mean(), s_got.mean(), se)


def test_generate_takes_pad_ids_for_padding():
    """Without an attention_mask, generate takes the pad ids that open or
    close a row for padding, as transformers' generate does where the pad
    id is not an eos id: the tokens of the mask they make. A pad id among a
    row's tokens stays a token, with a warning (transformers would skip it).
    Where transformers is installed, its generate gives the same tokens for
    left-padded rows."""
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    rng = np.random.default_rng()
    V, pad = m.config.vocab_size, 7
    ids = rng.integers(8, V, size=(3, 6))
    ids[0, :2] = pad
    ids[2, :1] = pad
    for kw in (dict(eos_token_id=[]), dict(eos_token_id=int(rng.integers(8, V)), num_beams=3)):
        want = m.generate(ids, max_new_tokens=5, pad_token_id=pad, attention_mask=(ids != pad).astype(np.int64), **kw)
        assert np.array_equal(m.generate(ids, max_new_tokens=5, pad_token_id=pad, **kw), want)
    same = m.generate(ids, max_new_tokens=5, pad_token_id=pad, eos_token_id=pad)  # pad is an eos id: no padding
    assert np.array_equal(same, m.generate(ids, max_new_tokens=5, pad_token_id=pad, eos_token_id=pad,
                                           attention_mask=np.ones_like(ids)))
    inside = ids.copy()
    inside[1, 3] = pad
    with pytest.warns(UserWarning, match="among a row's tokens"):
        got = m.generate(inside, max_new_tokens=4, pad_token_id=pad, eos_token_id=[])
    assert np.array_equal(got, m.generate(inside, max_new_tokens=4, pad_token_id=pad, eos_token_id=[],
                                          attention_mask=np.ones_like(inside)))
    if importlib.util.find_spec("torch") and importlib.util.find_spec("transformers"):
        torch, hf, ours, _, _ = _against_transformers()
        t_ids = torch.from_numpy(ids)
        for kw in (dict(eos_token_id=None), dict(eos_token_id=int(rng.integers(8, V)), num_beams=3)):
            with torch.no_grad():
                want = hf.generate(t_ids, max_new_tokens=5, pad_token_id=pad, do_sample=False, **kw)
            got = ours.generate(t_ids, max_new_tokens=5, pad_token_id=pad,
                                **{**kw, "eos_token_id": kw["eos_token_id"] if kw["eos_token_id"] is not None else []})
            assert torch.equal(got, want), kw


def test_min_new_tokens_follows_transformers():
    """min_new_tokens keeps rows from ending before that many new tokens
    (eos -inf in the scores until then), and min_length likewise counting
    the prompt; with eos set to a row's first greedy token, that row runs
    on. Where transformers is installed, its generate gives the same tokens
    and scores."""
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    ids = np.random.default_rng().integers(1, m.config.vocab_size, size=(2, 6))
    eos = int(m.generate(ids, max_new_tokens=1, eos_token_id=[])[0, -1])
    assert m.generate(ids, max_new_tokens=6, eos_token_id=eos)[0, 6] == eos
    for kw in (dict(min_new_tokens=3), dict(min_length=9)):
        out = m.generate(ids, max_new_tokens=6, eos_token_id=eos, return_dict_in_generate=True, output_scores=True,
                         output_logits=True, **kw)
        assert not np.any(out.sequences[:, 6:9] == eos) and out.sequences.shape[1] >= 10, out.sequences
        assert all(np.all(z[:, eos] == -np.inf) for z in out.scores[:3]), kw
        assert np.all(np.isfinite(out.scores[3][:, eos])) and np.all(np.isfinite(out.logits[0][:, eos]))
    with pytest.raises(ValueError, match="min_new_tokens must be ≥ 0"):
        m.generate(ids, min_new_tokens=-1)
    if importlib.util.find_spec("torch") and importlib.util.find_spec("transformers"):
        torch, hf, ours, t_ids, left = _against_transformers()
        with torch.no_grad():
            eos = int(hf.generate(t_ids, max_new_tokens=1, eos_token_id=None, pad_token_id=0)[1, -1])
        for mask in (None, left):
            for kw in (dict(min_new_tokens=4), dict(min_length=12)):
                args = dict(attention_mask=mask, max_new_tokens=7, eos_token_id=eos, pad_token_id=eos,
                            return_dict_in_generate=True, output_scores=True, **kw)
                with torch.no_grad():
                    want = hf.generate(t_ids, do_sample=False, **args)
                got = ours.generate(t_ids, **args)
                assert torch.equal(got.sequences, want.sequences), (kw, got.sequences, want.sequences)
                for g, w in zip(got.scores, want.scores, strict=True):
                    assert torch.equal(torch.isinf(g), torch.isinf(w))
                    assert rel_err(torch.nan_to_num(g).numpy(), torch.nan_to_num(w).numpy()) <= 1e-4


def test_no_repeat_ngram_size_follows_transformers():
    """no_repeat_ngram_size n: no row closes an n-gram its tokens already
    hold, and the scores are -inf where a token would; greedy and sampled.
    Where transformers is installed, its generate gives the same tokens and
    scores for unpadded prompts (it counts left padding's ids as the row's,
    and mambago leaves them out)."""
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    ids = np.random.default_rng().integers(1, m.config.vocab_size, size=(2, 6))
    for n in (1, 2, 3):
        for kw in (dict(), dict(do_sample=True, temperature=1.3, seed=2)):
            out = m.generate(ids, max_new_tokens=20, no_repeat_ngram_size=n, eos_token_id=[],
                             return_dict_in_generate=True, output_scores=True, **kw)
            for row in out.sequences:
                grams = [tuple(row[i:i + n]) for i in range(len(row) - n + 1)]
                new = grams[6 - n + 1:] if n <= 6 else grams
                assert all(g not in grams[:6 - n + 1 + k] for k, g in enumerate(new)), (n, kw, row)
            for i, z in enumerate(out.scores):
                assert np.all(np.isfinite(z[np.arange(2), out.sequences[:, 6 + i]]))
    with pytest.raises(ValueError, match="no_repeat_ngram_size must be ≥ 0"):
        m.generate(ids, no_repeat_ngram_size=-1)
    if importlib.util.find_spec("torch") and importlib.util.find_spec("transformers"):
        torch, hf, ours, t_ids, _ = _against_transformers()
        for n in (1, 2, 3):
            kw = dict(max_new_tokens=12, no_repeat_ngram_size=n, return_dict_in_generate=True, output_scores=True,
                      pad_token_id=hf.config.pad_token_id)
            with torch.no_grad():
                want = hf.generate(t_ids, do_sample=False, **kw)
            got = ours.generate(t_ids, **kw)
            assert torch.equal(got.sequences, want.sequences), n
            for g, w in zip(got.scores, want.scores, strict=True):
                assert torch.equal(torch.isinf(g), torch.isinf(w))
                assert rel_err(torch.nan_to_num(g).numpy(), torch.nan_to_num(w).numpy()) <= 1e-4


def test_generation_config_sets_generates_defaults(tmp_path):
    """generate's settings come, as in transformers, from the call, then a
    generation_config given to it, then model.generation_config: the
    checkpoint's generation_config.json where it has one, else the config's
    eos and pad ids. Settings for decoding generate does not do pass where
    they are off and are refused, by name, where they are on."""
    from mambago.hf import GenerationConfig

    rng = np.random.default_rng()
    plain = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    assert plain.generation_config.eos_token_id == plain.config.eos_token_id
    assert plain.generation_config.pad_token_id == plain.config.pad_token_id
    assert plain.generation_config.num_beams is None
    ids = rng.integers(1, plain.config.vocab_size, size=(2, 5))
    sampled = dict(do_sample=True, temperature=0.7, top_k=5, max_new_tokens=4, repetition_penalty=1.2,
                   eos_token_id=[])
    want = plain.generate(ids, seed=9, **sampled)
    folder = _with_config(tmp_path, "base")
    (folder / "generation_config.json").write_text(json.dumps({**sampled, "transformers_version": "5.0"}))
    m = MambaForCausalLM.from_pretrained(folder, device="cpu")
    assert m.generation_config.temperature == 0.7 and m.generation_config.pad_token_id is None
    assert np.array_equal(m.generate(ids, seed=9), want)
    assert np.array_equal(m.generate(ids, do_sample=False), plain.generate(ids, max_new_tokens=4,
                                                                           repetition_penalty=1.2, eos_token_id=[]))
    for given in (GenerationConfig(do_sample=False, max_new_tokens=3), {"do_sample": False, "max_new_tokens": 3}):
        got = m.generate(ids, generation_config=given)  # the rest from m.generation_config
        assert np.array_equal(got, plain.generate(ids, max_new_tokens=3, repetition_penalty=1.2, eos_token_id=[]))
        assert m.generate(ids, generation_config=given, max_new_tokens=2).shape == (2, 7)  # the call first
    m.generation_config.top_k = 1  # sampling from the best alone: greedy's tokens
    assert np.array_equal(m.generate(ids, seed=3), m.generate(ids, do_sample=False))
    assert np.array_equal(m.generate(ids, num_beams=1, typical_p=1.0), m.generate(ids))
    with pytest.raises(ValueError, match=r"num_beam_groups=2.*num_beam_groups=1"):
        m.generate(ids, num_beams=4, num_beam_groups=2)
    m.generation_config.num_beams = 3  # beam search by default, as the call's num_beams=3 gives it
    assert np.array_equal(m.generate(ids, do_sample=False),
                          m.generate(ids, do_sample=False, num_beams=3, generation_config={"num_beams": 1}))
    assert m.generate(ids, do_sample=False, return_dict_in_generate=True).beam_indices.shape[0] == 2
    m.generation_config.num_beams = None
    m.generation_config.top_h = 0.5
    with pytest.raises(ValueError, match="top_h=0.5"):
        m.generate(ids)
    with pytest.raises(TypeError, match="unsupported argument 'foo'"):
        m.generate(ids, foo=1)
    with pytest.raises(TypeError, match="generation_config must be"):
        plain.generate(ids, generation_config=3)
    saved = tmp_path / "saved"  # save_pretrained writes what from_pretrained reads back
    m.generation_config.save_pretrained(saved)
    assert GenerationConfig._from_file(str(saved / "generation_config.json")).to_dict() == \
        m.generation_config.to_dict() == m.generation_config.to_diff_dict()
    assert m.generation_config.update(top_k=7, foo=1) == {} and m.generation_config.top_k == 7
    with pytest.raises(AttributeError, match="no validate"):
        m.generation_config.validate()
    m.generation_config = {"max_new_tokens": 2, "eos_token_id": []}  # a dict serves as the model's config too
    assert m.generate(ids, do_sample=False).shape == (2, 7)
    m.generation_config = 3
    with pytest.raises(TypeError, match="generation_config must be"):
        m.generate(ids)
    (folder / "generation_config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a generation config"):
        MambaForCausalLM.from_pretrained(folder, device="cpu")
    if importlib.util.find_spec("torch") and importlib.util.find_spec("transformers"):
        import transformers

        torch, hf, _, t_ids, _ = _against_transformers()
        hf.generation_config.repetition_penalty = 1.3
        hf.generation_config.max_new_tokens = 6
        ours = MambaForCausalLM.from_model(hf, device="cpu")  # takes hf's generation config over
        with torch.no_grad():
            assert torch.equal(ours.generate(t_ids), hf.generate(t_ids))
            given = transformers.GenerationConfig(max_new_tokens=5, repetition_penalty=0.8, do_sample=False)
            assert torch.equal(ours.generate(t_ids, generation_config=given),
                               hf.generate(t_ids, generation_config=given))


def test_pad_token_follows_the_first_eos():
    """A row that stops at eos is padded with pad_token_id while another row
    goes on (the engine pads with eos itself)."""
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    ids, eos, free = early_stop_pair(m.model, np.random.default_rng())
    pad = unused_id(ids, m.config.vocab_size, eos)  # not read as padding
    got = m.generate(ids, max_new_tokens=6, eos_token_id=eos, pad_token_id=pad)
    assert np.array_equal(got[:, :3], ids)
    assert np.array_equal(got[0, 3:], [free[0, 0], eos] + [pad] * 4), (got, free)
    assert np.array_equal(got[1, 3:], free[1])


def _with_config(tmp_path, case, **changes):
    """A copy of fixture case in tmp_path with changes made to its config."""
    import json
    import shutil

    for name in ("config.json", "model.safetensors"):
        shutil.copy(f"{case_dir(case)}/{name}", tmp_path / name)
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(changes)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_eos_token_id_as_a_list(tmp_path):
    """eos_token_id as transformers also takes it, a list: one id is that
    id; with several, each stops its row, which is padded (the config's
    pad_token_id) after it. A config.json's list is the default, and
    transformers' own generate gives the same tokens where installed."""
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    rng = np.random.default_rng()
    # Row 0 stops at its second new token (eos), row 1 at its third (other):
    # fresh prompt pairs until row 1's third token is one neither row took before.
    for _ in range(50):
        ids, eos, free = early_stop_pair(m.model, rng)
        other = int(free[1, 2])
        if other not in (eos, free[0, 0], free[0, 1]) and other not in free[1, :2]:
            break
    else:
        pytest.skip(f"50 prompt pairs found no row 1 whose third token fits the check (last: {free.tolist()})")
    want = m.generate(ids, max_new_tokens=6, eos_token_id=eos)
    assert np.array_equal(m.generate(ids, max_new_tokens=6, eos_token_id=[eos]), want)
    assert np.array_equal(m.generate(ids, max_new_tokens=6, eos_token_id=(eos,)), want)
    pad = m.config.pad_token_id
    T = ids.shape[1]
    got = m.generate(ids, max_new_tokens=6, eos_token_id=[eos, other])
    assert got.shape == (2, T + 3)
    assert got[0, T:].tolist() == [free[0, 0], eos, pad] and got[1, T:].tolist() == free[1, :3].tolist()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        m.generate(ids, max_new_tokens=6, eos_token_id=[eos, m.config.vocab_size])
    with pytest.raises(TypeError, match="list of ints"):
        m.generate(ids, max_new_tokens=6, eos_token_id=[eos, "x"])
    listed = MambaForCausalLM.from_pretrained(_with_config(tmp_path, "base", eos_token_id=[eos, other]), device="cpu")
    assert listed.config.eos_token_id == eos and listed.config.more_eos_token_ids == (other,)
    assert np.array_equal(listed.generate(ids, max_new_tokens=6), got)
    raw = listed.model.generate(ids, 6, eos_token_id=[eos, other])  # the engine's call: padded with the first id
    assert raw.tolist() == [[free[0, 0], eos, eos], free[1, :3].tolist()]
    if importlib.util.find_spec("torch") and importlib.util.find_spec("transformers"):
        torch, hf, _, _, _ = _against_transformers()
        theirs = hf.generate(torch.from_numpy(ids), max_new_tokens=6, eos_token_id=[eos, other], pad_token_id=pad)
        assert theirs.tolist() == got.tolist()


def test_pad_token_defaults_to_the_configs(tmp_path):
    """Without pad_token_id, a row stopped at eos is padded with the
    config's pad_token_id, as transformers' generation config takes it;
    with none in the config, with eos (the engine's repeat)."""
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    ids, eos, free = early_stop_pair(m.model, np.random.default_rng())
    pad = unused_id(ids, m.config.vocab_size, eos)  # not read as padding
    padded = MambaForCausalLM.from_pretrained(_with_config(tmp_path, "base", pad_token_id=pad), device="cpu")
    assert padded.config.pad_token_id == pad and m.config.pad_token_id == 0
    got = padded.generate(ids, max_new_tokens=6, eos_token_id=eos)
    assert np.array_equal(got[0, 3:], [free[0, 0], eos] + [pad] * 4), (got, free)
    assert np.array_equal(got[1, 3:], free[1])
    (tmp_path / "none").mkdir()
    bare = MambaForCausalLM.from_pretrained(_with_config(tmp_path / "none", "base", pad_token_id=None), device="cpu")
    assert bare.config.pad_token_id is None
    assert np.array_equal(bare.generate(ids, max_new_tokens=6, eos_token_id=eos)[0, 3:], [free[0, 0]] + [eos] * 5)


def test_transformers_script_conveniences():
    """What scripts written for transformers also call: AutoModelForCausalLM,
    generate's max_length (prompt included) and use_cache, .device and
    .dtype, float16 and float64 embeddings."""
    from mambago.hf import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    rng = np.random.default_rng()
    ids = rng.integers(1, m.config.vocab_size, size=(2, 5))
    free = m.generate(ids, max_new_tokens=4)
    assert free.shape[0] == 2 and 6 <= free.shape[1] <= 9  # fewer where both rows stop at eos
    assert np.array_equal(m.generate(ids, max_length=9), free)
    assert np.array_equal(m.generate(ids, max_new_tokens=4, max_length=6), free)  # the first wins
    assert np.array_equal(m.generate(ids, max_new_tokens=4, use_cache=False), free)
    with pytest.raises(ValueError, match="max_length=5 leaves no room"):
        m.generate(ids, max_length=5)
    assert np.array_equal(m(ids, use_cache=True).logits, m(ids).logits)
    plain = m(ids, output_hidden_states=False, cache_params=None, return_dict=True).logits
    assert np.array_equal(plain, m(ids).logits)
    as_tuple = m(ids, labels=ids, return_dict=False)  # (loss, logits, cache), as transformers gives it
    assert isinstance(as_tuple, tuple) and len(as_tuple) == 3 and np.array_equal(as_tuple[1], plain)
    assert isinstance(as_tuple[2], MambaCache)
    assert len(m(ids, labels=ids, return_dict=False, use_cache=False)) == 2
    emb = rng.standard_normal((1, 3, m.config.hidden_size)).astype(np.float16)
    assert np.array_equal(m(inputs_embeds=emb).logits, m(inputs_embeds=emb.astype(np.float32)).logits)
    wide = rng.standard_normal((1, 3, m.config.hidden_size))  # float64, as the GPU path takes it
    assert np.array_equal(m(inputs_embeds=wide).logits, m(inputs_embeds=wide.astype(np.float32)).logits)
    with pytest.raises(TypeError, match="float32"):
        m(inputs_embeds=wide.astype(np.int32))
    try:
        import torch
    except ImportError:
        assert m.device == "cpu" and m.dtype == "float32"
    else:
        assert m.device == torch.device("cpu") and m.dtype == torch.float32
        t = torch.from_numpy(emb.astype(np.float32)).to(torch.bfloat16)
        got = m(inputs_embeds=t).logits
        assert isinstance(got, torch.Tensor) and torch.equal(got, m(inputs_embeds=t.float()).logits)
        t64 = torch.from_numpy(wide)
        assert torch.equal(m(inputs_embeds=t64).logits, m(inputs_embeds=t64.float()).logits)


def test_backbone_returns_every_positions_state():
    """MambaModel (and AutoModel), transformers' backbone: a forward call's
    last_hidden_state is Model.prefill's every position's state, padding
    zero, read as transformers reads it; a backbone checkpoint loads;
    arguments that ask for more are a TypeError."""
    from mambago.hf import AutoModel, BaseModelOutput, FalconMambaModel

    assert AutoModel is MambaModel and FalconMambaModel is MambaModel
    m = AutoModel.from_pretrained(case_dir("base"), device="cpu")
    ref = mambago.Model.from_pretrained(case_dir("base"), device="cpu")
    rng = np.random.default_rng()
    ids = rng.integers(1, m.config.vocab_size, size=(3, 11))
    mask = np.ones_like(ids)
    mask[1, :4] = mask[2, 8:] = 0
    out = m(ids, attention_mask=mask)
    assert isinstance(out, BaseModelOutput) and out.last_hidden_state.shape == (3, 11, m.config.hidden_size)
    assert np.array_equal(out.last_hidden_state, ref.prefill(ids, output="all", attention_mask=mask))
    assert not out.last_hidden_state[mask == 0].any()
    assert out[0] is out.last_hidden_state and out["last_hidden_state"] is out.last_hidden_state
    assert out.to_tuple() == (out.last_hidden_state, out.cache) and isinstance(out.cache, MambaCache)
    assert out["cache"] is out.cache_params is out.cache
    states, _ = m(ids, attention_mask=mask, return_dict=False, output_hidden_states=None)
    bare = m(ids, use_cache=False)
    assert bare.cache is None and bare.to_tuple() == (bare.last_hidden_state,)
    assert np.array_equal(states, out.last_hidden_state)
    with pytest.raises(KeyError):
        out["logits"]
    emb = rng.standard_normal((1, 5, m.config.hidden_size)).astype(np.float32)
    assert np.array_equal(m(inputs_embeds=emb, use_cache=False).last_hidden_state,
                          ref.prefill(inputs_embeds=emb, output="all"))
    with pytest.raises(TypeError, match="output_attentions"):  # Mamba has none
        m(ids, output_attentions=True)
    with pytest.raises(TypeError, match="MambaModel.from_pretrained"):
        MambaModel(case_dir("base"))
    assert repr(m).startswith("mambago.hf.MambaModel(") and m.eval() is m and m.to("cpu") is m
    backbone = AutoModel.from_pretrained(case_dir("mambamodel"), device="cpu")  # saved from a MambaModel
    ids = rng.integers(1, backbone.config.vocab_size, size=(2, 6))
    assert np.array_equal(backbone(ids).last_hidden_state, backbone.model.prefill(ids, output="all"))


def test_cache_continues_the_sequences():
    """A forward call's cache (use_cache, transformers' default) continues
    its sequences: a prompt fed in chunks, then decode steps of one token a
    row, gives the whole sequence's logits, padded rows included (each
    row's state is its tokens' alone); cache_position restarts it at 0 and
    must agree elsewhere; logits_to_keep keeps the last positions; a copy
    continues apart; the backbone's cache likewise. Misuse is an error that
    says what to pass."""
    import copy

    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    rng = np.random.default_rng()
    B, T, V = 3, 13, m.config.vocab_size
    ids = rng.integers(1, V, size=(B, T))
    mask = np.ones_like(ids)
    mask[1, :4] = 0  # left padding in the first chunk
    whole = m(ids, attention_mask=mask, use_cache=False)
    assert whole.cache is None and whole.cache_params is None
    out = m(ids[:, :6], attention_mask=mask[:, :6])
    cache = out.cache
    assert isinstance(cache, MambaCache) and cache is out.cache_params and cache.get_seq_length() == 6
    parts = [out.logits, m(ids[:, 6:10], cache=cache).logits]
    before_steps = cache.copy()
    for t in range(10, T):  # decode steps (Model.step), a mask of the whole sequence so far given
        step = m(ids[:, t:t + 1], cache_params=cache, attention_mask=mask[:, :t + 1], cache_position=np.array([t]))
        assert step.cache is cache and step.logits.shape == (B, 1, V)
        parts.append(step.logits)
    assert cache.seen == T
    assert rel_err(np.concatenate(parts, axis=1), whole.logits) <= 1e-4
    again = copy.deepcopy(before_steps)
    tail = m(ids[:, 10:], cache=again, logits_to_keep=2).logits  # the steps' tokens as one chunk
    assert tail.shape == (B, 2, V) and rel_err(tail, whole.logits[:, -2:]) <= 1e-4
    assert before_steps.seen == 10 and again.seen == T
    # Padding in a chunk, right then left: a row's state is its tokens',
    # so the next chunk continues from them, not from the padding.
    right = np.ones((B, 6), np.int64)
    right[0, 3:] = 0
    padded = m(ids[:, :6], attention_mask=right)
    alone = m(ids[:1, :3])
    then = m(ids[:, 6:9], cache=padded.cache, attention_mask=np.array([[0, 1, 1]] + [[1, 1, 1]] * (B - 1)))
    assert rel_err(then.logits[:1, 1:], m(ids[:1, 7:9], cache=alone.cache).logits) <= 1e-4
    assert rel_err(m(ids, logits_to_keep=1).logits, m(ids).logits[:, -1:]) <= 1e-6  # the "last" output
    assert rel_err(m(ids, logits_to_keep=np.array([0, -1])).logits, m(ids).logits[:, [0, T - 1]]) <= 1e-6
    # cache_position 0 starts the cache over (transformers 4's new prompt).
    restart = m(ids[:, :5], cache=cache, cache_position=np.arange(5))
    assert restart.cache is cache and cache.seen == 5
    assert np.array_equal(restart.logits, m(ids[:, :5]).logits)
    backbone = MambaModel(m.model)
    first = backbone(ids[:, :8], attention_mask=mask[:, :8])
    rest = backbone(ids[:, 8:], cache=first.cache).last_hidden_state
    full = backbone(ids, attention_mask=mask).last_hidden_state
    assert rel_err(rest, full[:, 8:]) <= 1e-4 and first.cache.seen == T
    for kw, exc, match in ((dict(cache=object()), TypeError, "MambaCache a forward call"),
                           (dict(cache=cache, cache_params=cache), TypeError, "not both"),
                           (dict(cache=m(ids[:2]).cache), ValueError, "holds 2 sequences"),
                           (dict(cache=MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")(ids).cache),
                            ValueError, "another model"),
                           (dict(cache=cache, cache_position=[9]), ValueError, "starts at 9, but the cache holds 5"),
                           (dict(cache_position=[9]), ValueError, "no cache was given"),
                           (dict(logits_to_keep=-1), ValueError, "0 .all positions. or more"),
                           (dict(logits_to_keep=True), TypeError, "logits_to_keep"),
                           (dict(logits_to_keep=np.array([T])), ValueError, "outside the 13 positions"),
                           (dict(labels=ids, logits_to_keep=1), ValueError, "every position's logits"),
                           (dict(attention_mask=np.ones((B, T + 2))), ValueError, "attention_mask has shape"),
                           (dict(cache=cache, cache_position=[0], attention_mask=np.ones((B, T + 2))), ValueError,
                            "attention_mask has shape")):
        with pytest.raises(exc, match=match):
            m(ids, **kw)
    before = cache.state.ssm_state(0)
    with pytest.raises(ValueError, match="padding between its tokens"):  # refused after the restart was asked
        m(ids, cache=cache, cache_position=np.arange(T), attention_mask=np.array([[1, 0, 1] + [1] * (T - 3)] * B))
    with pytest.raises(ValueError, match="0 .all positions. or more"):
        m(ids, cache=cache, cache_position=np.arange(T), logits_to_keep=-2)
    assert cache.seen == 5 and np.array_equal(cache.state.ssm_state(0), before)  # the refused calls left it alone
    assert m(ids[:, :1], cache=cache, use_cache=0).cache is None and cache.seen == 6  # used, not returned
    with pytest.raises(TypeError, match="wraps a mambago.State"):
        MambaCache(object())
    assert repr(MambaCache(m.model.new_state(2), seen=4)) == "mambago.hf.MambaCache(batch_size=2, seen=4)"


def _against_transformers():
    """torch, transformers' MambaForCausalLM of the base fixture, ours from
    it, fresh ids [2, 9] and a mask padding row 0's first 3 on the left;
    skips where torch or transformers is not installed."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    hf = transformers.MambaForCausalLM.from_pretrained(case_dir("base")).eval()
    ours = MambaForCausalLM.from_model(hf, device="cpu")
    ids = torch.randint(1, hf.config.vocab_size, (2, 9))
    left = torch.ones_like(ids)
    left[0, :3] = 0
    return torch, hf, ours, ids, left


def test_cache_matches_transformers():
    """A hand-written greedy decoding loop, as scripts write it for
    transformers (use_cache=True, then cache= each step), gives
    transformers' logits at every step (f32, 1e-4) and its tokens, for a
    batch as it is and left-padded. A prompt continued in chunks gives
    transformers' logits of the whole prompt. (transformers 5.25's own
    chunked continuation does not: its positions after the first chunk
    came out 14.6 off in logits whose largest is 15.4, where one token at a
    time agrees with its whole prompt to 3e-5.)"""
    torch, hf, ours, ids, left = _against_transformers()
    for mask in (None, left):
        with torch.no_grad():
            want = hf(ids, attention_mask=mask, use_cache=True)
        got = ours(ids, attention_mask=mask, use_cache=True)
        at = slice(None) if mask is None else mask == 1  # the tokens' (the padding's are zero here)
        assert rel_err(got.logits[at].numpy(), want.logits[at].numpy()) <= 1e-4
        for step in range(6):
            nxt = want.logits[:, -1:].argmax(-1)
            assert torch.equal(got.logits[:, -1:].argmax(-1), nxt)
            with torch.no_grad():
                want = hf_continue(hf, nxt, want, ids.shape[1] + step)
            got = ours(nxt, cache=got.cache, use_cache=True)
            assert got.logits.shape == want.logits.shape == (2, 1, hf.config.vocab_size)
            assert rel_err(got.logits.numpy(), want.logits.numpy()) <= 1e-4
    with torch.no_grad():
        want = hf(ids).logits
    got = ours(ids[:, 4:], cache=ours(ids[:, :4]).cache).logits
    assert rel_err(got.numpy(), want[:, 4:].numpy()) <= 1e-4


def test_generate_returns_scores():
    """return_dict_in_generate: .sequences are generate's tokens; logits are
    each step's (Model.step's, within 1e-5); scores are them greedy, and
    sampled: divided by temperature, -inf outside the top k, the token
    drawn always among the kept; compute_transition_scores reads the taken
    tokens' scores, as log probabilities with normalize_logits."""
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    rng = np.random.default_rng()
    V = m.config.vocab_size
    ids = rng.integers(1, V, size=(2, 5))
    plain = m.generate(ids, max_new_tokens=6)
    out = m.generate(ids, max_new_tokens=6, return_dict_in_generate=True, output_scores=True, output_logits=True)
    n = plain.shape[1] - 5
    assert np.array_equal(out.sequences, plain) and out[0] is out.sequences and out["scores"] is out.scores
    assert len(out.scores) == len(out.logits) == n and all(z.shape == (2, V) for z in out.scores)
    state = m.model.new_state(2)
    steps = [m.model.logits(m.model.prefill(ids, state=state))]  # the steps' own logits
    steps += [m.model.step(plain[:, 5 + i], state) for i in range(n - 1)]
    eos = m.config.eos_token_id
    for i, want in enumerate(steps):
        assert rel_err(out.logits[i], want) <= 3e-4, i  # a prefill against steps: enginetest.EquivTol
        assert np.array_equal(out.scores[i], out.logits[i])  # greedy: no warping
        going = ~np.any(plain[:, 5:5 + i] == eos, axis=1)  # a row past its eos is fed and given eos (pad)
        assert np.array_equal(np.argmax(out.scores[i], axis=-1)[going], plain[going, 5 + i])
    bare = m.generate(ids, max_new_tokens=6, return_dict_in_generate=True)
    assert np.array_equal(bare.sequences, plain) and bare.scores is None and bare.logits is None
    k, temp = 5, 0.7
    sampled = m.generate(ids, max_new_tokens=6, do_sample=True, top_k=k, temperature=temp, seed=11,
                         return_dict_in_generate=True, output_scores=True, output_logits=True)
    assert np.array_equal(sampled.sequences, m.generate(ids, max_new_tokens=6, do_sample=True, top_k=k,
                                                        temperature=temp, seed=11))
    for i, (z, raw) in enumerate(zip(sampled.scores, sampled.logits, strict=True)):
        kept = np.isfinite(z)
        assert np.all(kept.sum(axis=1) >= k) and np.all(kept.sum(axis=1) <= k + 1)  # a tie at the k-th may stay
        assert np.allclose(z[kept], raw[kept] / np.float32(temp), rtol=1e-6)
        going = ~np.any(sampled.sequences[:, 5:5 + i] == eos, axis=1)
        assert np.all(kept[np.arange(2), sampled.sequences[:, 5 + i]][going])
    got = m.compute_transition_scores(sampled.sequences, sampled.scores, normalize_logits=True)
    assert got.shape == (2, len(sampled.scores)) and np.all(got <= 0)
    z = sampled.scores[0].astype(np.float64)
    logp = z - z.max(axis=-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(axis=-1, keepdims=True))
    assert np.allclose(got[:, 0], logp[np.arange(2), sampled.sequences[:, 5]], atol=1e-5)
    rows = np.repeat(np.arange(2)[:, None], len(sampled.scores), axis=1)  # each row its own beam: the same scores
    assert np.array_equal(m.compute_transition_scores(sampled.sequences, sampled.scores, beam_indices=rows),
                          m.compute_transition_scores(sampled.sequences, sampled.scores))


def test_generate_scores_match_transformers():
    """return_dict_in_generate with output_scores and output_logits,
    greedy: transformers' sequences, its scores and logits at every step
    (1e-4), and its compute_transition_scores; top-p warping of logits as
    transformers' sampling warps them (its processors, applied here)."""
    torch, hf, ours, ids, left = _against_transformers()
    kw = dict(max_new_tokens=6, return_dict_in_generate=True, output_scores=True, output_logits=True)
    for mask in (None, left):
        with torch.no_grad():
            want = hf.generate(ids, attention_mask=mask, do_sample=False, **kw)
        got = ours.generate(ids, attention_mask=mask, **kw)
        assert torch.equal(got.sequences, want.sequences)
        assert len(got.scores) == len(want.scores) and len(got.logits) == len(want.logits)
        for g, w in zip(got.scores + got.logits, want.scores + want.logits, strict=True):
            assert isinstance(g, torch.Tensor) and rel_err(g.numpy(), w.numpy()) <= 1e-4
        for norm in (False, True):
            assert rel_err(ours.compute_transition_scores(got.sequences, got.scores, normalize_logits=norm).numpy(),
                           hf.compute_transition_scores(want.sequences, want.scores, normalize_logits=norm).numpy()
                           ) <= 1e-4
    from transformers.generation.logits_process import (EpsilonLogitsWarper, EtaLogitsWarper, MinPLogitsWarper,
                                                        TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper,
                                                        TypicalLogitsWarper)
    from mambago.hf import _warped

    rng = np.random.default_rng()
    for temp, k, p, mp, typ, eps, eta in (
            (0.7, 0, 0.9, 0.0, 1.0, 0.0, 0.0), (1.0, 20, 1.0, 0.0, 1.0, 0.0, 0.0), (1.3, 50, 0.5, 0.0, 1.0, 0.0, 0.0),
            (1.0, 0, 0.99, 0.0, 1.0, 0.0, 0.0), (0.8, 0, 1.0, 0.1, 1.0, 0.0, 0.0), (1.2, 30, 0.9, 0.05, 1.0, 0.0, 0.0),
            (1.0, 0, 0.95, 0.3, 1.0, 0.0, 0.0), (1.0, 0, 1.0, 0.0, 0.9, 0.0, 0.0), (0.7, 40, 1.0, 0.0, 0.5, 0.0, 0.0),
            (1.0, 0, 1.0, 0.0, 1.0, 3e-3, 0.0), (1.4, 0, 0.9, 0.0, 1.0, 0.02, 0.0), (1.0, 0, 1.0, 0.0, 1.0, 0.0, 2e-3),
            (0.9, 60, 1.0, 0.0, 1.0, 0.0, 0.05), (1.1, 0, 0.97, 0.02, 0.8, 1e-3, 4e-3),
            *((float(rng.uniform(0.5, 1.5)), int(rng.choice([0, 30, 100])), float(rng.choice([1.0, 0.9])), 0.0,
               float(rng.choice([1.0, rng.uniform(0.2, 0.99)])), float(rng.choice([0.0, rng.uniform(1e-4, 0.02)])),
               float(rng.choice([0.0, rng.uniform(1e-4, 0.02)]))) for _ in range(12))):
        logits = torch.from_numpy(rng.normal(size=(3, 200)).astype(np.float32)) * float(rng.uniform(1, 5))
        want = logits.clone()
        for make, on in ((lambda: TemperatureLogitsWarper(temp), temp != 1.0), (lambda: TopKLogitsWarper(k), k > 0),
                         (lambda: TopPLogitsWarper(p), p < 1.0), (lambda: MinPLogitsWarper(mp), mp > 0),
                         (lambda: TypicalLogitsWarper(typ), typ < 1.0), (lambda: EpsilonLogitsWarper(eps), eps > 0),
                         (lambda: EtaLogitsWarper(eta), eta > 0)):
            want = make()(None, want) if on else want
        got = _warped(logits.numpy(), temp, k, p, mp, typ, eps, eta)
        assert np.array_equal(np.isfinite(got), torch.isfinite(want).numpy()), (temp, k, p, mp, typ, eps, eta)
        assert np.allclose(got[np.isfinite(got)], want[torch.isfinite(want)].numpy(), rtol=1e-6)


def test_generate_hidden_states_match_transformers():
    """return_dict_in_generate with output_hidden_states, greedy:
    transformers' sequences and its hidden_states at every step, each
    layer's and the final norm's (1e-4), for a batch as it is and
    left-padded (at its tokens), with an eos id that ends a row early so
    that the pad id is fed after it. Beam search refuses it."""
    torch, hf, ours, ids, left = _against_transformers()
    T, L = ids.shape[1], hf.config.num_hidden_layers
    for mask in (None, left):
        with torch.no_grad():
            free = hf.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=8, eos_token_id=[],
                               pad_token_id=0)[:, T:].tolist()
        # an eos id that row 1 takes within 6 tokens and row 0 never: row 1 is then fed the pad id
        eos = next(t for t in free[1][:6] if t not in free[0])
        end = free[1].index(eos)
        kw = dict(max_new_tokens=8, eos_token_id=eos, pad_token_id=0, return_dict_in_generate=True,
                  output_hidden_states=True)
        with torch.no_grad():
            want = hf.generate(ids, attention_mask=mask, do_sample=False, **kw)
        got = ours.generate(ids, attention_mask=mask, **kw)
        assert torch.equal(got.sequences, want.sequences)
        assert got.sequences.shape[1] == T + 8 and (got.sequences[1, T + end + 1:] == 0).all()
        assert len(got.hidden_states) == len(want.hidden_states) == 8
        assert got.to_tuple() == (got.sequences, got.hidden_states) and got["hidden_states"] is got.hidden_states
        for i, (g_step, w_step) in enumerate(zip(got.hidden_states, want.hidden_states, strict=True)):
            assert len(g_step) == len(w_step) == L + 1
            at = slice(None) if mask is None or i > 0 else mask == 1
            for j, (g, w) in enumerate(zip(g_step, w_step, strict=True)):
                assert isinstance(g, torch.Tensor) and g.dtype == torch.float32 and g.shape == w.shape, (i, j)
                assert rel_err(g[at].numpy(), w[at].numpy()) <= 1e-4, (i, j, mask is None)
            if mask is not None and i == 0:
                assert all(not h[mask == 0].any() for h in g_step)  # zero at the padding
    assert ours.generate(ids, max_new_tokens=3, return_dict_in_generate=True).hidden_states is None
    assert ours.generate(ids, max_new_tokens=3, output_hidden_states=True).shape == (2, T + 3)  # a tensor, as there
    with pytest.raises(ValueError, match="output_hidden_states with beam search"):
        ours.generate(ids, max_new_tokens=3, num_beams=2, return_dict_in_generate=True, output_hidden_states=True)


def test_hidden_states_are_each_layers_residual():
    """output_hidden_states=True: transformers' hidden_states, each layer's
    residual stream [B, T, d] and then the final norm's output (the
    backbone's last_hidden_state, whose logits are the LM's), zero at the
    padding, in the tuple after the cache; Model.prefill_layers' arrays; a
    cache continued gives the whole sequence's layers at the new positions."""
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    backbone = MambaModel(m.model)
    rng = np.random.default_rng()
    B, T, L, d = 3, 11, m.config.num_hidden_layers, m.config.hidden_size
    ids = rng.integers(1, m.config.vocab_size, size=(B, T))
    mask = np.ones_like(ids)
    mask[1, :4] = mask[2, 8:] = 0
    out = backbone(ids, attention_mask=mask, output_hidden_states=True)
    hs = out.hidden_states
    assert isinstance(hs, tuple) and len(hs) == L + 1 and all(h.shape == (B, T, d) for h in hs)
    assert np.array_equal(hs[-1], out.last_hidden_state)
    assert np.array_equal(out.last_hidden_state, backbone(ids, attention_mask=mask).last_hidden_state)
    assert all(not h[mask == 0].any() for h in hs)
    final, layers = m.model.prefill_layers(ids, attention_mask=mask)
    assert np.array_equal(final, hs[-1]) and layers.shape == (L, B, T, d)
    assert all(np.array_equal(layers[i], hs[i]) for i in range(L))
    assert out.to_tuple() == (out.last_hidden_state, out.cache, hs) and out["hidden_states"] is hs
    lm = m(ids, attention_mask=mask, output_hidden_states=True)
    assert rel_err(lm.logits, m.model.logits(hs[-1])) <= 1e-6 and len(lm.hidden_states) == L + 1
    assert lm.to_tuple() == (lm.logits, lm.cache, lm.hidden_states)
    assert m(ids, output_hidden_states=False).hidden_states is None
    first = backbone(ids[:, :6], output_hidden_states=True)
    rest = backbone(ids[:, 6:], cache=first.cache, output_hidden_states=True).hidden_states
    whole = backbone(ids, output_hidden_states=True).hidden_states
    for i in range(L + 1):
        assert rel_err(rest[i], whole[i][:, 6:]) <= 1e-4, i
    tail = m(ids[:, 6:], cache=m(ids[:, :6]).cache, output_hidden_states=True, logits_to_keep=1)
    assert tail.logits.shape == (B, 1, m.config.vocab_size) and tail.hidden_states[0].shape == (B, T - 6, d)


def test_hidden_states_match_transformers():
    """hidden_states against transformers' own (f32, 1e-4), every layer's,
    as is and at the tokens of a left-padded batch."""
    torch, hf, ours, ids, left = _against_transformers()
    for mask in (None, left):
        with torch.no_grad():
            want = hf(ids, attention_mask=mask, output_hidden_states=True).hidden_states
        got = ours(ids, attention_mask=mask, output_hidden_states=True).hidden_states
        assert len(got) == len(want) == hf.config.num_hidden_layers + 1
        at = slice(None) if mask is None else mask == 1
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert isinstance(g, torch.Tensor) and g.shape == w.shape
            assert rel_err(g[at].numpy(), w[at].numpy()) <= 1e-4, (i, mask is None)


def test_refuses_other_architectures(tmp_path):
    """A config of another model type fails at load, naming it, even where
    its dimensions would pass."""
    import json
    import shutil

    from mambago.hf import AutoModelForCausalLM

    for name in ("config.json", "model.safetensors"):
        shutil.copy(f"{case_dir('base')}/{name}", tmp_path / name)
    config = json.loads((tmp_path / "config.json").read_text())
    config["model_type"] = "llama"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match='model_type "llama"'):
        AutoModelForCausalLM.from_pretrained(tmp_path, device="cpu")


def test_refuses_what_it_cannot_do():
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    ids = np.array([[5, 17, 33]])
    with pytest.raises(ValueError, match="padding between its tokens"):
        m(ids, attention_mask=np.array([[1, 0, 1]]))
    with pytest.raises(ValueError, match="padding between its tokens"):
        m.generate(ids, attention_mask=np.array([[1, 0, 1]]))
    with pytest.raises(TypeError, match="logits, loss, cache and hidden states only"):
        m(ids, output_attentions=True)
    with pytest.raises(TypeError, match="cache must be the mambago.hf.MambaCache"):
        m(ids, cache_params=object())
    with pytest.raises(TypeError, match="from_pretrained"):
        MambaForCausalLM(case_dir("base"))  # a path where a loaded model goes
    with pytest.raises(TypeError, match="unsupported argument 'quantization_config'"):
        MambaForCausalLM.from_pretrained(case_dir("base"), quantization_config={"load_in_8bit": True})
    held = MambaForCausalLM(mambago.Model.from_state_dict(
        read_safetensors(os.path.join(case_dir("base"), "model.safetensors")), case_dir("base"), device="cpu"))
    with pytest.raises(ValueError, match="runs on cpu in float32 and has no checkpoint folder.*dtype='bfloat16'"):
        held.to("bfloat16")  # from memory: nothing to load again
    assert held.to("cpu", "float32") is held
    for odd in ("mps", "float64"):
        with pytest.raises(ValueError, match="mambago runs on cpu or cuda, in float32, bfloat16 or float16"):
            m.to(odd)
    assert MambaForCausalLM.from_pretrained(case_dir("base"), device_map="cpu").model.device == "cpu"


def test_loss_is_the_next_tokens_cross_entropy():
    """labels give transformers' causal-LM loss: each position's logits
    against the next label, -100 left out, the mean over the rest."""
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    rng = np.random.default_rng()
    V = m.config.vocab_size
    ids = rng.integers(1, V, size=(3, 11))
    labels = ids.copy()
    labels[0, :4] = -100  # a prompt left out
    labels[2, 7] = -100
    out = m(ids, labels=labels)
    z = out.logits.astype(np.float64)[:, :-1]
    logp = z - z.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    nxt = labels[:, 1:]
    b, t = np.nonzero(nxt != -100)
    want = -logp[b, t, nxt[b, t]].mean()
    assert out.loss.dtype == np.float32 and out.loss.shape == ()
    assert abs(float(out.loss) - want) <= 1e-6 * want
    assert out[0] is out.loss and out[1] is out.logits and out["loss"] is out.loss
    assert out.to_tuple() == (out.loss, out.logits, out.cache)
    assert np.array_equal(m(ids, labels=labels, attention_mask=np.ones_like(ids)).loss, out.loss)
    plain = m(ids)
    assert plain.loss is None and plain[0] is plain.logits and plain.to_tuple() == (plain.logits, plain.cache)
    with pytest.raises(KeyError):
        plain["loss"]
    assert np.isnan(m(ids, labels=np.full_like(ids, -100)).loss)
    for bad, exc, match in ((labels[:, :5], ValueError, "shape"), (labels.astype(np.float32), TypeError, "integers"),
                            (np.full_like(ids, V), ValueError, f"{V}"), (np.full_like(ids, -1), ValueError, "-1")):
        with pytest.raises(exc, match=match):
            m(ids, labels=bad)


def test_dtype_auto():
    """torch_dtype="auto" (or dtype=), as scripts load models: the type the
    checkpoint's config names, on the CPU engine (where a bf16 checkpoint's
    logits are its float32 load's bits) and on a GPU (below, where one is
    usable)."""
    ids = np.random.default_rng().integers(1, 64, size=(2, 9))
    for name, want in (("bf16", "bfloat16"), ("base", "float32")):
        f32 = MambaForCausalLM.from_pretrained(case_dir(name), device="cpu")
        for kw in ({"torch_dtype": "auto"}, {"dtype": "auto", "device_map": "cpu"}):
            m = MambaForCausalLM.from_pretrained(case_dir(name), device="cpu", **kw)
            assert m.model.dtype == want, (name, kw)
            assert np.array_equal(m(ids).logits, f32(ids).logits), (name, kw)
    if mambago.cuda_is_available():
        for name, want in (("bf16", "bfloat16"), ("base", "float32")):
            assert MambaForCausalLM.from_pretrained(case_dir(name), device="cuda", torch_dtype="auto").model.dtype == want
    with pytest.raises(ValueError, match="automatic"):
        MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu", torch_dtype="automatic")


def test_device_and_dtype_shorthands(capfd):
    """.to(), .cuda(), .cpu(), .float(), .half() and .bfloat16(), as scripts
    call them: the model itself where it already is so; else the same
    model, its checkpoint loaded again that way (said on stderr), with the
    numbers of a model loaded so, its generation_config kept. Where no GPU
    is, .cuda() is the loader's ValueError, and the model stays as it was."""
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    first = m.model
    assert m.cpu() is m and m.float() is m and m.to("cpu", non_blocking=True) is m and m.model is first
    assert "loads" not in capfd.readouterr().err
    m.generation_config.max_new_tokens = 3
    ids = np.random.default_rng().integers(1, m.config.vocab_size, size=(2, 6))
    for call, dtype in ((m.half, "float16"), (m.bfloat16, "bfloat16"), (lambda: m.to(dtype="half"), "float16"),
                        (m.float, "float32")):
        assert call() is m and m.model.dtype == dtype and m.model.device == "cpu"
        assert f"loads {case_dir('base')} again, as {dtype} on cpu" in capfd.readouterr().err
        want = mambago.Model.from_pretrained(case_dir("base"), device="cpu", dtype=dtype)
        assert np.array_equal(m(ids).logits, want.logits(want.prefill(ids, output="all")))
        assert m.generate(ids).shape == (2, 9)  # the generation config kept
    if not mambago.cuda_is_available():
        before = m.model
        for call in (m.cuda, lambda: m.cuda(0), lambda: m.to("cuda:0")):
            with pytest.raises(ValueError, match="no usable GPU"):
                call()
        assert m.model is before and m.model.device == "cpu"
    else:  # the CUDA engine, loaded as asked, then back
        assert m.cuda() is m and m.model.device == "cuda" and m.model.dtype == "float32"
        assert m.to("cpu", "bfloat16") is m and m.model.device == "cpu" and m.model.dtype == "bfloat16"


def test_matches_transformers():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    hf = transformers.MambaForCausalLM.from_pretrained(case_dir("base")).eval()
    ours = MambaForCausalLM.from_model(hf, device="cpu")
    ids = torch.randint(1, hf.config.vocab_size, (2, 9))
    with torch.no_grad():
        want_logits = hf(ids).logits
        want_tokens = hf.generate(ids, max_new_tokens=6, do_sample=False)
    got = ours(ids).logits
    assert isinstance(got, torch.Tensor) and got.shape == want_logits.shape
    assert rel_err(got.numpy(), want_logits.numpy()) <= 1e-4
    labels = ids.clone()
    labels[:, :3] = -100
    with torch.no_grad():
        want_loss = hf(ids, labels=labels).loss
    got_loss = ours(ids, labels=labels).loss
    assert isinstance(got_loss, torch.Tensor) and got_loss.shape == want_loss.shape == ()
    assert abs(got_loss.item() - want_loss.item()) <= 1e-4 * want_loss.item(), (got_loss, want_loss)
    tokens = ours.generate(ids, max_new_tokens=6)
    assert isinstance(tokens, torch.Tensor) and torch.equal(tokens, want_tokens), (tokens, want_tokens)
    with torch.no_grad():
        want = hf.generate(ids.to(hf.device), max_length=13, do_sample=False)
    assert torch.equal(ours.generate(ids.to(ours.device), max_length=13), want)
    assert ours.device == hf.device and ours.dtype == hf.dtype


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_cpu_16bit_weights_match_transformers(dtype):
    """dtype bfloat16/float16 on the CPU engine keeps the weight matrices in
    that type and computes in float32: transformers' float32 model with
    those matrices (in_proj, x_proj, dt_proj, out_proj, the embeddings)
    rounded to the type gives the same logits (within 1e-4), step by step
    through a cache as well, and the same greedy tokens. The model is
    loaded from transformers' own, unrounded."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    hf = transformers.MambaForCausalLM.from_pretrained(case_dir("base")).eval()
    ours = MambaForCausalLM.from_model(hf, device="cpu", dtype=dtype)
    assert ours.model.dtype == dtype and ours.dtype == getattr(torch, dtype)
    rounded = transformers.MambaForCausalLM.from_pretrained(case_dir("base")).eval()
    with torch.no_grad():
        for name, p in rounded.named_parameters():
            if name.endswith(("proj.weight", "embeddings.weight")):
                p.copy_(p.to(getattr(torch, dtype)).float())
        changed = (rounded.backbone.layers[0].mixer.in_proj.weight != hf.backbone.layers[0].mixer.in_proj.weight)
        assert changed.any()  # the rounding is not a no-op on these weights
    ids = torch.randint(1, hf.config.vocab_size, (2, 11))
    with torch.no_grad():
        want = rounded(ids, use_cache=True)
        far = hf(ids).logits
    got = ours(ids)
    assert rel_err(got.logits.numpy(), want.logits.numpy()) <= 1e-4
    assert rel_err(far.numpy(), want.logits.numpy()) > 1e-4  # unrounded weights would fail the check above
    nxt = torch.randint(1, hf.config.vocab_size, (2, 1))
    with torch.no_grad():
        want_step = hf_continue(rounded, nxt, want, ids.shape[1]).logits
    got_step = ours(nxt, cache=got.cache).logits
    assert rel_err(got_step.numpy(), want_step.numpy()) <= 1e-4
    with torch.no_grad():
        want_tokens = rounded.generate(ids, max_new_tokens=6, do_sample=False)
    assert torch.equal(ours.generate(ids, max_new_tokens=6), want_tokens)


def test_from_model_follows_the_models_dtype():
    """from_model without dtype= takes the transformers model's own: a
    bf16 model loads with bf16 weights on the CPU (its float32 forward on
    those weights gives the logits, within 1e-4, and the greedy tokens),
    .dtype says so as transformers' does, and dtype= still overrides.
    .float() loads again from the transformers model while it lives."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    hf = transformers.MambaForCausalLM.from_pretrained(case_dir("base")).eval().to(torch.bfloat16)
    ours = MambaForCausalLM.from_model(hf, device="cpu")
    assert ours.dtype == hf.dtype == torch.bfloat16 and ours.model.dtype == "bfloat16"
    ref = transformers.MambaForCausalLM.from_pretrained(case_dir("base")).eval().to(torch.bfloat16).float()
    ids = torch.randint(1, hf.config.vocab_size, (2, 10))
    with torch.no_grad():
        want = ref(ids).logits
        want_tokens = ref.generate(ids, max_new_tokens=5, do_sample=False)
    assert rel_err(ours(ids).logits.numpy(), want.numpy()) <= 1e-4
    assert torch.equal(ours.generate(ids, max_new_tokens=5), want_tokens)
    assert MambaForCausalLM.from_model(hf, device="cpu", dtype="float32").model.dtype == "float32"
    assert MambaForCausalLM.from_model(ref, device="cpu").model.dtype == "float32"
    # .float() loads again from the transformers model while it is in memory: the bf16 weights' float32 values
    assert ours.float() is ours and ours.model.dtype == "float32"
    assert rel_err(ours(ids).logits.numpy(), want.numpy()) <= 1e-4
    del hf
    import gc

    gc.collect()
    with pytest.raises(ValueError, match="no checkpoint folder or transformers model to load again from"):
        ours.bfloat16()


def test_padding_after_eos_matches_transformers(tmp_path):
    """A batch where one row reaches eos first, from a checkpoint whose
    pad_token_id is not its eos: transformers' greedy tokens, the stopped
    row padded with the config's pad_token_id."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    base = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    ids, eos, _ = early_stop_pair(base.model, np.random.default_rng())
    path = _with_config(tmp_path, "base", pad_token_id=(eos + 3) % base.config.vocab_size, eos_token_id=eos)
    hf = transformers.MambaForCausalLM.from_pretrained(path).eval()
    ours = MambaForCausalLM.from_pretrained(path, device="cpu")
    t = torch.from_numpy(ids)
    mask = torch.ones_like(t)  # else transformers takes a prompt's pad_token_id for padding
    with torch.no_grad():
        want = hf.generate(t, attention_mask=mask, max_new_tokens=6, do_sample=False)
    got = ours.generate(t, attention_mask=mask, max_new_tokens=6)
    assert torch.equal(got, want), (got, want)
    assert (want[0, 5:] == (eos + 3) % base.config.vocab_size).all()  # padded: the case this checks


def test_backbone_matches_transformers():
    """MambaModel's last_hidden_state against transformers' MambaModel
    (its final norm included), from a backbone checkpoint, padding left."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    hf = transformers.MambaModel.from_pretrained(case_dir("mambamodel")).eval()
    ours = MambaModel.from_model(hf, device="cpu")
    ids = torch.randint(1, hf.config.vocab_size, (2, 9))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    with torch.no_grad():
        want = hf(ids).last_hidden_state
        want_padded = hf(ids, attention_mask=mask).last_hidden_state
    got = ours(ids).last_hidden_state
    assert isinstance(got, torch.Tensor) and got.shape == want.shape
    assert rel_err(got.numpy(), want.numpy()) <= 1e-4
    got = ours(ids, attention_mask=mask).last_hidden_state  # the tokens' states; the padding's are zero here
    assert rel_err(got[mask == 1].numpy(), want_padded[mask == 1].numpy()) <= 1e-4


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_pipelines_follow_transformers(device):
    """transformers' pipeline() takes the stand-ins as it takes its own
    models: "text-generation" (greedy, batched with left padding, new text
    only, token ids, beam search) gives the text transformers' own model
    gives, over fresh prompts; sampling gives each prompt its continuations;
    "feature-extraction" with MambaModel gives transformers' states (1e-4).
    On the GPU, both models are there (f32). The pipelines name the model's
    device: by default transformers' pipeline moves a model to GPU 0 where
    there is one, which for a stand-in loads it again there."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip(f"transformers {transformers.__version__}: its pipeline() takes only its own model classes")
    if device == "cuda" and not (mambago.cuda_is_available() and torch.cuda.is_available()):
        pytest.skip(f"no GPU: {mambago.cuda_unavailable_reason() or 'torch sees none'}")
    hf = transformers.MambaForCausalLM.from_pretrained(case_dir("base")).to(device).eval()
    ours = MambaForCausalLM.from_model(hf, device=device)
    tokenizer = _trained_tokenizers(hf.config.vocab_size)[0]
    tokenizer.pad_token, tokenizer.padding_side = "<pad>", "left"
    rng = np.random.default_rng()
    words = "the stop sign stood at top of a street stars start to spot sea dusk quick brown fox".split()
    prompts = [" ".join(rng.choice(words, size=int(rng.integers(1, 6)))) for _ in range(3)]
    on = torch.device("cuda:0" if device == "cuda" else "cpu")
    theirs, mine = (transformers.pipeline("text-generation", model=m, tokenizer=tokenizer, device=on)
                    for m in (hf, ours))
    for kw in (dict(max_new_tokens=int(rng.integers(3, 10)), do_sample=False),
               dict(max_new_tokens=6, do_sample=False, batch_size=3),
               dict(max_new_tokens=6, do_sample=False, return_full_text=False),
               dict(max_new_tokens=4, do_sample=False, return_tensors=True),
               dict(max_new_tokens=5, do_sample=False, num_beams=3)):
        with torch.no_grad():
            want = theirs(prompts, **kw)
        assert mine(prompts, **kw) == want, kw
    sampled = mine(prompts, max_new_tokens=5, do_sample=True, temperature=0.8, top_k=10, num_return_sequences=2)
    assert [len(rows) for rows in sampled] == [2] * len(prompts)
    assert all(row["generated_text"].startswith(prompt) for prompt, rows in zip(prompts, sampled, strict=True) for row in rows)

    backbone = transformers.MambaModel.from_pretrained(case_dir("base")).to(device).eval()
    stand_in = MambaModel.from_model(backbone, device=device)
    features = [transformers.pipeline("feature-extraction", model=m, tokenizer=tokenizer, device=on)
                for m in (backbone, stand_in)]
    with torch.no_grad():
        want = features[0](prompts[0], return_tensors=True)
    got = features[1](prompts[0], return_tensors=True)
    assert isinstance(got, torch.Tensor) and got.shape == want.shape
    assert rel_err(got.cpu().numpy(), want.cpu().numpy()) <= 1e-4
    assert ours.can_generate() and not stand_in.can_generate()


def test_falcon_matches_transformers():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    from mambago.hf import FalconMambaForCausalLM

    hf = transformers.FalconMambaForCausalLM.from_pretrained(case_dir("falcon")).eval()
    ours = FalconMambaForCausalLM.from_pretrained(case_dir("falcon"), device="cpu")
    ids = torch.randint(1, hf.config.vocab_size, (1, 12))
    with torch.no_grad():
        assert rel_err(ours(ids).logits.numpy(), hf(ids).logits.numpy()) <= 1e-4
        assert torch.equal(ours.generate(ids, max_new_tokens=5), hf.generate(ids, max_new_tokens=5, do_sample=False))


def test_cuda_tensors_in_and_out():
    """On the GPU, CUDA tensors in give CUDA tensors out, with the CPU
    engine's numbers (within the f32 engines' 1e-4)."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not (mambago.cuda_is_available() and torch.cuda.is_available()):
        pytest.skip(f"no GPU: {mambago.cuda_unavailable_reason() or 'torch sees none'}")
    gpu = MambaForCausalLM.from_pretrained(case_dir("base"), device_map="cuda")
    cpu = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    ids = torch.randint(1, gpu.config.vocab_size, (2, 9), device="cuda")
    got = gpu(ids).logits
    assert got.device.type == "cuda" and gpu.model.device == "cuda"
    assert rel_err(got.cpu().numpy(), cpu(ids.cpu()).logits.numpy()) <= 1e-4
    tokens = gpu.generate(ids, max_new_tokens=4)
    assert tokens.device.type == "cuda" and tokens.shape[0] == 2 and 10 <= tokens.shape[1] <= 13  # eos may stop both
    assert gpu.device == torch.device("cuda:0") and gpu.to("cuda:0") is gpu and gpu.to(torch.device("cuda")) is gpu
    if torch.cuda.device_count() < 2:  # no GPU 1 to load again on: the loader's error, the model as it was
        with pytest.raises(ValueError, match='device "cuda:1": no usable GPU'):
            gpu.to("cuda:1")
        assert gpu.model.device_index == 0
    assert MambaForCausalLM.from_pretrained(case_dir("base"), device_map={"": 0}).device == torch.device("cuda:0")


def test_from_model_follows_the_models_gpu():
    """A transformers model on the GPU, taken over with device="auto",
    runs on that GPU, with transformers' logits (f32 engines, 1e-4)."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    if not (mambago.cuda_is_available() and torch.cuda.is_available()):
        pytest.skip(f"no GPU: {mambago.cuda_unavailable_reason() or 'torch sees none'}")
    hf = transformers.MambaForCausalLM.from_pretrained(case_dir("base")).to("cuda:0").eval()
    ours = MambaForCausalLM.from_model(hf)
    assert ours.device == torch.device("cuda:0") and ours.model.device_index == 0
    ids = torch.randint(1, hf.config.vocab_size, (2, 9), device="cuda:0")
    with torch.no_grad():
        want = hf(ids).logits
    got = ours(ids).logits
    assert got.device == want.device
    assert rel_err(got.cpu().numpy(), want.cpu().numpy()) <= 1e-4


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_forward_on_the_gpu_stays_there(dtype):
    """A prompt on the model's GPU is run there end to end (logits made by
    the engine on the device, the loss taken by torch there): the same
    logits as the prompt given on the host (the same engine, copied through
    the host), to within the scan's rounding where a right-padded row's
    chunks split elsewhere, for ids and bf16 embeddings, padding left,
    right and both (zero there), and the loss of the same labels; the
    backbone's (MambaModel's) states likewise, and the hidden_states of both
    (output_hidden_states) and of generate. A label out of range is a
    ValueError, not a fault."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not (mambago.cuda_is_available() and torch.cuda.is_available()):
        pytest.skip(f"no GPU: {mambago.cuda_unavailable_reason() or 'torch sees none'}")
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cuda", dtype=dtype)
    B, T, V, d = 4, 19, m.config.vocab_size, m.config.hidden_size
    tol = 1e-4 if dtype == "float32" else 1e-2  # the f32 engines' bound; bf16 rounds the GEMM inputs
    ids = torch.randint(1, V, (B, T))
    mask = torch.ones(B, T, dtype=torch.int64)
    mask[1, :5] = 0  # left
    mask[2, 13:] = 0  # right
    mask[3, :2] = mask[3, 16:] = 0  # both
    labels = ids.clone()
    labels[0, :3] = -100
    embeds = torch.randn(B, T, d).to(torch.bfloat16)
    cases = ((dict(input_ids=ids.cuda(), labels=labels.cuda()), dict(input_ids=ids, labels=labels)),
             (dict(input_ids=ids.cuda(), attention_mask=mask.cuda(), labels=labels),
              dict(input_ids=ids, attention_mask=mask, labels=labels)),
             (dict(input_ids=ids[0].cuda()), dict(input_ids=ids[:1])),
             (dict(inputs_embeds=embeds.cuda(), attention_mask=mask), dict(inputs_embeds=embeds, attention_mask=mask)))
    for kw, host_kw in cases:
        got, want = m(**kw), m(**host_kw)
        assert got.logits.device == torch.device("cuda:0") and got.logits.dtype == torch.float32
        assert got.logits.shape == want.logits.shape
        assert rel_err(got.logits.cpu().numpy(), want.logits.numpy()) <= tol, (sorted(kw), dtype)
        if "attention_mask" in kw:
            assert not torch.any(got.logits[mask == 0])
        if want.loss is not None:
            assert got.loss.device == torch.device("cuda:0") and got.loss.shape == ()
            assert abs(got.loss.item() - want.loss.item()) <= tol * want.loss.item()
    backbone = MambaModel(m.model)
    for kw, host_kw in cases[1:]:
        kw.pop("labels", None), host_kw.pop("labels", None)
        got, want = backbone(**kw).last_hidden_state, backbone(**host_kw).last_hidden_state
        assert got.device == torch.device("cuda:0") and got.dtype == torch.float32 and got.shape == want.shape
        assert rel_err(got.cpu().numpy(), want.numpy()) <= tol, (sorted(kw), dtype)
    # hidden_states made on the GPU too (Model.prefill_ptr's layers_ptr), cache kept or not.
    for use_cache in (None, False):
        for (kw, host_kw), model in zip(cases[1:] * 2, [m] * 3 + [backbone] * 3, strict=True):
            got = model(**kw, use_cache=use_cache, output_hidden_states=True)
            want = model(**host_kw, use_cache=use_cache, output_hidden_states=True)
            assert len(got.hidden_states) == len(want.hidden_states) == m.config.num_hidden_layers + 1
            for g, w in zip(got.hidden_states, want.hidden_states, strict=True):
                assert g.device == torch.device("cuda:0") and g.dtype == torch.float32 and g.shape == w.shape
                assert rel_err(g.cpu().numpy(), w.numpy()) <= tol, (sorted(kw), dtype, use_cache)
                if "attention_mask" in kw:
                    assert not torch.any(g[kw["attention_mask"].cpu() == 0])
    # generate's hidden_states too, for a left-padded batch.
    left = torch.ones(B, T, dtype=torch.int64)
    left[1, :5] = left[3, :2] = 0
    kw = dict(max_new_tokens=4, eos_token_id=[], return_dict_in_generate=True, output_hidden_states=True)
    got, want = m.generate(ids.cuda(), attention_mask=left.cuda(), **kw), m.generate(ids, attention_mask=left, **kw)
    assert torch.equal(got.sequences.cpu(), want.sequences) and len(got.hidden_states) == len(want.hidden_states) == 4
    for g_step, w_step in zip(got.hidden_states, want.hidden_states, strict=True):
        for g, w in zip(g_step, w_step, strict=True):
            assert g.device == torch.device("cuda:0") and g.dtype == torch.float32 and g.shape == w.shape
            assert rel_err(g.cpu().numpy(), w.numpy()) <= tol, dtype
    for bad in (torch.full((B, T), V), torch.full((B, T), -2)):
        with pytest.raises(ValueError, match="labels holds"):
            m(ids.cuda(), labels=bad.cuda())
    assert torch.isnan(m(ids.cuda(), labels=torch.full((B, T), -100)).loss)
    # A hand-written decoding loop on the GPU (prompt, then 40 steps: eager,
    # then the step graph kept with the cache) against the same on the host.
    got, want = m(ids.cuda(), attention_mask=mask.cuda()), m(ids, attention_mask=mask)
    for i in range(40):
        nxt = want.logits[:, -1:].argmax(-1)
        got, want = m(nxt.cuda(), cache=got.cache), m(nxt, cache=want.cache)
        assert got.logits.device == torch.device("cuda:0") and got.logits.shape == (B, 1, V)
        assert rel_err(got.logits.cpu().numpy(), want.logits.numpy()) <= tol, (i, dtype)
    assert rel_err(m(ids.cuda()).logits.cpu().numpy(), m(ids).logits.numpy()) <= tol  # the context lives on


def test_forward_on_the_gpu_glue_without_a_gpu(monkeypatch):
    """The Python half of a forward call with the prompt on the model's GPU
    (_StandIn._run_on_gpu, for MambaForCausalLM and MambaModel), where no
    GPU is: CPU tensors stand for CUDA ones and the host engine for the
    device entry, under the device entry's rules (left padding only, each
    row continuing from its row of the state given, its output written to
    the output's address). The masks each row gets, the zeroed trailing
    padding (no cache kept), the rows moved to their end and back (a cache
    kept: its state is the row's tokens' alone), the loss and the refused
    labels are then the host path's.
    test_forward_on_the_gpu_stays_there runs the real thing on a GPU."""
    import ctypes

    import mambago.hf as hf

    torch = pytest.importorskip("torch", reason="torch is not installed")
    m = MambaForCausalLM.from_pretrained(case_dir("base"), device="cpu")
    sent = []

    def prefill_ptr(input_ptr, shape, *, out_ptr, kind, output, logits, input_dtype, attention_mask, state, stream,
                    layers_ptr=0):
        assert output in ("all", "last") and stream == 0 and (output == "all" or not layers_ptr)
        n = int(np.prod(shape))
        if kind == "ids":
            kw = {"input_ids": np.ctypeslib.as_array((ctypes.c_int64 * n).from_address(input_ptr)).reshape(shape)}
        else:
            raw = np.ctypeslib.as_array((ctypes.c_int16 * n).from_address(input_ptr)).reshape(shape)
            assert input_dtype == "torch.bfloat16"
            kw = {"inputs_embeds": torch.from_numpy(raw.copy()).view(torch.bfloat16).float().numpy()}
        if attention_mask is not None:  # left padding only: each row's tokens run to its end
            assert np.all(np.diff(attention_mask, axis=1) >= 0)
        sent.append((None if attention_mask is None else attention_mask.copy(), logits))
        if layers_ptr:  # transformers' hidden_states [L + 1, B, T, d]: the layers', then the final norm's output
            out, taps = m.model.prefill_layers(**kw, attention_mask=attention_mask, state=state)
            hs = np.ascontiguousarray(np.concatenate([taps, out[None]]), dtype=np.float32)
            ctypes.memmove(layers_ptr, hs.ctypes.data, hs.nbytes)
        else:
            out = m.model.prefill(**kw, output=output, attention_mask=attention_mask, state=state)
        if logits:
            out = m.model.logits(out)
        ctypes.memmove(out_ptr, out.ctypes.data, out.nbytes)

    stepped = []

    def step_ptr(ids_ptr, state, *, logits_ptr, stream):
        assert stream == 0
        ids = np.ctypeslib.as_array((ctypes.c_int64 * state.batch_size).from_address(ids_ptr)).copy()
        stepped.append(ids)
        out = m.model.step(ids, state)
        ctypes.memmove(logits_ptr, out.ctypes.data, out.nbytes)

    class Stream:
        cuda_stream = 0

    def gpu(on):
        """Take CPU tensors for the model's GPU's (on) or for the host's."""
        monkeypatch.setattr(hf._StandIn, "_on_model_gpu", lambda self, x: on)

    def both(call, **kw):
        """call(**kw) the way a prompt on the GPU goes, then the host's way."""
        gpu(True)
        got = call(**kw)
        gpu(False)
        return got, call(**kw)

    def same_cache(got, want):
        assert (got is None) == (want is None) and (got is None or got.seen == want.seen)
        for layer in range(m.config.num_hidden_layers if got is not None else 0):
            assert rel_err(got.state.ssm_state(layer), want.state.ssm_state(layer)) <= 1e-4
            assert rel_err(got.state.conv_state(layer), want.state.conv_state(layer)) <= 1e-4

    monkeypatch.setattr(m.model, "prefill_ptr", prefill_ptr)
    monkeypatch.setattr(m.model, "step_ptr", step_ptr)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    B, T, V = 4, 19, m.config.vocab_size
    ids = torch.randint(1, V, (B, T))
    mask = torch.ones(B, T, dtype=torch.int64)
    mask[1, :5] = 0  # left
    mask[2, 13:] = 0  # right
    mask[3, :2] = mask[3, 16:] = 0  # both
    right = torch.ones(B, T, dtype=torch.int64)
    right[0, 10:] = 0
    labels = ids.clone()
    labels[0, :3] = -100
    embeds = torch.randn(B, T, m.config.hidden_size).to(torch.bfloat16)
    cases = (dict(input_ids=ids, labels=labels), dict(input_ids=ids, attention_mask=mask, labels=labels),
             dict(input_ids=ids, attention_mask=right.bool(), labels=labels), dict(input_ids=ids[0].to(torch.int32)),
             dict(inputs_embeds=embeds, attention_mask=mask), dict(input_ids=ids, labels=torch.full((B, T), -100)))
    for use_cache in (None, False):
        for kw in cases:
            got, want = both(m, **kw, use_cache=use_cache)
            assert isinstance(got.logits, torch.Tensor) and got.logits.dtype == torch.float32
            assert got.logits.shape == want.logits.shape
            # The two ways group the rows into other GEMMs (and the scan's
            # chunks split a right-padded row elsewhere): the f32 engines' bound.
            assert rel_err(got.logits.numpy(), want.logits.numpy()) <= 1e-4, sorted(kw)
            if "attention_mask" in kw:
                assert not torch.any(got.logits[kw["attention_mask"] == 0])
            same_cache(got.cache, want.cache)
            if want.loss is not None:
                assert got.loss.shape == () and got.loss.dtype == torch.float32
                assert np.allclose(got.loss.item(), want.loss.item(), rtol=1e-5, equal_nan=True), (got.loss, want.loss)
            if "labels" not in kw:  # the backbone's states, the same way
                got, want = both(MambaModel(m.model), **kw, use_cache=use_cache)
                assert rel_err(got.last_hidden_state.numpy(), want.last_hidden_state.numpy()) <= 1e-4, sorted(kw)
                same_cache(got.cache, want.cache)
                if "attention_mask" in kw:
                    assert not torch.any(got.last_hidden_state[kw["attention_mask"] == 0])
    masks = [s for s, logits in sent if logits]
    # With a cache kept each row's tokens move to its end; without, trailing padding runs as tokens.
    moved = (np.arange(T) >= np.array([0, 5, 6, 5])[:, None]).astype(np.int64)
    moved_right = (np.arange(T) >= np.array([9, 0, 0, 0])[:, None]).astype(np.int64)
    lead = (np.arange(T) >= np.array([0, 5, 0, 2])[:, None]).astype(np.int64)
    want_masks = [None, moved, moved_right, None, moved, None, None, lead, None, None, lead, None]
    assert len(masks) == len(want_masks)
    for got, want in zip(masks, want_masks, strict=True):
        assert (got is None and want is None) or np.array_equal(got, want)

    # A cache continued: the next chunk (given the mask of the whole
    # sequence so far), then a decode step's token a row.
    got, want = both(m, input_ids=ids[:, :7], attention_mask=mask[:, :7])
    same_cache(got.cache, want.cache)
    gpu_cache, host_cache = got.cache, want.cache
    for kw, host_kw in ((dict(input_ids=ids[:, 7:], attention_mask=mask), dict(input_ids=ids[:, 7:], attention_mask=mask[:, 7:])),
                        (dict(input_ids=ids[:, :1], logits_to_keep=1), dict(input_ids=ids[:, :1]))):
        gpu(True)
        got = m(**kw, cache=gpu_cache)
        gpu(False)
        want = m(**host_kw, cache=host_cache)
        assert got.cache is gpu_cache and want.cache is host_cache
        assert got.logits.shape == want.logits.shape
        assert rel_err(got.logits.numpy(), want.logits.numpy()) <= 1e-4, sorted(kw)
        same_cache(got.cache, want.cache)
    assert gpu_cache.seen == T + 1
    assert len(stepped) == 1 and np.array_equal(stepped[0], ids[:, 0].numpy())  # the step went to step_ptr
    # hidden_states from the same device call (layers_ptr), under each padding, cache kept or not.
    for use_cache in (None, False):
        for kw in (dict(input_ids=ids), dict(input_ids=ids, attention_mask=mask), dict(input_ids=ids, attention_mask=right),
                   dict(inputs_embeds=embeds, attention_mask=mask)):
            for model in (m, MambaModel(m.model)):
                before = len(sent)
                got, want = both(model, **kw, use_cache=use_cache, output_hidden_states=True)
                assert len(sent) == before + 1, "the GPU's way is one prefill_ptr call"
                assert len(got.hidden_states) == len(want.hidden_states) == m.config.num_hidden_layers + 1
                for g, w in zip(got.hidden_states, want.hidden_states, strict=True):
                    assert isinstance(g, torch.Tensor) and g.dtype == torch.float32 and g.shape == w.shape == (B, T, m.config.hidden_size)
                    assert rel_err(g.numpy(), w.numpy()) <= 1e-4, sorted(kw)
                    if "attention_mask" in kw:
                        assert not torch.any(g[kw["attention_mask"] == 0])
                first = got.logits if model is m else got.last_hidden_state
                assert rel_err(first.numpy(), (want.logits if model is m else want.last_hidden_state).numpy()) <= 1e-4
                same_cache(got.cache, want.cache)
    # generate's hidden_states likewise: the prompt's, then each new token's but the last, one call each.
    left = torch.ones(B, T, dtype=torch.int64)
    left[1, :5] = left[3, :2] = 0
    for kw in (dict(), dict(attention_mask=left)):
        before = len(sent)
        got, want = both(m.generate, input_ids=ids, max_new_tokens=4, eos_token_id=[], return_dict_in_generate=True,
                         output_hidden_states=True, **kw)
        assert len(sent) == before + 2 and torch.equal(got.sequences, want.sequences)
        assert len(got.hidden_states) == len(want.hidden_states) == 4
        for g_step, w_step in zip(got.hidden_states, want.hidden_states, strict=True):
            assert len(g_step) == len(w_step) == m.config.num_hidden_layers + 1
            for g, w in zip(g_step, w_step, strict=True):
                assert isinstance(g, torch.Tensor) and g.dtype == torch.float32 and g.shape == w.shape
                assert rel_err(g.numpy(), w.numpy()) <= 1e-4, sorted(kw)
    gpu(True)
    last = m(ids, use_cache=False, logits_to_keep=1).logits  # the engine's last position alone
    assert sent[-1] == (None, True) and last.shape == (B, 1, V)
    gpu(False)
    assert rel_err(last.numpy(), m(ids).logits[:, -1:].numpy()) <= 1e-4

    gpu(True)
    for bad, exc, match in ((torch.full((B, T), V), ValueError, f"{V}"), (torch.full((B, T), -2), ValueError, "-2"),
                            (labels[:, :3], ValueError, "shape"), (labels.float(), TypeError, "integers")):
        with pytest.raises(exc, match=match):
            m(ids, labels=bad)
