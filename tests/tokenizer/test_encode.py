"""Encoding and decoding: GPT-2's files give tiktoken's ids, special tokens, streaming in
bounded memory, and the facts about tokens the rest of packlm relies on."""

from __future__ import annotations

import json
import pickle
import tracemalloc

import numpy as np
import pytest

from packlm.tokenizer import Tokenizer
from packlm.tokenizer import tokenizer as tokenizer_module
from packlm.tokenizer.formats import from_unicode

GOLDEN_TEXTS = ["address.txt", "german.txt", "tinystories_sample.txt", "corpus.en"]
EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def tiktoken_gpt2(golden_bpe):
    """tiktoken's GPT-2 encoding, built offline from the same two files."""
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken_ext.openai_public import r50k_pat_str

    table = json.loads((golden_bpe / "gpt2_vocab.json").read_text(encoding="utf-8"))
    ranks = {from_unicode(t): i for t, i in table.items() if t != EOT}
    return tiktoken.Encoding(
        "gpt2-offline",
        pat_str=r50k_pat_str,
        mergeable_ranks=ranks,
        special_tokens={EOT: table[EOT]},
    )


@pytest.mark.parametrize("engine", ["python", "auto"])
@pytest.mark.parametrize("name", GOLDEN_TEXTS)
def test_gpt2_files_give_tiktoken_ids(golden_bpe, tiktoken_gpt2, gpt2_tokenizer, engine, name):
    text = (golden_bpe / name).read_text(encoding="utf-8")
    tok = gpt2_tokenizer if engine == "auto" else pickle.loads(pickle.dumps(gpt2_tokenizer))
    if engine == "python":
        tok = Tokenizer(tok.vocab, tok.merges, tok.special_tokens, engine="python")
    ids = tok.encode(text)
    assert ids == tiktoken_gpt2.encode(text, allowed_special="all")
    assert tok.encode_ordinary(text) == tiktoken_gpt2.encode_ordinary(text)
    assert tok.decode(ids) == text
    with_special = f"{text[:200]}{EOT}{text[200:400]}"
    assert tok.encode(with_special) == tiktoken_gpt2.encode(with_special, allowed_special="all")


def test_special_tokens_in_text(small_tokenizer):
    tok, eot = small_tokenizer, small_tokenizer.special_token_ids[EOT]
    ids = tok.encode(f"def f():{EOT}return 1<|pad|>")
    assert ids.count(eot) == 1 and ids.count(tok.special_token_ids["<|pad|>"]) == 1
    assert ids[: ids.index(eot)] == tok.encode("def f():")
    ordinary = tok.encode_ordinary(f"a{EOT}b")
    assert eot not in ordinary and tok.decode(ordinary) == f"a{EOT}b"
    assert tok.special_token_ids == {EOT: 0, "<|pad|>": 1}


def test_overlapping_special_tokens_match_longest_first(small_vocab):
    vocab, merges = small_vocab
    tok = Tokenizer(vocab, merges, ["<|a|>", "<|a|><|b|>", "<|b|>"])
    long, a, b = (tok.special_token_ids[s] for s in ("<|a|><|b|>", "<|a|>", "<|b|>"))
    assert tok.encode("<|a|><|b|>") == [long]
    assert tok.encode("<|a|><|a|><|b|><|b|>") == [a, long, b]
    assert tok.encode("x<|a|>") == tok.encode("x") + [a]


def test_special_tokens_missing_from_vocab_get_new_ids(small_vocab):
    vocab, merges = small_vocab
    tok = Tokenizer(vocab, merges, [EOT, "<|new|>"])
    assert tok.special_token_ids == {EOT: 0, "<|new|>": len(vocab)}
    assert tok.vocab_size == len(vocab) + 1
    assert tok.decode(tok.encode("x<|new|>")) == "x<|new|>"


