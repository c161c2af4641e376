"""Each token's text, as transformers' stop strings read a vocabulary.

transformers' StopStringCriteria matches stop strings against a "clean"
vocabulary: each token's text as the tokenizer decodes it on its own. A
byte-level vocabulary (GPT-2's and GPT-NeoX's, which Mamba checkpoints use)
spells bytes as printable characters, and its tokens' texts are those bytes,
a character's bytes possibly split between tokens; a vocabulary with byte
fallback spells bytes as "<0xNN>" tokens. Any other token is decoded after a
fixed prefix, which is then cut off, so that a tokenizer that drops or adds
a leading space decodes it as it would mid-text. The stop strings are then
matched on bytes (UTF-8) where the vocabulary is byte-level or falls back on
bytes, and on characters otherwise; the engine matches bytes throughout,
which for UTF-8 text finds the same strings.
"""

from __future__ import annotations

import json

_PREFIX = "abcdef"  # decoded before a token, then cut off


def _byte_chars() -> dict[str, int]:
    """The byte-level vocabulary's alphabet: the printable character that
    spells each byte. Bytes that print as themselves (visible ASCII and
    Latin-1 but the soft hyphen) keep their code point; the rest, in byte
    order, take the code points from 256 up."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def _has_type(config, kind: str) -> bool:
    """Whether a decoder's JSON config holds a decoder of type kind
    anywhere (a Sequence nests them)."""
    if isinstance(config, dict):
        return config.get("type") == kind or any(_has_type(v, kind) for v in config.values())
    if isinstance(config, list):
        return any(_has_type(v, kind) for v in config)
    return False


def _mode(decoder) -> str | None:
    """How the vocabulary spells bytes, from the tokenizer's decoder (a
    tokenizers decoder, or None): "byte_level", "byte_fallback" or None."""
    if decoder is None:
        return None
    if type(decoder).__name__ == "ByteLevel":
        return "byte_level"
    state = getattr(decoder, "__getstate__", lambda: None)()
    if isinstance(state, (bytes, str)):
        try:
            config = json.loads(state)
        except ValueError:
            return None
        if _has_type(config, "ByteFallback"):  # explicit byte tokens come first, as in transformers
            return "byte_fallback"
        if _has_type(config, "ByteLevel"):
            return "byte_level"
    return None


def _kind(tokenizer) -> str:
    """"hf" for a transformers tokenizer, "tokenizers" for a
    tokenizers.Tokenizer; TypeError for anything else."""
    if hasattr(tokenizer, "convert_tokens_to_string") and hasattr(tokenizer, "get_vocab"):
        return "hf"
    if all(hasattr(tokenizer, name) for name in ("get_vocab", "get_vocab_size", "encode", "decode")):
        return "tokenizers"
    raise TypeError(f"stop strings need the model's tokenizer (transformers' or a tokenizers.Tokenizer), "
                    f"got {type(tokenizer).__name__}")


def size(tokenizer) -> int:
    """How many tokens tokenizer has, added ones included (which a
    token added changes)."""
    return len(tokenizer) if _kind(tokenizer) == "hf" else tokenizer.get_vocab_size(with_added_tokens=True)


def token_texts(tokenizer) -> list[bytes | None]:
    """Each token id's text, as bytes (None for an id the vocabulary
    lacks), from a transformers tokenizer or a tokenizers.Tokenizer."""
    if _kind(tokenizer) == "hf":
        backend = getattr(tokenizer, "backend_tokenizer", None)
        vocab = tokenizer.get_vocab()
        base = tokenizer.convert_ids_to_tokens(tokenizer(_PREFIX, add_special_tokens=False)["input_ids"])

        def decode(token: str, _id: int) -> str:
            return tokenizer.convert_tokens_to_string([*base, token])
    else:  # a tokenizers.Tokenizer
        backend = tokenizer
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        encoded = tokenizer.encode(_PREFIX, add_special_tokens=False)
        base, base_ids = list(encoded.tokens), list(encoded.ids)

        def decode(token: str, id_: int) -> str:
            if tokenizer.decoder is not None:
                return tokenizer.decoder.decode([*base, token])
            return tokenizer.decode([*base_ids, id_], skip_special_tokens=False)
    mode = _mode(getattr(backend, "decoder", None))
    chars = _byte_chars() if mode == "byte_level" else None
    texts: list[bytes | None] = [None] * (max(vocab.values(), default=-1) + 1)
    for token, id_ in vocab.items():
        text = None
        if chars is not None and all(c in chars for c in token):
            text = bytes(chars[c] for c in token)
        elif mode == "byte_fallback" and len(token) == 6 and token.startswith("<0x") and token.endswith(">") \
                and all(c in "0123456789abcdefABCDEF" for c in token[3:5]):
            text = bytes([int(token[3:5], 16)])
        if text is None:
            decoded = decode(token, id_)
            at = decoded.find(_PREFIX)
            text = None if at < 0 else decoded[at + len(_PREFIX):].encode("utf-8")
        texts[id_] = text
    if all(t is None for t in texts):
        raise ValueError("stop strings: this tokenizer decodes no token's text after the letters "
                         f"{_PREFIX!r}, which reading its vocabulary takes (as transformers does)")
    return texts
