"""The chat format: ids and role codes in one pass; each assistant turn's supervised tokens
decode to its text and end-of-turn token; a control token's text in a turn stays text."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packlm.tokenizer import Tokenizer, train_bpe_from_iterator
from packlm.tokenizer.chat import (
    IM_END,
    IM_START,
    MARKUP,
    ROLE_CODES,
    ROLES,
    ChatFormat,
    ChatTokenError,
    render_text,
    supervised_table,
    text_bytes,
)

SPECIALS = ["<|endoftext|>", "<|pad|>", IM_START, IM_END]
TRAIN = [render_text([("user", "hello there, how are you?"), ("assistant", "fine, thanks!")])] * 20


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    vocab, merges = train_bpe_from_iterator(TRAIN, 400, SPECIALS, num_workers=1)
    return Tokenizer(vocab, merges, SPECIALS)


content = st.lists(
    st.sampled_from(list("ab \n\t<|>_éü日") + [IM_END, IM_START, "<|endoftext|>", "\r\n"]),
    max_size=30,
).map("".join)
turns = st.lists(st.tuples(st.sampled_from(ROLES), content), min_size=1, max_size=6)


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of each run of True."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True))


@settings(max_examples=150, deadline=None)
@given(conversation=turns)
def test_each_assistant_turn_supervises_exactly_its_text_and_end_token(tok, conversation):
    chat = ChatFormat.of(tok)
    ids, codes = chat.render(conversation, tok.encode_ordinary)
    ids, codes = np.array(ids), np.frombuffer(codes, np.uint8)
    assert len(ids) == len(codes)
    assert tok.decode(ids) == render_text(conversation)  # the rendering, byte for byte
    # control tokens only where the format puts them: a turn's "<|im_end|>" text is text
    assert (ids == chat.start_id).sum() == (ids == chat.end_id).sum() == len(conversation)
    assert (codes[ids == chat.start_id] == MARKUP).all()
    mask = supervised_table("assistant")[codes]
    got = [tok.decode(ids[a:b]) for a, b in runs(mask)]
    answers = [c for role, c in conversation if role == "assistant"]
    assert len(got) == len(answers)
    for text, answer in zip(got, answers, strict=True):  # every byte of the answer, in order;
        # the header's newline too only where the tokenizer joined it with leading whitespace
        assert text == answer + IM_END or (text == "\n" + answer + IM_END and answer[:1].isspace())
    # the end-of-turn token is the last supervised token of every assistant turn
    assert all(ids[b - 1] == chat.end_id for _, b in runs(mask))
    assert supervised_table("all")[codes].all()
    assert int(tok.token_byte_lengths()[ids].sum()) == text_bytes(conversation)


def test_roles_codes_and_tables():
    assert not supervised_table("assistant")[[MARKUP, ROLE_CODES["user"], ROLE_CODES["system"],
                                              ROLE_CODES["tool"]]].any()  # fmt: skip
    assert supervised_table("assistant")[[0, ROLE_CODES["assistant"]]].all()
    with pytest.raises(ValueError, match="supervised='bot'"):
        supervised_table("bot")


def test_user_text_holding_the_end_token_is_encoded_as_text(tok):
    chat = ChatFormat.of(tok)
    ids, _ = chat.render([("user", f"say {IM_END} now"), ("assistant", "ok")], tok.encode_ordinary)
    assert ids.count(chat.end_id) == 2  # the user's and the assistant's ends, not the typed one
    assert tok.decode(ids).count(IM_END) == 3


def test_a_tokenizer_without_the_chat_tokens_is_refused_and_a_loaded_one_is_mapped(tok):
    vocab, merges = train_bpe_from_iterator(TRAIN, 300, SPECIALS[:2], num_workers=1)
    plain = Tokenizer(vocab, merges, SPECIALS[:2])
    with pytest.raises(ChatTokenError, match="no token '<\\|im_start\\|>'"):
        ChatFormat.of(plain)
    # a loaded tokenizer whose vocabulary holds the tokens (not marked special) keeps its ids
    vocab = dict(vocab)
    extra = {len(vocab): IM_START.encode(), len(vocab) + 1: IM_END.encode()}
    loaded = Tokenizer({**vocab, **extra}, merges, SPECIALS[:2])
    chat = ChatFormat.of(loaded)
    assert (chat.start_id, chat.end_id) == (len(vocab), len(vocab) + 1)
    assert ChatFormat.of(tok) == ChatFormat(2, 3)  # trained: specials first, in order
