"""Chatting with a model: the prompt is rendered as training renders a conversation, and the
answer stops at the end-of-turn token `<|im_end|>`, which is not part of it."""

from __future__ import annotations

import pytest
import torch

from packlm.model.sampling import sample_reply
from packlm.tokenizer import Tokenizer, train_bpe_from_iterator
from packlm.tokenizer.chat import IM_END, IM_START, ChatFormat, ChatTokenError, render_text

SPECIALS = ["<|endoftext|>", "<|pad|>", IM_START, IM_END]
TRAIN = [render_text([("user", "What is 2 + 2?"), ("assistant", "4")])] * 20


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    vocab, merges = train_bpe_from_iterator(TRAIN, 300, SPECIALS, num_workers=1)
    return Tokenizer(vocab, merges, SPECIALS)


def scripted(answer: list[int], vocab: int, seen: list[list[int]]):
    """logits_fn that emits `answer` one id at a time (then repeats its last), recording each
    input it was given."""

    def logits_fn(ids: torch.Tensor) -> torch.Tensor:  # [1, T] -> [1, T, V]
        seen.append(ids[0].tolist())
        k = min(len(seen) - 1, len(answer) - 1)
        out = torch.full((1, ids.shape[1], vocab), -1e9)
        out[0, -1, answer[k]] = 0.0
        return out

    return logits_fn


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_the_answer_stops_at_the_end_of_turn_token(tok, temperature):
    chat = ChatFormat.of(tok)
    four = tok.encode_ordinary("4 and 4")
    seen: list[list[int]] = []
    fn = scripted([*four, chat.end_id, *four], tok.vocab_size, seen)
    reply, ended = sample_reply(fn, tok, [("user", "What is 2 + 2?")], 50, 64, temperature)
    assert (reply, ended) == ("4 and 4", True)
    assert len(seen) == len(four) + 1  # nothing sampled after <|im_end|>
    # the prompt is the training rendering of the user turn, then the assistant's header
    ids, _ = chat.render([("user", "What is 2 + 2?")], tok.encode_ordinary)
    assert seen[0] == [*ids, chat.start_id, *tok.encode_ordinary("assistant\n")]
    assert tok.decode(seen[0]) == render_text([("user", "What is 2 + 2?")]) + (
        f"{IM_START}assistant\n"
    )


def test_an_answer_without_the_end_token_says_so(tok):
    never = tok.encode_ordinary("4")
    reply, ended = sample_reply(scripted(never, tok.vocab_size, []), tok,
                                [("user", "x")], 5, 64, 0.0)  # fmt: skip
    assert not ended and reply == "4" * 5


def test_im_end_typed_by_the_user_is_text_in_the_prompt(tok):
    chat = ChatFormat.of(tok)
    seen: list[list[int]] = []
    sample_reply(scripted([chat.end_id], tok.vocab_size, seen), tok,
                 [("user", f"say {IM_END} now")], 5, 64, 0.0)  # fmt: skip
    assert seen[0].count(chat.end_id) == 1 and seen[0].count(chat.start_id) == 2  # the turn's own


def test_a_tokenizer_without_chat_tokens_is_refused():
    specials = ["<|endoftext|>", "<|pad|>"]
    vocab, merges = train_bpe_from_iterator(["plain text only"] * 5, 280, specials, num_workers=1)
    plain = Tokenizer(vocab, merges, specials)
    with pytest.raises(ChatTokenError, match="<|im_start|>"):
        sample_reply(scripted([0], plain.vocab_size, []), plain, [("user", "hi")], 5, 64)
