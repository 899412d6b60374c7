"""Long documents are encoded in pieces: the same ids as encoding the document whole, every
byte stored, over-long pre-tokens cut (exactly where no merge crosses, else counted), and a
prepare's peak memory bounded by a small multiple of the document, not 20-46x."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from packlm.config.data import DataConfig
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.store import encode
from packlm.data.store.prepared import prepare_stores
from packlm.tokenizer.pretokenize import PIECE_CHARS
from packlm.tokenizer.training import counting

CJK = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]


def adversarial(seed: int, n: int) -> str:
    """Text without newlines: long runs of one character, digits, symbols, CJK, contractions."""
    rng = random.Random(seed)
    words = ["the", " ", "  ", "\t", "don't", "'s", "42", "1234567", "x=(a+b)*c;", "déjà", "Ωμέγα",
             "你好，世界。", "🙂👍🏽", "\u00a0", "---", "e\u0301", "<|endoftext|>"]  # fmt: skip
    parts: list[str] = []
    size = 0
    while size < n:
        if rng.random() < 0.03:
            parts.append(rng.choice([" ", "=", "7", "ab"]) * rng.randint(100, 400))
        else:
            parts.append(rng.choice(words))
        size += len(parts[-1])
    return "".join(parts)


def build(tmp_path: Path, texts: list[str], pattern: str = "gpt2", vocab: int = 400):
    for i, text in enumerate(texts):
        (tmp_path / f"doc{i}.txt").write_text(text, encoding="utf-8", newline="")
    data = DataConfig(sources=[str(tmp_path / "doc*.txt")], val_fraction=0)
    cfg = TokenizerConfig(vocab_size=vocab, pattern=pattern)
    return prepare_stores(data, cfg, tmp_path / "cache", progress=False, num_workers=0)


@pytest.fixture
def small_pieces(monkeypatch):
    monkeypatch.setattr(encode, "PIECE_CHARS", 500)
    monkeypatch.setattr(counting, "BATCH_CHARS", 700)


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k"])
def test_pieces_give_the_ids_of_the_whole_document(tmp_path, small_pieces, pattern):
    texts = [adversarial(seed, 20_000) for seed in range(3)]
    prepared = build(tmp_path, texts, pattern)
    store, tok = prepared.open("train"), prepared.tokenizer
    assert store.manifest["counts"]["cuts_inside_pretokens"] == 0
    by_id = {store.doc_id(d): d for d in range(store.n_docs)}
    for i, text in enumerate(texts):
        d = next(d for name, d in by_id.items() if name.endswith(f"doc{i}.txt"))
        expected = tok.encode_ordinary(text) + [prepared.train_manifest["eos_id"]]
        assert store.document(d).tolist() == expected


def test_long_pretoken_cut_exactly_where_no_merge_crosses(tmp_path, monkeypatch, small_pieces):
    monkeypatch.setattr(encode, "MAX_PRETOKEN_CHARS", 300)
    rng = random.Random(0)
    run = "".join(rng.choice(CJK) for _ in range(5000))  # one pre-token: letters, no punctuation
    texts = ["plain words " * 50 + run + ", and more words", "filler text " * 200]
    prepared = build(tmp_path, texts)
    store, tok = prepared.open("train"), prepared.tokenizer
    assert store.manifest["counts"]["cuts_inside_pretokens"] == 0  # rare CJK pairs: never merged
    d = next(d for d in range(store.n_docs) if store.doc_id(d).endswith("doc0.txt"))
    assert store.document(d).tolist()[:-1] == tok.encode_ordinary(texts[0])


def test_run_without_a_free_place_is_cut_counted_and_stored_whole(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(encode, "PIECE_CHARS", 500)
    monkeypatch.setattr(encode, "MAX_PRETOKEN_CHARS", 300)
    text = "start" + " " * 5000 + "end " * 30  # every space token holds the pair "  "
    prepared = build(tmp_path, [text, "other words " * 100])
    store = prepared.open("train")
    counts = store.manifest["counts"]
    assert counts["cuts_inside_pretokens"] >= 5000 // 300 - 1
    assert counts["stored_bytes"] == counts["bytes"]
    d = next(d for d in range(store.n_docs) if store.doc_id(d).endswith("doc0.txt"))
    assert prepared.tokenizer.decode(store.document(d)[:-1]) == text
    assert any("cuts inside pre-tokens" in r.getMessage() for r in caplog.records)


PEAK_CHILD = textwrap.dedent(
    """
    import json, re, resource, sys
    from packlm.config.data import DataConfig
    from packlm.data.store.prepared import prepare_stores
    from packlm.config.tokenizer import TokenizerConfig

    def high_water():  # VmHWM restarts at exec, unlike ru_maxrss (the forking parent's)
        status = open("/proc/self/status").read()
        return int(re.search(r"VmHWM:\\s+(\\d+) kB", status).group(1)) * 1024

    path, cache = sys.argv[1], sys.argv[2]
    base = high_water()
    data = DataConfig(sources=[path], val_fraction=0)
    prepare_stores(data, TokenizerConfig(vocab_size=300), cache, progress=False, num_workers=2)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # forked here
    print(json.dumps({"base": base, "peak": max(high_water(), workers)}))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["prose", "one pre-token"])
def test_prepare_peak_memory_is_a_small_multiple_of_the_document(tmp_path, kind):
    """A 20 MB document without a newline (on main: 20-46x the document): now the text, its
    ids and a few pieces, in the parent and in each worker (the largest process's peak)."""
    n = 20_000_000
    rng = random.Random(0)
    words = ["alpha", "beta", "déjà", "42", "x=(a+b);", "don't", "你好。", "  "]
    prose = " ".join(rng.choice(words) for _ in range(n // 5))[:n] if kind == "prose" else ""
    text = prose or "a" * n
    path = tmp_path / "doc.txt"
    path.write_text(text, encoding="utf-8")
    size = path.stat().st_size
    out = subprocess.run(
        [sys.executable, "-c", PEAK_CHILD, str(path), str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    mem = json.loads(out.stdout.strip().splitlines()[-1])
    assert mem["peak"] - mem["base"] < 6 * size, (mem, size)


def test_long_documents_hash_and_measure_as_their_bytes():
    from packlm.data.store.build import _measure
    from packlm.data.store.split import content_hash

    text = adversarial(7, 3 * PIECE_CHARS)  # hashed block by block
    data = text.encode("utf-8")
    assert len(text) > PIECE_CHARS and _measure(text) == (len(data), content_hash(data))
