"""Export to a Hugging Face `tokenizer.json` (loadable by `tokenizers.Tokenizer.from_file`).

The pipeline mirrors packlm's: special tokens split first (HF matches added tokens
longest first too), then the pre-tokenization regex ("isolated" split), then the
byte-to-unicode map (ByteLevel without its own regex), then BPE with the merges in
order. Written as plain JSON so exporting needs no `tokenizers` install; where it is
installed, the pattern's classes are rewritten for its Unicode tables (`engine_pattern`), so
that letters of recent Unicode versions split as in packlm.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from packlm.tokenizer.engine_pattern import for_engine, original
from packlm.tokenizer.formats import excerpt, parse_json, read_text, to_unicode, write_atomic

log = logging.getLogger(__name__)


def tokenizer_json(tokenizer) -> dict:
    specials = tokenizer.special_token_ids
    vocab = {}
    for i in range(tokenizer.vocab_size):
        key = to_unicode(tokenizer.token_bytes(i))
        if i in specials.values():
            key = next(s for s, j in specials.items() if j == i)
        if key in vocab:
            raise ValueError(
                f"vocab: ids {vocab[key]} and {i} share the name {key!r}; "
                "a tokenizer.json cannot hold both"
            )
        vocab[key] = i
    added = [
        {
            "id": i,
            "content": s,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for s, i in sorted(specials.items(), key=lambda item: item[1])
    ]
    pattern = for_engine(tokenizer.pattern_regex, "hf")
    if pattern is None:  # tokenizers absent (its tables unknown), or it cannot be aligned
        log.warning(
            "tokenizer.json: the pattern is written as configured, not aligned to the Unicode "
            'tables of Hugging Face tokenizers (install it: pip install "packlm[hf]"); letters '
            "of recent Unicode versions may then split otherwise there than in packlm"
        )
        pattern = tokenizer.pattern_regex
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": pattern},
                    "behavior": "Isolated",
                    "invert": False,
                },
                {
                    "type": "ByteLevel",
                    "add_prefix_space": False,
                    "trim_offsets": True,
                    "use_regex": False,
                },
            ],
        },
        "post_processor": None,
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": True,
            "use_regex": True,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            # "left right" strings: byte-level tokens never hold a space, every version reads it
            "merges": [f"{to_unicode(a)} {to_unicode(b)}" for a, b in tokenizer.merges],
        },
    }


def save_tokenizer_json(tokenizer, path: str | os.PathLike) -> None:
    """`path` is the .json file to write, or a directory to write tokenizer.json into."""
    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    write_atomic(path, json.dumps(tokenizer_json(tokenizer), ensure_ascii=False))


def load_tokenizer_json(cls, path: str | os.PathLike, special_tokens: list[str]):
    """The tokenizer of a tokenizer.json: `special_tokens` first, then the file's own (a
    missing one gets a new id at the end); an error naming the file and entry for anything
    packlm's pipeline cannot reproduce."""
    from packlm.tokenizer.pretokenize import check_special_tokens

    found = read_tokenizer_json(path)
    own = found["special_tokens"]
    specials = check_special_tokens([*special_tokens, *(s for s in own if s not in special_tokens)])
    return cls(**{**found, "special_tokens": specials})


def _read_spec(path: str | os.PathLike) -> tuple[dict, dict, list[str]]:
    """(the file's JSON with its "pattern", its model, its special tokens in id order); an
    error naming the file for anything packlm's pipeline cannot reproduce."""
    from packlm.tokenizer.pretokenize import GPT2_PATTERN

    path = Path(path)
    spec = parse_json(read_text(path, "tokenizer.path"), path)
    try:
        model = spec["model"]
        if model.get("type") != "BPE" or spec.get("normalizer") is not None:
            raise ValueError(f"{path}: only byte-level BPE without a normalizer can be loaded")
        added = sorted(spec.get("added_tokens") or [], key=lambda t: t["id"])
        if not all(type(t["id"]) is int and type(t["content"]) is str for t in added):
            raise ValueError(f"{path}: added_tokens: each needs an integer id and a string content")
        own = [t["content"] for t in added]
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: not a Hugging Face tokenizer.json "
                         f"({type(e).__name__}: {excerpt(str(e))})") from None  # fmt: skip
    try:
        spec["pattern"] = _pattern_of(spec.get("pre_tokenizer"), GPT2_PATTERN)
    except (AttributeError, KeyError, TypeError):  # not shaped as any pre_tokenizer
        spec["pattern"] = None
    if spec["pattern"] is None:
        raise ValueError(
            f"{path}: the pre_tokenizer is not GPT-2's ByteLevel (with or without a Split)"
        )
    return spec, model, own


def read_tokenizer_json(path: str | os.PathLike) -> dict:
    """A byte-level BPE tokenizer.json (GPT-2's, or packlm's export) -> the keyword arguments
    of `Tokenizer` (vocab, merges, special_tokens, pattern), in Python; an error naming the
    file or entry for anything packlm's pipeline cannot reproduce (another model, a
    normalizer)."""
    from packlm.tokenizer.formats import from_unicode

    spec, model, specials = _read_spec(path)
    if not isinstance(model.get("vocab"), dict):
        raise ValueError(f"{path}: model.vocab is not a JSON object of token -> id")
    if not isinstance(model.get("merges", []), list):
        raise ValueError(f"{path}: model.merges is not a JSON list")
    vocab = {}
    for text, i in model["vocab"].items():
        token = text.encode("utf-8") if text in specials else from_unicode(text)
        if token is None or type(i) is not int:
            raise ValueError(f"{path}: vocab entry {excerpt(text)}: {excerpt(i)} is not a "
                             "byte-level token and id")  # fmt: skip
        if i in vocab:
            raise ValueError(f"{path}: model.vocab: id {excerpt(i)} appears twice")
        vocab[i] = token
    for t in spec.get("added_tokens") or []:
        vocab.setdefault(t["id"], t["content"].encode("utf-8"))
    merges = []
    for k, merge in enumerate(model.get("merges") or []):
        pair = merge.split(" ") if isinstance(merge, str) else merge
        pair = pair if isinstance(pair, list) else []  # e.g. a number: named below
        tokens = [from_unicode(p) if isinstance(p, str) else None for p in pair]
        if len(pair) != 2 or not all(tokens):
            raise ValueError(f"{path}: merges[{k}] = {excerpt(merge)} is not two byte-level tokens")
        merges.append((tokens[0], tokens[1]))
    return {"vocab": vocab, "merges": merges, "special_tokens": specials,
            "pattern": spec["pattern"]}  # fmt: skip


def _pattern_of(pre: dict | None, gpt2: str) -> str | None:
    """The regex of a ByteLevel pre-tokenizer (its own: GPT-2's) or of Split + ByteLevel."""
    steps = (pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]) if pre else []
    if not steps or steps[-1].get("type") != "ByteLevel" or steps[-1].get("add_prefix_space"):
        return None
    if len(steps) == 1:
        return gpt2 if steps[0].get("use_regex", True) else None
    split = steps[0]
    if len(steps) != 2 or split.get("type") != "Split" or steps[1].get("use_regex", True):
        return None
    if (
        split.get("behavior") != "Isolated"
        or split.get("invert")
        or "Regex" not in split["pattern"]
    ):
        return None
    return original(split["pattern"]["Regex"])  # as written before `tokenizer_json` rewrote it
