"""data.chat_overflow: a conversation longer than a sample is dropped, or cut between turns
keeping whole assistant turns; every token counted (tokens in = stored + dropped)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from packlm.batch import IGNORE_INDEX
from packlm.config.data import DataConfig
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.epoch.collate import collate_arrays
from packlm.data.epoch.loader import WindowDataset
from packlm.data.epoch.plan import build_plan
from packlm.data.epoch.sampler import BatchPieces
from packlm.data.store.chat_overflow import Overflow, cut_turns, turn_starts
from packlm.data.store.prepared import prepare_stores
from packlm.errors import ConfigError
from packlm.tokenizer.chat import IM_END, MARKUP, ROLE_CODES, ChatFormat

WINDOW = 48


def conversations(seed: int, n: int) -> list[list[tuple[str, str]]]:
    """Random conversations, short and long, some with a system turn."""
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "sum", "is", "the", "answer", "7", "42"]
    out = []
    for _ in range(n):
        turns = [("system", "Be brief.")] if rng.random() < 0.3 else []
        for _ in range(rng.randint(1, 6)):
            turns.append(("user", " ".join(rng.choices(words, k=rng.randint(1, 12)))))
            turns.append(("assistant", " ".join(rng.choices(words, k=rng.randint(1, 25)))))
        if rng.random() < 0.2:  # a trailing user turn with no answer
            turns.append(("user", "and?"))
        out.append(turns)
    return out


def prepare(tmp_path, convs, **data):
    path = tmp_path / "chat.jsonl"
    rows = [{"messages": [{"role": r, "content": c} for r, c in t]} for t in convs]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return prepare_again(tmp_path, **data)


def prepare_again(tmp_path, **data):
    """The stores of tmp_path/chat.jsonl as written (its mtime is in the key)."""
    data = {"window": WINDOW, "stride": WINDOW, **data}
    config = DataConfig(sources=[{"path": str(tmp_path / "chat.jsonl"), "chat": "auto"}],
                        val_fraction=0.0, **data)  # fmt: skip
    return prepare_stores(config, TokenizerConfig(vocab_size=300), tmp_path / "cache",
                          progress=False, num_workers=0)  # fmt: skip


def test_cut_turns_keeps_whole_exchanges_and_drops_context_first():
    a = np.array([False, True, False, True, False, True])
    assert cut_turns(np.array([3, 3, 3, 3, 3, 3]), a, 6) == [(0, 1), (2, 3), (4, 5)]
    assert cut_turns(np.array([3, 3, 3, 3, 3, 3]), a, 12) == [(0, 3), (4, 5)]
    # the first exchange alone is too long: its user turn goes, then the answer fits
    assert cut_turns(np.array([9, 5, 2, 2, 1, 1]), a, 6) == [(1, 1), (2, 5)]
    # an answer longer than the limit: dropped with its question
    assert cut_turns(np.array([1, 9, 1, 1]), a[:4], 6) == [(2, 3)]
    # trailing user turn: attached when it fits, else dropped
    last = np.array([False, True, False])
    assert cut_turns(np.array([2, 2, 2]), last, 6) == [(0, 2)]
    assert cut_turns(np.array([2, 2, 3]), last, 6) == [(0, 1)]
    assert cut_turns(np.array([2, 2]), np.array([False, False]), 6) == []
    assert cut_turns(np.zeros(0, np.int64), np.zeros(0, bool), 6) == []


@pytest.mark.parametrize("policy", ["cut_turns", "drop"])
def test_tokens_in_equal_stored_plus_dropped(tmp_path, policy):
    convs = conversations(0, 60)
    prepared = prepare(tmp_path, convs, chat_overflow=policy)
    tok, store = prepared.tokenizer, prepared.open("train")
    chat = ChatFormat.of(tok)
    rendered = [len(chat.render(t, tok.encode_ordinary)[0]) + 1 for t in convs]  # + EOS
    limit = WINDOW + 1
    counts = store.manifest["counts"]
    over = counts["chat_overflow"]
    assert over["policy"] == policy and over["max_tokens"] == limit
    assert over["tokens_in"] == sum(rendered)
    assert store.n_tokens + over["tokens_dropped"] == sum(rendered)
    long = sum(n > limit for n in rendered)
    assert long > 5  # the probe holds long conversations
    assert over["conversations_cut"] + over["conversations_dropped"] == long
    assert int(store.doc_lengths.max()) <= limit
    if policy == "drop":
        assert over["conversations_cut"] == 0 and store.n_docs == len(convs) - long
        assert counts["dropped"]["overlong_conversations"] == long
    else:
        assert store.n_docs > len(convs) - long
        assert "overlong_conversations" not in counts["dropped"]


def test_every_cut_piece_is_whole_turns_ending_with_a_whole_answer(tmp_path):
    convs = conversations(1, 60)
    prepared = prepare(tmp_path, convs)
    tok, store = prepared.tokenizer, prepared.open("train")
    chat = ChatFormat.of(tok)
    answers = {c for t in convs for r, c in t if r == "assistant"}
    cut = 0
    for d in range(store.n_docs):
        a, b = int(store.doc_offsets[d]), int(store.doc_offsets[d + 1])
        ids, codes = np.asarray(store.tokens[a:b]), np.asarray(store.roles[a:b])
        starts = turn_starts(ids, codes, chat.start_id)
        assert starts[0] == 0  # a piece opens with <|im_start|>
        doc_id = store.doc_id(d)
        cut += "@turn" in doc_id
        # every assistant turn in the piece decodes to a whole answer + <|im_end|>
        bounds = np.append(starts, b - a)
        roles = []
        for k in range(len(starts)):
            turn = codes[bounds[k] : bounds[k + 1]]
            role = int(turn[turn > MARKUP][0])
            roles.append(role)
            if role == ROLE_CODES["assistant"]:
                text = tok.decode(ids[bounds[k] : bounds[k + 1]][turn == role])
                assert text.endswith(IM_END) and text[: -len(IM_END)] in answers
        assert ROLE_CODES["assistant"] in roles
        if "@turn" in doc_id or ids[-1] != store.eos_id:  # a cut piece ends with an answer
            assert roles[-1] == ROLE_CODES["assistant"] or ids[-1] == store.eos_id
    assert cut > 5


@pytest.mark.parametrize("bos", [False, True])
def test_no_segment_starts_with_a_target_and_rows_hold_whole_pieces(tmp_path, bos):
    """pack_size = window + 1: each row is one pack, so a (cut) conversation is never split
    across rows, and the first token of every segment is no target."""
    pack = WINDOW + 1
    prepared = prepare(tmp_path, conversations(2, 40), pack_size=pack, bos=bos,
                       pack_strategy="best_fit")  # fmt: skip
    store = prepared.open("train")
    assert store.manifest["counts"]["chat_overflow"]["max_tokens"] == pack - bos
    cfg = DataConfig(window=WINDOW, stride=WINDOW, pack_size=pack, bos=bos,
                     pack_strategy="best_fit", random_offset=False)  # fmt: skip
    plan = build_plan(store.doc_lengths + bos, cfg, epoch=0)
    ids = np.arange(plan.n_samples)
    row, doc, start, length = plan.pieces(ids)
    assert (start == 0).all() and (length == store.doc_lengths[doc] + bos).all()  # never cut
    assert np.bincount(doc, minlength=store.n_docs).tolist() == [1] * store.n_docs
    dataset = WindowDataset(store.path, WINDOW, store.pad_id, store.eos_id if bos else None)
    batch = collate_arrays(dataset[BatchPieces(len(ids), np.stack([row, doc, start, length]))],
                           "document")  # fmt: skip
    seg, labels = batch["segment_ids"], batch["labels"]
    first = np.ones_like(seg, dtype=bool)
    first[:, 1:] = seg[:, 1:] != seg[:, :-1]  # [B, T]: a segment's first token
    # labels[t] targets token t+1: never one that starts a segment
    assert (labels[:, :-1][first[:, 1:]] == IGNORE_INDEX).all()
    assert (labels != IGNORE_INDEX).sum() > 0


def test_the_window_is_in_a_chat_stores_key_only(tmp_path):
    convs = conversations(3, 5)
    a = prepare(tmp_path, convs)
    b = prepare_again(tmp_path, seed=7, chat_supervised="all")  # plan settings: reused
    assert a.train_dir == b.train_dir
    c = prepare_again(tmp_path, window=2 * WINDOW, stride=2 * WINDOW)
    assert c.train_dir != a.train_dir
    assert c.train_manifest["counts"]["chat_overflow"]["max_tokens"] == 2 * WINDOW + 1
    (tmp_path / "t.txt").write_text("plain text only. " * 50, encoding="utf-8")
    text = [
        prepare_stores(DataConfig(sources=[str(tmp_path / "t.txt")], val_fraction=0.0,
                                  window=w, stride=w),
                       TokenizerConfig(vocab_size=300), tmp_path / "cache2", progress=False,
                       num_workers=0).train_dir
        for w in (WINDOW, 2 * WINDOW)
    ]  # fmt: skip
    assert text[0] == text[1]
    assert "chat_overflow" not in prepare_stores(
        DataConfig(sources=[str(tmp_path / "t.txt")], val_fraction=0.0),
        TokenizerConfig(vocab_size=300), tmp_path / "cache2", progress=False, num_workers=0,
    ).train_manifest["counts"]  # fmt: skip


@pytest.mark.parametrize("value", ["cut", "", None, 3, "DROP"])
def test_a_bad_policy_names_the_key(value):
    with pytest.raises(ConfigError, match=r"data\.chat_overflow"):
        DataConfig(chat_overflow=value).validate()


def test_overflow_limit_follows_pack_size_and_bos():
    assert Overflow.of(DataConfig(window=64)).max_tokens == 65
    assert Overflow.of(DataConfig(window=64, bos=True)).max_tokens == 64
    assert Overflow.of(DataConfig(window=64, pack_size=40)).max_tokens == 40
    assert Overflow.of(DataConfig(window=64, pack_size=4096)).max_tokens == 65
