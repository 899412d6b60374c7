"""A tokenizer state (checkpoints, meta.pkl) carries the tiktoken check's verdict, so that
`Tokenizer(**state)` skips the check; the verdict is trusted only for the tables it was
found for (their digest, recomputed at load) and by the same check."""

from __future__ import annotations

import pytest
import torch

from packlm.checkpoint.contents import KEY, tokenizer_from_checkpoint
from packlm.tokenizer import Tokenizer, encoder, tiktoken_engine
from packlm.tokenizer import tokenizer as tokenizer_module

EOT = "<|endoftext|>"
TEXT = "Hello world, it's 2024!\n\tdef f(x):  return x ** 2  # café 日本語 🎉 " + EOT + " abc"


def abc_tokenizer(crossing: bool) -> Tokenizer:
    """Merges ab, bc, abc: with bc first ("crossing") "abc" never encodes to the token abc,
    so no tiktoken ranks give the ids; with ab first it does."""
    vocab = {i: bytes([i]) for i in range(256)}
    pairs = [(b"b", b"c"), (b"a", b"b")] if crossing else [(b"a", b"b"), (b"b", b"c")]
    merges = [*pairs, (b"ab", b"c")]
    vocab.update({256 + k: a + b for k, (a, b) in enumerate(merges)})
    return Tokenizer(vocab, merges, [EOT])


def checkpoint_state(tok: Tokenizer, tmp_path) -> dict:
    """The tokenizer's state as a checkpoint holds it: saved and read back weights_only."""
    torch.save({KEY: {"tokenizer": tok.__getstate__()}}, tmp_path / "x.ckpt")
    return torch.load(tmp_path / "x.ckpt", weights_only=True)[KEY]["tokenizer"]


def _watch_checks(monkeypatch, seen) -> None:
    """Call `seen()` whenever the slow part of the check (BPE of merged tokens, in C or in
    Python) is asked for: `tiktoken_ranks` is given a reference encoder."""
    real = tokenizer_module.tiktoken_ranks
    monkeypatch.setattr(tokenizer_module, "tiktoken_ranks",
                        lambda *a: (a[-1] is not None and seen()) or real(*a))  # fmt: skip


def forbid_check(monkeypatch):
    def fail():
        raise AssertionError("the tiktoken check ran although the state vouched for it")

    _watch_checks(monkeypatch, fail)


def count_checks(monkeypatch) -> list:
    calls = []
    _watch_checks(monkeypatch, lambda: calls.append(1))
    return calls


@pytest.fixture(params=["small", "gpt2"])
def tok(request) -> Tokenizer:
    return request.getfixturevalue(f"{request.param}_tokenizer")


def test_checkpoint_round_trip_skips_the_check(tok, tmp_path, monkeypatch):
    state = checkpoint_state(tok, tmp_path)
    assert state["verdict"] == {"digest": tok.digest(), "check": encoder.CHECK_VERSION,
                                "tiktoken_ranks": True}  # fmt: skip
    forbid_check(monkeypatch)
    again = tokenizer_from_checkpoint({KEY: {"tokenizer": state}})
    assert again.encode(TEXT) == tok.encode(TEXT) and again.engine == tok.engine
    assert again.digest() == tok.digest() and again.vocab == tok.vocab
    assert again.__getstate__() == state  # and it writes the same state again
    if tiktoken_engine.tiktoken_encoding({b"a": 0}, "a", "probe") is not None:  # tiktoken installed
        assert again.engine == "tiktoken"
        assert again.to_tiktoken().encode(TEXT, allowed_special="all") == tok.encode(TEXT)


def test_a_failed_verdict_is_kept_too(tmp_path, monkeypatch):
    crossing = abc_tokenizer(crossing=True)
    state = checkpoint_state(crossing, tmp_path)
    assert state["verdict"]["tiktoken_ranks"] is False
    forbid_check(monkeypatch)
    again = Tokenizer(**state)
    assert again.encode("abc") == crossing.encode("abc") == [97, 256]  # never the token abc
    assert again.engine == "python"
    with pytest.raises(ValueError, match="no tiktoken Encoding"):
        again.to_tiktoken()


def test_altered_tables_with_an_old_verdict_are_checked_again(tmp_path, monkeypatch):
    passing = checkpoint_state(abc_tokenizer(crossing=False), tmp_path)
    crossing = abc_tokenizer(crossing=True).__getstate__()
    altered = {**crossing, "verdict": passing["verdict"]}  # a pass, but of other tables
    calls = count_checks(monkeypatch)
    again = Tokenizer(**altered)
    assert again.encode("abc") == [97, 256] and again.engine == "python" and calls == [1]
    # and the other way: a failure found for other tables does not stop a pass
    ok = Tokenizer(**{**passing, "verdict": crossing["verdict"]})
    assert ok.encode("abc") == [258] and calls == [1, 1]


@pytest.mark.parametrize(
    "spoil",
    [
        lambda v: {**v, "check": encoder.CHECK_VERSION + 1},
        lambda v: {**v, "tiktoken_ranks": 1},
        lambda v: {**v, "digest": v["digest"][::-1]},
        lambda v: "yes",
    ],  # fmt: skip
    ids=["another check", "not a bool", "another digest", "not a dict"],
)
def test_a_verdict_not_exactly_of_this_check_is_not_trusted(spoil, tmp_path, monkeypatch):
    crossing = abc_tokenizer(crossing=True).__getstate__()
    crossing["verdict"] = spoil({**crossing["verdict"], "tiktoken_ranks": True})
    calls = count_checks(monkeypatch)
    again = Tokenizer(**crossing)
    assert again.encode("abc") == [97, 256] and calls == [1]


def test_an_old_state_without_a_verdict_loads_and_checks(tok, tmp_path, monkeypatch):
    state = checkpoint_state(tok, tmp_path)
    del state["verdict"]  # as packlm wrote checkpoints before
    calls = count_checks(monkeypatch)
    again = tokenizer_from_checkpoint({KEY: {"tokenizer": state}})
    assert again.encode(TEXT) == tok.encode(TEXT) and calls == [1]
    assert again.digest() == tok.digest() and again.engine == tok.engine


def test_engine_python_state_round_trip(small_tokenizer, tmp_path, monkeypatch):
    """A python-engine tokenizer records the verdict as well; the engine stays python."""
    vocab, merges = small_tokenizer.vocab, small_tokenizer.merges
    pure = Tokenizer(vocab, merges, small_tokenizer.special_tokens, engine="python")
    state = checkpoint_state(pure, tmp_path)
    assert state["verdict"]["tiktoken_ranks"] is True and state["engine"] == "python"
    forbid_check(monkeypatch)
    again = Tokenizer(**state)
    assert again.engine == "python" and again.encode(TEXT) == small_tokenizer.encode(TEXT)
