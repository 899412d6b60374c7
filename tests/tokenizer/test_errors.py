"""Bad input fails early with an error naming the argument, the file, or the byte offset."""

from __future__ import annotations

import pytest

from packlm.tokenizer import Tokenizer, train_bpe, train_bpe_from_iterator
from packlm.tokenizer.training import counting

EOT = "<|endoftext|>"


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text("hello world " * 50, encoding="utf-8")
    return path


@pytest.mark.parametrize("size", [0, 256, 257 - 1, "300", 300.0, True])
def test_vocab_size_too_small_or_not_int(text_file, size):
    with pytest.raises(ValueError, match="vocab_size"):
        train_bpe(text_file, size, [EOT])


def test_vocab_size_counts_the_special_tokens(text_file):
    with pytest.raises(ValueError, match=r"vocab_size=257.*258"):
        train_bpe(text_file, 257, [EOT, "<|pad|>"])
    assert len(train_bpe(text_file, 258, [EOT, "<|pad|>"])[0]) == 258


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        train_bpe(tmp_path / "nope.txt", 300, [])
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty.txt.*empty"):
        train_bpe(empty, 300, [])
    only_special = tmp_path / "special.txt"
    only_special.write_text(EOT * 3)
    with pytest.raises(ValueError, match="special.txt.*no text"):
        train_bpe(only_special, 300, [EOT])


def test_empty_documents():
    with pytest.raises(ValueError, match="documents: no text"):
        train_bpe_from_iterator([], 300, [])
    with pytest.raises(ValueError, match="documents: no text"):
        train_bpe_from_iterator(["", ""], 300, [])
    with pytest.raises(TypeError, match="documents: expected str"):
        train_bpe_from_iterator([b"bytes"], 300, [])


def test_duplicate_and_empty_special_tokens(text_file):
    with pytest.raises(ValueError, match="special_tokens.*duplicates"):
        train_bpe(text_file, 300, [EOT, "<|pad|>", EOT])
    with pytest.raises(ValueError, match="special_tokens"):
        train_bpe_from_iterator(["text"], 300, [""])
    with pytest.raises(ValueError, match="special_tokens.*duplicates"):
        Tokenizer({i: bytes([i]) for i in range(256)}, [], ["a", "a"])


@pytest.mark.parametrize("offset", [0, 5, 2999, 3000, 3001, 10_000])
def test_invalid_utf8_names_file_and_offset(tmp_path, monkeypatch, offset):
    monkeypatch.setattr(counting, "READ_BYTES", 1000)  # offsets across read blocks
    data = bytearray(("abc déf " * 2000).encode())
    data[offset] = 0xFF
    path = tmp_path / "bad.txt"
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"bad.txt: not valid UTF-8 at byte offset {offset}\b"):
        train_bpe(path, 300, [])


def test_truncated_character_at_end(tmp_path):
    path = tmp_path / "cut.txt"
    data = "word € ".encode() + "€".encode()[:2]
    path.write_bytes(data)
    with pytest.raises(
        ValueError, match=rf"cut.txt: not valid UTF-8 at byte offset {len(data) - 2}"
    ):
        train_bpe(path, 300, [])


def test_bad_options(text_file):
    with pytest.raises(ValueError, match="pattern"):
        train_bpe(text_file, 300, [], pattern="(unclosed")
    with pytest.raises(ValueError, match="num_workers"):
        train_bpe(text_file, 300, [], num_workers=0)
    with pytest.raises(ValueError, match="engine"):
        train_bpe(text_file, 300, [], engine="rust")
    with pytest.raises(TypeError):
        train_bpe(text_file, 300, [], not_an_option=1)


def test_tokenizer_rejects_inconsistent_vocab():
    byte_vocab = {i: bytes([i]) for i in range(256)}
    with pytest.raises(ValueError, match="vocab: ids must be"):
        Tokenizer({**byte_vocab, 300: b"ab"}, [])
    with pytest.raises(ValueError, match=r"merges\[0\]"):
        Tokenizer(byte_vocab, [(b"a", b"b")])  # b"ab" has no id
    with pytest.raises(ValueError, match="no id for the byte"):
        Tokenizer({i: bytes([i]) for i in range(255)}, [])
    with pytest.raises(ValueError, match="engine"):
        Tokenizer(byte_vocab, [], engine="fast")


def test_decode_rejects_unknown_ids(small_tokenizer):
    with pytest.raises(ValueError, match="ids: -1"):
        small_tokenizer.decode([5, -1])
    with pytest.raises(ValueError, match=f"ids: {small_tokenizer.vocab_size}"):
        small_tokenizer.decode([small_tokenizer.vocab_size])
    with pytest.raises(TypeError, match="text"):
        small_tokenizer.encode(b"bytes")


def test_invalid_utf8_while_workers_run(tmp_path, monkeypatch):
    monkeypatch.setattr(counting, "READ_BYTES", 1000)
    monkeypatch.setattr(counting, "BATCH_CHARS", 2000)  # workers are busy when the error comes
    path = tmp_path / "late.txt"
    path.write_bytes(("good text " * 5000).encode() + b"\xc3(" + b"more " * 100)
    with pytest.raises(ValueError, match="late.txt: not valid UTF-8 at byte offset 50000"):
        train_bpe(path, 300, [], num_workers=2)


def test_worker_failure_is_reported(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom in worker")

    monkeypatch.setattr(counting, "BATCH_CHARS", 100)
    monkeypatch.setattr(counting, "count_pretokens", broken)  # forked workers inherit it
    with pytest.raises(RuntimeError, match="boom in worker"):
        train_bpe_from_iterator(["some text here"] * 50, 300, [], num_workers=2)
