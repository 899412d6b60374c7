"""Train a byte-level BPE: count pre-tokens, then merge the most frequent pair until the
vocabulary is full.

Vocabulary layout: special tokens first, then the 256 bytes, then one id per merge in
merge order. Ties between equally frequent pairs go to the lexicographically greatest
(bytes(left), bytes(right)), so a run is fully determined by its input.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable

from packlm.tokenizer.formats import GPT2_BYTE_ORDER
from packlm.tokenizer.pretokenize import check_special_tokens, resolve_pattern
from packlm.tokenizer.training import merge_loop
from packlm.tokenizer.training.counting import count_parallel, default_workers, iter_file_pieces

try:  # the C merge loop, built by setup.py when a compiler is present
    from packlm.tokenizer.training import _bpe
except ImportError:  # pragma: no cover - exercised only without a compiler
    _bpe = None

Vocab = dict[int, bytes]
Merges = list[tuple[bytes, bytes]]


def train_bpe(
    input_path: str | os.PathLike,
    vocab_size: int,
    special_tokens: Iterable[str] | None = None,
    **options,
) -> tuple[Vocab, Merges]:
    """Train on a UTF-8 text file (special tokens in it separate documents).

    options: pattern="gpt2" ("cl100k" or a regex), num_workers=None (all cores),
    progress=False (tqdm bars), engine="auto" ("c" or "python" merge loop).
    """
    special_tokens = check_special_tokens(special_tokens)
    return _train(
        iter_file_pieces(input_path, special_tokens),
        vocab_size,
        special_tokens,
        what=f"input_path={str(input_path)!r}",
        total_bytes=os.path.getsize(input_path) if os.path.isfile(input_path) else None,
        **options,
    )


def train_bpe_from_iterator(
    documents: Iterable[str],
    vocab_size: int,
    special_tokens: Iterable[str] | None = None,
    **options,
) -> tuple[Vocab, Merges]:
    """Train on documents (strings); no pre-token or merge crosses two documents. An iterable
    with a `total_bytes` attribute gives the pre-tokenizing bar its total (and so an ETA)."""
    total = getattr(documents, "total_bytes", None)
    specials = check_special_tokens(special_tokens)
    return _train(documents, vocab_size, specials, what="documents", total_bytes=total, **options)


def _train(
    texts: Iterable[str],
    vocab_size: int,
    special_tokens: list[str],
    *,
    what: str,
    pattern: str = "gpt2",
    num_workers: int | None = None,
    progress: bool = False,
    engine: str = "auto",
    total_bytes: int | None = None,
) -> tuple[Vocab, Merges]:
    minimum = 256 + len(special_tokens)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < minimum:
        raise ValueError(
            f"vocab_size={vocab_size!r}: must be an int of at least 256 bytes + "
            f"{len(special_tokens)} special tokens = {minimum}"
        )
    if num_workers is not None and (not isinstance(num_workers, int) or num_workers < 1):
        raise ValueError(f"num_workers={num_workers!r}: must be a positive int or None")
    learn = _merge_engine(engine)
    regex_str = resolve_pattern(pattern)

    bar = _bar(progress, "pre-tokenizing", "B", total_bytes)  # UTF-8 bytes of text
    counts = count_parallel(
        texts,
        regex_str,
        special_tokens,
        num_workers or default_workers(),
        None if bar is None else bar.update,
    )
    if bar is not None:
        bar.close()
    if not counts:
        raise ValueError(f"{what}: no text to train on (empty, or only special tokens)")
    words, freqs = _encode_words(counts, what)
    del counts

    num_merges = vocab_size - minimum
    bar = _bar(progress, "merging", "merge", num_merges)
    pairs = learn(words, freqs, num_merges, None if bar is None else bar.update)
    if bar is not None:
        bar.close()
    return build_vocab(pairs, special_tokens)


def build_vocab(pairs: list[tuple[int, int]], special_tokens: list[str]) -> tuple[Vocab, Merges]:
    """Merge-loop ids (0..255 bytes, 256 + k for merge k) -> the vocab and the merges as bytes.

    Vocab ids: the special tokens, then the 256 bytes in GPT-2's vocab.json order
    (printable bytes first, as the reference vocab has them), then one id per merge.
    """
    tokens = [bytes([b]) for b in range(256)]
    merges = []
    for a, b in pairs:
        merges.append((tokens[a], tokens[b]))
        tokens.append(tokens[a] + tokens[b])
    ordered = [tokens[b] for b in GPT2_BYTE_ORDER] + tokens[256:]
    vocab = {i: s.encode("utf-8") for i, s in enumerate(special_tokens)}
    vocab.update((len(special_tokens) + i, t) for i, t in enumerate(ordered))
    return vocab, merges


def _merge_engine(engine: str) -> Callable:
    if engine == "python" or (engine == "auto" and _bpe is None):
        return merge_loop.learn_merges
    if engine in ("c", "auto"):
        if _bpe is None:
            raise ValueError(
                "engine='c': the C extension packlm.tokenizer.training._bpe is not built"
            )
        return _bpe.learn_merges
    raise ValueError(f"engine={engine!r}: expected 'auto', 'c' or 'python'")


def _encode_words(counts: Counter[str], what: str) -> tuple[list[bytes], list[int]]:
    try:
        words = [w.encode("utf-8") for w in counts]
    except UnicodeEncodeError as e:
        raise ValueError(f"{what}: text is not encodable as UTF-8 ({e.reason})") from None
    return words, list(counts.values())


def _bar(enabled: bool, desc: str, unit: str, total: int | None):
    if not enabled:
        return None
    from tqdm import tqdm  # not tqdm.auto: in Jupyter without ipywidgets it warns at import

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True)
