"""data.shard=i/N over fewer files than shards: one big file cut between records.

The N shards' documents, read one after the other, are the whole file's: the same texts,
ids (record numbers of the whole file), dropped counts and error messages (byte offsets of
the whole file); built into stores, the union of the shards is one store, so its plans and
batches are one store's. A file that cannot be cut (a compressed stream) is read whole by
one shard, said in one log line; the shards left with nothing are empty stores, said too.
"""

from __future__ import annotations

import gzip
import json
import logging
import random
from pathlib import Path

import numpy as np
import pytest

from helpers.corpus import WORDS
from helpers.stores import assert_same_plans_and_batches
from packlm.config.data import DataConfig
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.store.corpus import Corpus
from packlm.data.store.prepared import prepare_stores
from packlm.data.store.sources import ReadCounts, SourceError, iter_documents
from packlm.data.store.sources import cuts as cuts_module

TOKENIZER = TokenizerConfig(vocab_size=300)


def words(rng: random.Random, most: int = 60) -> str:
    return " ".join(rng.choice(WORDS.split()) for _ in range(rng.randint(1, most)))


def write_jsonl(path: Path, n: int = 240, seed: int = 0, last_newline: bool = True) -> Path:
    """n records, a few with CRLF inside, some empty, one blank line; CRLF line ends on some."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        text = "" if i % 29 == 3 else words(rng) + ("\r\nmore" if i % 17 == 0 else "")
        lines.append(json.dumps({"text": text}) + ("\r\n" if i % 5 == 0 else "\n"))
        if i == n // 2:
            lines.append("\n")
    data = "".join(lines)
    path.write_bytes((data if last_newline else data.rstrip("\r\n")).encode())
    return path


def write_text(path: Path, n: int = 240, seed: int = 0) -> Path:
    """Documents split by blank lines, written with LF and CRLF, with runs of 3 and 4
    newlines (a match of "\\n\\n" overlapping another), empty documents and a lone CR, and
    no newline at the end."""
    rng = random.Random(seed)
    seps = ["\n\n", "\n\n", "\r\n\r\n", "\n\n\n", "\r\n\n", "\n\n\n\n", "\n\r\n"]
    parts = []
    for i in range(n):
        doc = words(rng) + ("\rtail" if i % 23 == 0 else "") + ("\nline two" if i % 7 == 0 else "")
        parts.append(doc + rng.choice(seps))
    path.write_bytes("".join(parts).rstrip("\r\n").encode())
    return path


def write_parquet(path: Path, n: int = 240, seed: int = 0) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rng = random.Random(seed)
    texts = [words(rng) if i % 31 else None for i in range(n)]
    pq.write_table(pa.table({"text": texts, "n": list(range(n))}), path, row_group_size=25)
    return path


def write_arrow(path: Path, n: int = 240, seed: int = 0, stream: bool = False) -> Path:
    """An Arrow IPC file (Feather v2) of record batches of 25 rows, or an Arrow stream."""
    pa = pytest.importorskip("pyarrow")
    rng = random.Random(seed)
    table = pa.table({"text": [words(rng) if i % 31 else "" for i in range(n)]})
    opened = pa.ipc.new_stream if stream else pa.ipc.new_file
    with opened(str(path), table.schema) as writer:
        for batch in table.to_batches(max_chunksize=25):
            writer.write_batch(batch)
    return path


WRITERS = {
    "arrow": (write_arrow, "one.arrow", {}),
    "jsonl": (write_jsonl, "one.jsonl", {}),
    "text": (write_text, "one.txt", {"separator": "\n\n"}),
    "parquet": (write_parquet, "one.parquet", {}),
}


def config(path: Path, **keys) -> DataConfig:
    return DataConfig(**{"sources": [str(path)], "val_fraction": 0.2, **keys})


def documents(corpus: Corpus) -> tuple[list[tuple[str, str]], dict[str, int]]:
    counts = ReadCounts()
    docs = [(d.text, d.doc_id) for d in iter_documents(corpus.sources, corpus.options, counts)]
    return docs, counts.dropped()


def shard_documents(data: DataConfig, n: int):
    """The documents and drop counts of the n shards, in shard order, joined."""
    docs, dropped = [], {}
    for shard in Corpus.from_config(data).shards(n):
        d, c = documents(shard)
        docs += d
        dropped = {k: dropped.get(k, 0) + v for k, v in c.items()}
    return docs, dropped


@pytest.mark.parametrize("kind", sorted(WRITERS))
@pytest.mark.parametrize("normalize", [True, False])
def test_the_shards_of_one_file_read_its_documents_whatever_their_number(
    tmp_path, monkeypatch, kind, normalize
):
    monkeypatch.setattr(cuts_module, "BLOCK", 16)  # scans that go on past a window
    write, name, keys = WRITERS[kind]
    path = write(tmp_path / name)
    data = config(path, normalize_newlines=normalize, **keys)
    whole, dropped = documents(Corpus.from_config(data))
    assert len(whole) > 150 and dropped["empty"] > 0
    for n in (2, 3, 4, 7, 16, 50):
        assert shard_documents(data, n) == (whole, dropped), n


def test_a_jsonl_file_without_its_last_newline_is_cut_like_one_with_it(tmp_path):
    path = write_jsonl(tmp_path / "one.jsonl", last_newline=False)
    assert not path.read_bytes().endswith(b"\n")
    data = config(path)
    whole = documents(Corpus.from_config(data))
    for n in (2, 4, 9, 300):
        assert shard_documents(data, n) == whole, n


@pytest.mark.parametrize("separator", ["\n", "\n\n", "aa", "aba", "ab\nab"])
def test_self_overlapping_separators_cut_where_the_whole_split_does(tmp_path, separator):
    rng = random.Random(1)
    text = "".join(rng.choice(["a", "b", "\n", "\r\n", "ab", " "]) for _ in range(3000))
    path = tmp_path / "x.txt"
    path.write_bytes(text.encode())
    data = config(path, separator=separator, val_fraction=0.0)
    whole = documents(Corpus.from_config(data))
    for n in (2, 5, 13, 40):
        assert shard_documents(data, n) == whole, (separator, n)


def test_a_span_of_a_file_is_cut_inside_the_span(tmp_path):
    path = write_text(tmp_path / "one.txt")
    data = DataConfig(sources=[{"path": str(path), "span": [0.1, 0.85]}], separator="\n\n")
    whole = documents(Corpus.from_config(data))
    assert "@0.1-0.85:" in whole[0][0][1]
    assert shard_documents(data, 4) == whole


@pytest.fixture(scope="module", params=sorted(WRITERS))
def stores(request, tmp_path_factory):
    """(one store of one file, the union of its four shards built one by one), in one cache."""
    root = tmp_path_factory.mktemp(request.param)
    write, name, keys = WRITERS[request.param]
    path = write(root / name)
    cache = root / "cache"
    one = prepare(config(path, **keys), cache)
    for i in range(4):
        prepare(config(path, shard=f"{i}/4", **keys), cache)
    return one, prepare(config(path, shards=4, **keys), cache), cache


def prepare(data: DataConfig, cache: Path, **kw):
    return prepare_stores(data, TOKENIZER, cache, progress=False, num_workers=0, **kw)


@pytest.mark.parametrize("split", ["train", "val"])
def test_four_shards_of_one_file_hold_the_documents_and_tokens_of_one_store(stores, split):
    one, shards, _ = stores
    a, b = one.open(split), shards.open(split)
    assert min(p.n_docs for p in b.parts) > 0 and max(p.n_docs for p in b.parts) < a.n_docs
    assert (a.n_docs, a.n_tokens) == (b.n_docs, b.n_tokens)
    np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    np.testing.assert_array_equal(a.doc_offsets, b.doc_offsets)
    np.testing.assert_array_equal(a.doc_sources, b.doc_sources)
    assert [a.doc_id(d) for d in range(a.n_docs)] == [b.doc_id(d) for d in range(b.n_docs)]
    counts = ("documents", "tokens", "bytes", "stored_bytes")
    assert {k: a.manifest["counts"][k] for k in counts} == {
        k: b.manifest["counts"][k] for k in counts
    }
    assert a.manifest["counts"]["dropped"] == b.manifest["counts"]["dropped"]
    cuts = [p.manifest["fingerprint"]["data.sources"][0]["cuts"] for p in b.parts]
    assert len({json.dumps(c) for c in cuts}) == 4  # each shard's cuts in its own key


@pytest.mark.parametrize(
    "keys",
    [
        dict(window=16, stride=12),
        dict(window=16, stride=8, snap="paragraph", snap_tolerance=4, pack_size=40,
             pack_strategy="best_fit", pack_buffer=8, bos=True),
    ],
)  # fmt: skip
def test_the_epoch_plans_and_batches_of_four_pieces_are_one_stores(stores, keys):
    one, shards, cache = stores
    assert_same_plans_and_batches(one, shards, cache, **keys)


def test_errors_in_a_piece_name_the_whole_files_line_and_byte_offset(tmp_path):
    jsonl = write_jsonl(tmp_path / "bad.jsonl")
    lines = jsonl.read_bytes().split(b"\n")
    lines[200] = b'{"text": "broken'
    jsonl.write_bytes(b"\n".join(lines))
    text = write_text(tmp_path / "bad.txt")
    data = text.read_bytes()
    text.write_bytes(data[: len(data) * 9 // 10] + b"\xff" + data[len(data) * 9 // 10 :])
    messages = []
    for path, keys in ((jsonl, {}), (text, {"separator": "\n\n"})):
        with pytest.raises(SourceError) as whole:
            documents(Corpus.from_config(config(path, **keys)))
        with pytest.raises(SourceError) as last:
            documents(Corpus.from_config(config(path, **keys)).of_shard(3, 4))
        assert str(last.value) == str(whole.value)
        messages.append(str(last.value))
    assert messages[0].startswith(f"{jsonl}:201: not valid JSON")
    offset = len(data) * 9 // 10 - data[: len(data) * 9 // 10].count(b"\r\n")  # normalized
    assert messages[1].startswith(f"{text}: not valid UTF-8 at byte offset {offset} ")


@pytest.mark.parametrize("kind", ["gzip", "arrow stream"])
def test_a_file_that_cannot_be_cut_is_read_whole_by_one_shard_and_said_once(tmp_path, caplog, kind):
    if kind == "gzip":
        path = tmp_path / "one.jsonl.gz"
        path.write_bytes(gzip.compress(write_jsonl(tmp_path / "plain.jsonl").read_bytes()))
        why = "gzip-compressed jsonl (one compressed stream, readable only from its start)"
    else:
        path = write_arrow(tmp_path / "one.arrows", stream=True)
        why = "an Arrow stream (no index of its batches)"
    caplog.set_level(logging.INFO, logger="packlm.data.store")
    data = config(path)
    shards = Corpus.from_config(data).shards(4)
    lines = [r.getMessage() for r in caplog.records]
    assert [m for m in lines if "cannot be cut" in m] == [
        f"data.shard: {path} is {why}, so it cannot be cut between records: shard 0/4 reads "
        "it whole"
    ]
    assert any("data.shard: 1/4, 2/4, 3/4 read nothing" in m for m in lines)
    assert [len(s.sources[0].files) for s in shards] == [1, 0, 0, 0]
    assert shards[0].sources[0].cuts is None  # read as the whole file is
    cache = tmp_path / "cache"
    one = prepare(data, cache)
    union = prepare(config(path, shards=4), cache, build_shards=True)
    np.testing.assert_array_equal(np.asarray(one.open("train").tokens),
                                  np.asarray(union.open("train").tokens))  # fmt: skip
    assert [p.n_docs for p in union.open("train").parts][1:] == [0, 0, 0]


@pytest.mark.parametrize(
    "records",
    [
        ["one", "two"],  # fewer records than shards
        ["short", "x" * 5000, "short again", "last"],  # one record longer than a cut distance
        ["a" * 3000],  # one record: every cut lands at its end
    ],
)
def test_few_or_long_records_leave_empty_shards_and_lose_nothing(tmp_path, caplog, records):
    path = tmp_path / "few.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in records), encoding="utf-8")
    data = config(path, val_fraction=0.0)
    caplog.set_level(logging.WARNING, logger="packlm.data.store")
    assert shard_documents(data, 4) == documents(Corpus.from_config(data))
    assert any("read nothing, so their stores are empty" in r.getMessage() for r in caplog.records)
    cache = tmp_path / "cache"
    one = prepare(data, cache)
    union = prepare(config(path, val_fraction=0.0, shards=4), cache, build_shards=True)
    a, b = one.open("train"), union.open("train")
    np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    assert [a.doc_id(d) for d in range(a.n_docs)] == [b.doc_id(d) for d in range(b.n_docs)]
    assert 0 in [p.n_docs for p in b.parts]


def test_shard_0_checks_validation_for_duplicates_of_every_other_piece(tmp_path):
    path = write_jsonl(tmp_path / "one.jsonl")
    val = tmp_path / "val.jsonl"
    val.write_text(json.dumps({"text": "held out"}) + "\n", encoding="utf-8")
    data = config(path, val_sources=[str(val)], val_fraction=0.0)
    shards = Corpus.from_config(data).shards(4)
    first = Corpus.from_config(data).of_shard(0, 4)
    others = documents(Corpus(first.other_training, None, first.options, 0.0))[0]
    assert others == [d for s in shards[1:] for d in documents(s)[0]] and others
    assert [s.val_sources for s in shards[1:]] == [[], [], []]


def test_a_piece_reports_a_file_that_changed_while_it_was_read(tmp_path):
    path = write_jsonl(tmp_path / "one.jsonl")
    shard = Corpus.from_config(config(path)).of_shard(1, 4)
    with path.open("ab") as f:
        f.write(b'{"text": "appended"}\n')
    with pytest.raises(SourceError, match="changed while it was read"):
        documents(shard)