def test_decode_of_a_cut_character_gives_replacement(small_tokenizer):
    tok = small_tokenizer
    byte_id = {tok.token_bytes(i): i for i in range(tok.vocab_size)}
    euro = ["€".encode()[k : k + 1] for k in range(3)]
    assert tok.decode([byte_id[b] for b in euro]) == "€"
    assert tok.decode([byte_id[euro[0]]]) == "\ufffd"
    assert tok.decode(tok.encode("ok") + [byte_id[b] for b in euro[:2]]) == "ok\ufffd"
    assert tok.decode([byte_id[euro[1]], *tok.encode("x")]) == "\ufffdx"
    assert tok.decode(np.array(tok.encode("ok €"))) == "ok €"
    assert tok.decode([]) == ""


def test_token_byte_lengths(small_tokenizer, stdlib_docs):
    tok = small_tokenizer
    lengths = tok.token_byte_lengths()
    assert lengths.shape == (tok.vocab_size,) and np.issubdtype(lengths.dtype, np.integer)
    assert all(lengths[i] == 0 for i in tok.special_token_ids.values())
    text = stdlib_docs[3][:5000] + "ünï €"
    ids = tok.encode(f"{text}{EOT}")
    assert lengths[ids].sum() == len(text.encode("utf-8"))
    assert tok.token_bytes(ids[0]) == text.encode()[: lengths[ids[0]]]


def test_digest(small_vocab, small_tokenizer):
    vocab, merges = small_vocab
    fp = small_tokenizer.digest()
    assert len(fp) == 64 and fp == Tokenizer(vocab, merges, [EOT, "<|pad|>"]).digest()
    assert fp == pickle.loads(pickle.dumps(small_tokenizer)).digest()
    others = [
        Tokenizer(vocab, merges[:-1], [EOT, "<|pad|>"]),
        Tokenizer(vocab, merges, [EOT, "<|pad|>"], pattern="cl100k"),
        Tokenizer(vocab, merges, ["<|pad|>", EOT]),
    ]
    assert len({fp, *(t.digest() for t in others)}) == 4


def test_pickle_roundtrip(small_tokenizer, stdlib_docs):
    text = stdlib_docs[5][:20_000]
    copy = pickle.loads(pickle.dumps(small_tokenizer))
    assert copy.encode(text) == small_tokenizer.encode(text)
    assert copy.vocab_size == small_tokenizer.vocab_size


def test_engines_agree_on_trained_vocab(small_vocab, stdlib_docs):
    pytest.importorskip("tiktoken")
    vocab, merges = small_vocab
    fast = Tokenizer(vocab, merges, [EOT], engine="tiktoken")
    pure = Tokenizer(vocab, merges, [EOT], engine="python")
    text = EOT.join(stdlib_docs) + " naïve 数据 🙂 \ud800 x"
    assert fast.encode(text) == pure.encode(text)
    assert (fast.engine, pure.engine) == ("tiktoken", "python")


def test_engines_agree_on_cl100k_vocab(stdlib_docs):
    pytest.importorskip("tiktoken")
    from packlm.tokenizer import train_bpe_from_iterator

    vocab, merges = train_bpe_from_iterator(
        stdlib_docs[:10], 800, [], pattern="cl100k", num_workers=1
    )
    text = "".join(stdlib_docs[10:14]) + "  \n\n x123456 Don't DON'T\r\n"
    fast = Tokenizer(vocab, merges, pattern="cl100k", engine="tiktoken")
    pure = Tokenizer(vocab, merges, pattern="cl100k", engine="python")
    assert fast.encode(text) == pure.encode(text)


def _chunks(text: str, sizes):
    pos, k = 0, 0
    while pos < len(text):
        n = sizes[k % len(sizes)]
        yield text[pos : pos + n]
        pos, k = pos + n, k + 1


@pytest.mark.parametrize("sizes", [[1], [7, 1, 3000], [50_000], [100_000_000]])
def test_encode_iterable_equals_encode(small_tokenizer, stdlib_docs, monkeypatch, sizes):
    monkeypatch.setattr(tokenizer_module, "STREAM_CHARS", 500)  # cut often
    text = f"{EOT}x ".join(stdlib_docs[:6]) + "  trailing <|pad|><|endoftext"
    expected = small_tokenizer.encode(text)
    assert list(small_tokenizer.encode_iterable(_chunks(text, sizes))) == expected


