"""init_from with another tokenizer: the error says what to add (the checkpoint's tokenizer,
saved in the cache, as tokenizer.path) or, for conversations, that the checkpoint's tokenizer
lacks the chat tokens and how to pretrain with them."""

from __future__ import annotations

import pytest

from packlm.checkpoint.contents import KEY
from packlm.checkpoint.resume import check_init_from
from packlm.config.model import ModelConfig
from packlm.errors import ConfigError
from packlm.tokenizer import Tokenizer
from packlm.tokenizer.chat import CHAT_TOKENS

PLAIN = ["<|endoftext|>", "<|pad|>"]


def byte_tokenizer(specials: list[str], merges=()) -> Tokenizer:
    """Bytes, then one merged token per merge."""
    vocab = {i: bytes([i]) for i in range(256)}
    vocab.update({256 + k: a + b for k, (a, b) in enumerate(merges)})
    return Tokenizer(vocab, merges, specials)


def checkpoint_of(tokenizer: Tokenizer) -> dict:
    return {
        "state_dict": {},
        "hyper_parameters": {"model": {}},
        KEY: {"tokenizer": tokenizer.__getstate__()},
    }


def test_another_tokenizer_is_named_by_the_path_that_loads_it(tmp_path):
    pretrained = byte_tokenizer([*PLAIN, *CHAT_TOKENS], [(b"a", b"b")])
    run = byte_tokenizer([*PLAIN, *CHAT_TOKENS])  # trained for the run: other ids
    with pytest.raises(ConfigError, match=r"add tokenizer\.path=(\S+) \(the checkpoint") as e:
        check_init_from("pre.ckpt", checkpoint_of(pretrained), ModelConfig(), run, tmp_path)
    path = str(e.value).split("tokenizer.path=", 1)[1].split(" ", 1)[0]
    assert path.startswith(str(tmp_path.resolve()))
    loaded = Tokenizer.load(path)
    assert loaded.digest() == pretrained.digest()
    check_init_from("pre.ckpt", checkpoint_of(pretrained), ModelConfig(), loaded, tmp_path)


def test_a_checkpoint_without_chat_tokens_says_how_to_pretrain_for_conversations(tmp_path):
    pretrained = byte_tokenizer(PLAIN)
    run = byte_tokenizer([*PLAIN, *CHAT_TOKENS])  # the run holds conversations
    with pytest.raises(ConfigError, match=r"has no <\|im_start\|> / <\|im_end\|>.*special_tokens"):
        check_init_from("pre.ckpt", checkpoint_of(pretrained), ModelConfig(), run, tmp_path)
    assert not (tmp_path / "tokenizers").exists()  # nothing saved that would not work
    # a plain-text run from the same checkpoint is told the path instead
    with pytest.raises(ConfigError, match="add tokenizer.path="):
        check_init_from("pre.ckpt", checkpoint_of(pretrained), ModelConfig(),
                        byte_tokenizer(PLAIN, [(b"a", b"b")]), tmp_path)  # fmt: skip


def test_the_same_tokenizer_passes_and_nothing_is_written(tmp_path):
    tok = byte_tokenizer([*PLAIN, *CHAT_TOKENS])
    check_init_from("pre.ckpt", checkpoint_of(tok), ModelConfig(), tok, tmp_path)
    assert not any(tmp_path.iterdir())
