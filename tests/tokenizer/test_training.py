"""BPE training: the golden run, the tie rule, the boundaries merges never cross, and
agreement of the C loop, the Python loop and a brute-force oracle."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from packlm.tokenizer import GPT2_PATTERN, train_bpe, train_bpe_from_iterator
from packlm.tokenizer.formats import GPT2_BYTE_ORDER, from_unicode
from packlm.tokenizer.training import counting, merge_loop
from packlm.tokenizer.training.bpe import _bpe, build_vocab

EOT = "<|endoftext|>"
needs_c = pytest.mark.skipif(
    _bpe is None, reason="C extension packlm.tokenizer.training._bpe not built"
)


def brute_force_merges(words: dict[bytes, int], num_merges: int) -> list[tuple[bytes, bytes]]:
    """Recount every pair at every step; max by (count, left bytes, right bytes)."""
    seqs = {w: [bytes([b]) for b in w] for w in words}
    merges = []
    for _ in range(num_merges):
        counts: Counter = Counter()
        for w, seq in seqs.items():
            for pair in zip(seq, seq[1:], strict=False):
                counts[pair] += words[w]
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], p))
        merges.append(best)
        for w, seq in seqs.items():
            out, i = [], 0
            while i < len(seq):
                if i + 1 < len(seq) and (seq[i], seq[i + 1]) == best:
                    out.append(seq[i] + seq[i + 1])
                    i += 2
                else:
                    out.append(seq[i])
                    i += 1
            seqs[w] = out
    return merges


def as_bytes(pairs) -> list[tuple[bytes, bytes]]:
    return build_vocab(pairs, [])[1]


def pretoken_counts(text: str) -> dict[bytes, int]:
    return {w.encode(): n for w, n in Counter(regex.findall(GPT2_PATTERN, text)).items()}


def test_golden_reference(golden_bpe):
    vocab, merges = train_bpe(golden_bpe / "corpus.en", 500, [EOT])
    lines = (golden_bpe / "train-bpe-reference-merges.txt").read_text(encoding="utf-8").splitlines()
    reference = [tuple(from_unicode(t) for t in line.split(" ")) for line in lines]
    assert merges == reference
    ref_vocab = json.loads((golden_bpe / "train-bpe-reference-vocab.json").read_text("utf-8"))
    ref = {i: (t.encode() if t == EOT else from_unicode(t)) for t, i in ref_vocab.items()}
    assert vocab == ref  # every id, bytes in GPT-2's order included


def test_vocab_layout(stdlib_docs):
    specials = [EOT, "<|pad|>"]
    vocab, merges = train_bpe_from_iterator(stdlib_docs[:5], 400, specials, num_workers=1)
    assert len(vocab) == 400 and len(merges) == 400 - 258
    assert [vocab[i] for i in range(2)] == [s.encode() for s in specials]
    assert [vocab[2 + k] for k in range(256)] == [bytes([b]) for b in GPT2_BYTE_ORDER]
    assert sorted(GPT2_BYTE_ORDER) == list(range(256))
    assert all(vocab[258 + k] == a + b for k, (a, b) in enumerate(merges))


def test_ties_go_to_the_greatest_pair():
    # every pair occurs once: the first merge is the lexicographically greatest pair
    _, merges = train_bpe_from_iterator(["ab cd zy"], 257, [], num_workers=1)
    candidates = [(b"a", b"b"), (b" ", b"c"), (b"c", b"d"), (b" ", b"z"), (b"z", b"y")]
    assert merges == [max(candidates)]


@pytest.mark.parametrize("engine", ["python", pytest.param("c", marks=needs_c)])
def test_engines_match_brute_force(stdlib_docs, engine):
    words = pretoken_counts("".join(stdlib_docs[:3]))
    pairs = (merge_loop.learn_merges if engine == "python" else _bpe.learn_merges)(
        list(words), list(words.values()), 300
    )
    assert as_bytes(pairs) == brute_force_merges(words, 300)


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(st.binary(min_size=1, max_size=8), st.integers(1, 50), max_size=30),
    st.integers(0, 40),
)
def test_random_tables_all_engines_agree(words, num_merges):
    expected = brute_force_merges(words, num_merges)
    assert (
        as_bytes(merge_loop.learn_merges(list(words), list(words.values()), num_merges)) == expected
    )
    if _bpe is not None:
        assert (
            as_bytes(_bpe.learn_merges(list(words), list(words.values()), num_merges)) == expected
        )


@needs_c
@pytest.mark.parametrize("corpus", ["corpus.en", "tinystories_sample.txt", "german.txt"])
def test_c_and_python_identical_on_golden_texts(golden_bpe, corpus):
    path = golden_bpe / corpus
    c = train_bpe(path, 1500, [EOT], engine="c")
    py = train_bpe(path, 1500, [EOT], engine="python")
    assert c == py


@needs_c
def test_c_and_python_identical_on_code(stdlib_docs):
    c = train_bpe_from_iterator(stdlib_docs, 1200, [EOT], engine="c", num_workers=1)
    py = train_bpe_from_iterator(stdlib_docs, 1200, [EOT], engine="python", num_workers=1)
    assert c == py


def test_parallel_equals_serial(stdlib_docs, monkeypatch):
    monkeypatch.setattr(counting, "BATCH_CHARS", 20_000)  # many tasks over 2 processes
    serial = train_bpe_from_iterator(stdlib_docs, 700, [EOT], num_workers=1)
    assert train_bpe_from_iterator(stdlib_docs, 700, [EOT], num_workers=2) == serial


def test_file_equals_documents_joined_by_special(tmp_path, stdlib_docs, monkeypatch):
    # small read blocks: the file is cut into many pieces at letter/non-letter boundaries
    monkeypatch.setattr(counting, "READ_BYTES", 3000)
    path = tmp_path / "docs.txt"
    path.write_text(EOT.join(stdlib_docs[:8]), encoding="utf-8")
    from_file = train_bpe(path, 600, [EOT], num_workers=2)
    assert from_file == train_bpe_from_iterator(stdlib_docs[:8], 600, [EOT], num_workers=1)


def test_file_pieces_keep_pretokens(tmp_path, stdlib_docs, monkeypatch):
    monkeypatch.setattr(counting, "READ_BYTES", 777)
    text = "".join(stdlib_docs[:4]) + " naïve — 数据 x\u0301 '\n\n  \t"
    path = tmp_path / "t.txt"
    path.write_bytes(text.encode())
    pieces = list(counting.iter_file_pieces(path, []))
    assert len(pieces) > 10 and "".join(pieces) == text
    assert sum((Counter(regex.findall(GPT2_PATTERN, p)) for p in pieces), Counter()) == Counter(
        regex.findall(GPT2_PATTERN, text)
    )


def test_no_merge_crosses_a_special_token():
    # without the special token "Z" the letters "aZaZ..." would be one pre-token
    vocab, merges = train_bpe_from_iterator(["aZ" * 200 + "a bb"], 300, ["Z"], num_workers=1)
    assert merges == [(b"b", b"b"), (b" ", b"bb")]  # the only pairs not across a "Z"


def test_no_merge_crosses_a_pretoken(stdlib_docs):
    text = "".join(stdlib_docs[:3])
    pieces = set(regex.findall(GPT2_PATTERN, text))
    _, merges = train_bpe_from_iterator([text], 600, [], num_workers=1)
    for a, b in merges:
        # every merged token lies inside a single pre-token
        assert any((a + b) in p.encode() for p in pieces if len(p.encode()) >= len(a + b)), (a, b)
    assert len(merges) == 600 - 256


def test_cl100k_and_custom_patterns(stdlib_docs):
    for pattern in ("cl100k", r"\w+|\s+|[^\w\s]+"):
        vocab, merges = train_bpe_from_iterator(
            stdlib_docs[:3], 400, [EOT], pattern=pattern, num_workers=1
        )
        assert len(vocab) == 400
    _, merges = train_bpe_from_iterator(["abc abc abc"], 300, [], pattern=r"\S+|\s", num_workers=1)
    assert (b"abc", b" ") not in merges


def test_stops_when_nothing_is_left_to_merge():
    vocab, merges = train_bpe_from_iterator(["abab"], 1000, [EOT], num_workers=1)
    assert merges == [(b"a", b"b"), (b"ab", b"ab")] and len(vocab) == 259


def test_progress_bars(stdlib_docs, capsys):
    assert train_bpe_from_iterator(stdlib_docs[:2], 300, [], progress=True, num_workers=1)