def test_encode_iterable_over_lines_of_a_file(golden_bpe, gpt2_tokenizer):
    with open(golden_bpe / "corpus.en", encoding="utf-8") as f:
        streamed = list(gpt2_tokenizer.encode_iterable(f))
    text = (golden_bpe / "corpus.en").read_text(encoding="utf-8")
    assert streamed == gpt2_tokenizer.encode(text)


@pytest.mark.parametrize("engine", ["auto", "python"])
def test_encode_iterable_memory_is_bounded(small_vocab, stdlib_docs, engine):
    vocab, merges = small_vocab
    tok = Tokenizer(vocab, merges, [EOT], engine=engine)
    base = "".join(stdlib_docs)[:400_000]
    megabytes = 8 if engine == "auto" else 3

    def lines():
        for _ in range(megabytes * 1_000_000 // len(base)):
            yield from base.splitlines(keepends=True)

    tok.encode("warm up")  # build the engine outside the measurement
    tracemalloc.start()
    count = sum(1 for _ in tok.encode_iterable(lines()))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert count > megabytes * 100_000
    assert peak < 6_000_000, f"peak {peak / 1e6:.1f} MB over {megabytes} MB of input"


@pytest.mark.slow
def test_full_default_corpus_at_32k():
    """The benchmark's setting: both merge loops agree, and so do both engines."""
    pytest.importorskip("tiktoken")
    from packlm.data.store.default_corpus import iter_default_documents
    from packlm.tokenizer import train_bpe_from_iterator
    from packlm.tokenizer.training.bpe import _bpe

    docs = [text for _, text in iter_default_documents()]
    vocab, merges = train_bpe_from_iterator(docs, 32768, [EOT])
    if _bpe is not None:
        assert train_bpe_from_iterator(docs, 32768, [EOT], engine="python") == (vocab, merges)
    fast = Tokenizer(vocab, merges, [EOT], engine="tiktoken")
    pure = Tokenizer(vocab, merges, [EOT], engine="python")
    text = EOT.join(docs)
    ids = pure.encode(text)
    assert fast.encode(text) == ids
    assert pure.decode(ids) == text


@pytest.mark.slow
def test_hf_export_on_default_corpus(tmp_path, small_tokenizer):
    tokenizers = pytest.importorskip("tokenizers")
    from packlm.data.store.default_corpus import iter_default_documents

    small_tokenizer.save_hf(tmp_path / "tokenizer.json")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    docs = [text for _, text in iter_default_documents()][:200]
    assert [e.ids for e in hf.encode_batch(docs)] == [small_tokenizer.encode(d) for d in docs]


def test_tiktoken_check_agrees_with_bpe_of_every_merged_token():
    """On random merge lists (about half with a token that does not encode to itself), the
    check's verdict is that of BPE run on every merged token, and its ranks are
    `rank_table`'s. A quarter of the lists are shuffled, so that a merge can take a part made
    only later (the check then runs BPE on every merged token)."""
    import random

    from packlm.tokenizer import encoder

    outcomes = set()
    for seed in range(300):
        rng = random.Random(seed)
        tokens, merges = [bytes([97 + i]) for i in range(rng.randint(1, 3))], []
        for _ in range(rng.randint(1, 20)):
            a, b = rng.choice(tokens), rng.choice(tokens)
            if a + b not in tokens and len(a + b) <= 12:
                tokens.append(a + b)
                merges.append((a, b))
        if seed % 4 == 0:
            rng.shuffle(merges)
        vocab = {i: bytes([i]) for i in range(256)}
        vocab.update({256 + k: a + b for k, (a, b) in enumerate(merges)})  # ids in merge order
        tok = Tokenizer(vocab, merges, engine="python")
        reference = tok._python_encoder()
        slow = all(reference.encode_piece(tok.vocab[c]) == [c] for _, _, c in tok._merge_ids)
        ranks = encoder.tiktoken_ranks(
            tok._table, tok._merge_rows, tok._byte_ids, tok._python_encoder
        )
        assert bool(ranks) == slow, (seed, merges)
        if ranks:
            assert ranks == encoder.rank_table(tok._table, tok._byte_ids, tok._merge_rows)
        outcomes.add(slow)
    assert outcomes == {True, False}
