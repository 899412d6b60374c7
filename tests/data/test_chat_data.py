"""Conversations through the data path: store (ids + role codes), loader, batch labels."""

from __future__ import annotations

import json

import numpy as np
import pytest

from packlm.batch import IGNORE_INDEX, counts, make_batch
from packlm.config.data import DataConfig
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.epoch.collate import collate_arrays
from packlm.data.epoch.loader import WindowDataset
from packlm.data.epoch.sampler import BatchPieces
from packlm.data.store.layout import ROLES_FILE
from packlm.data.store.prepared import prepare_stores
from packlm.tokenizer.chat import IM_END, IM_START, ROLE_CODES, ChatFormat, supervised_table

TURNS = [("system", "Be brief."), ("user", "What is 2+2? Say <|im_end|> too."),
         ("assistant", "4. <|im_end|>"), ("user", "And 3+3?"), ("assistant", "6.")]  # fmt: skip
FORMS = [
    {"messages": [{"role": r, "content": c} for r, c in TURNS]},
    {"conversations": [{"from": {"user": "human", "assistant": "gpt"}.get(r, r), "value": c}
                       for r, c in TURNS]},
    {"prompt": [{"role": r, "content": c} for r, c in TURNS[:-1]], "completion": TURNS[-1][1]},
]  # fmt: skip
PROSE = "Plain text is supervised everywhere, as before. " * 20


def prepare(tmp_path, entries, **data):
    config = DataConfig(sources=entries, val_fraction=0.0, **data)
    return prepare_stores(config, TokenizerConfig(vocab_size=400), tmp_path / "cache",
                          progress=False, num_workers=0)  # fmt: skip


@pytest.fixture(scope="module")
def chat_store(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("chat")
    chat, text = tmp_path / "chat.jsonl", tmp_path / "prose.txt"
    chat.write_text("".join(json.dumps(r) + "\n" for r in FORMS), encoding="utf-8")
    text.write_text(PROSE, encoding="utf-8")
    prepared = prepare(tmp_path, [{"path": str(chat), "chat": "auto"}, str(text)])
    return prepared, prepared.open("train")


def test_the_store_keeps_ids_and_role_codes_and_the_forms_agree(chat_store):
    prepared, store = chat_store
    tok = prepared.tokenizer
    assert {IM_START, IM_END} <= set(tok.special_tokens)  # added to the trained tokenizer
    chat = ChatFormat.of(tok)
    ids, codes = chat.render(TURNS, tok.encode_ordinary)
    assert store.n_docs == 4 and store.roles is not None
    for d in range(3):  # the three forms: the same ids and codes, then EOS (markup)
        a, b = store.doc_offsets[d], store.doc_offsets[d + 1]
        assert store.tokens[a:b].tolist() == ids + [store.eos_id]
        assert store.roles[a:b].tolist() == list(codes) + [1]
    a, b = store.doc_offsets[3], store.doc_offsets[4]
    assert not store.roles[a:b].any()  # plain text: code 0
    roles = store.manifest["counts"]["roles"]
    assert sum(roles.values()) == store.n_tokens and roles["text"] == b - a
    assert store.manifest["counts"]["stored_bytes"] == store.manifest["counts"]["bytes"]


def test_a_plain_text_store_has_no_roles_file(tmp_path):
    (tmp_path / "a.txt").write_text(PROSE, encoding="utf-8")
    prepared = prepare(tmp_path, [str(tmp_path / "a.txt")])
    store = prepared.open("train")
    assert store.roles is None and ROLES_FILE not in store.manifest["files"]
    assert IM_START not in prepared.tokenizer.special_tokens


def test_worked_row_with_a_mask():
    """Invariant 3 with a supervision mask: labels[t] stays only where mask[t+1]."""
    tokens = np.array([[1, 2, 3, 4, 5, 6]])
    segments = np.array([[0, 0, 0, 1, 1, 1]], dtype=np.int32)
    supervised = np.array([[False, True, False, False, True, True]])
    batch = make_batch(tokens, segments, "document", supervised=supervised)
    assert batch["labels"].tolist() == [[2, IGNORE_INDEX, IGNORE_INDEX, 5, 6]]
    no_mask = make_batch(tokens, segments, "document")["labels"]
    assert no_mask.tolist() == [[2, 3, IGNORE_INDEX, 5, 6]]


@pytest.mark.parametrize("bos", [False, True])
@pytest.mark.parametrize("chat_supervised", ["assistant", "all"])
def test_packed_rows_supervise_the_assistant_turns_only(chat_store, bos, chat_supervised):
    prepared, store = chat_store
    tok = prepared.tokenizer
    lengths = store.doc_lengths + bos
    window = int(lengths.sum()) + 3  # all four documents in one row, PAD after
    dataset = WindowDataset(store.path, window, store.pad_id, store.eos_id if bos else None,
                            chat_supervised=chat_supervised)  # fmt: skip
    pieces = np.stack([np.zeros(4, np.int64), np.arange(4), np.zeros(4, np.int64), lengths])
    samples = dataset[BatchPieces(2, pieces)]
    batch = collate_arrays(samples, "document")
    labels, seg = batch["labels"], batch["segment_ids"]
    supervised, inputs, nonpad = counts(labels, seg)[:3]
    assert inputs >= nonpad >= supervised > 0
    # supervised equals the count the mask gives: same segment, real, and mask[t+1]
    same = (samples.segments[:, 1:] == samples.segments[:, :-1]) & (samples.segments[:, 1:] >= 0)
    assert supervised == (same & samples.supervised[:, 1:]).sum()
    starts = np.cumsum(lengths) - lengths  # each document's first column
    if chat_supervised == "assistant":  # <|im_start|> (or the BOS) starts no assistant turn
        assert not samples.supervised[0, starts[:3]].any()
    if bos:  # a BOS is never a target, plain text's neither
        assert not samples.supervised[0, starts].any()
    for d in range(3):  # each conversation: its assistant turns and end tokens, in order
        targets = labels[0][(seg[0] == d) & (labels[0] != IGNORE_INDEX)]
        if chat_supervised == "assistant":
            assert tok.decode(targets) == "4. <|im_end|><|im_end|>6.<|im_end|>"
        else:
            assert len(targets) == lengths[d] - 1  # every target, as plain text
    prose = labels[0][seg[0] == 3]
    assert (prose != IGNORE_INDEX).sum() == lengths[3] - 1  # plain text: all supervised


def test_a_batch_of_context_only_has_no_target(chat_store):
    """Only the user's part of a conversation in the row: no target, counted as 0."""
    prepared, store = chat_store
    codes = np.asarray(store.roles[: store.doc_offsets[1]])
    first_answer = int(np.flatnonzero(codes == ROLE_CODES["assistant"])[0])
    dataset = WindowDataset(store.path, first_answer - 1, store.pad_id)  # reads T+1 tokens
    pieces = np.array([[0], [0], [0], [first_answer]])
    batch = collate_arrays(dataset[BatchPieces(1, pieces)], "document")
    assert (batch["labels"] == IGNORE_INDEX).all()
    assert counts(batch["labels"], batch["segment_ids"])[0] == 0
    assert supervised_table("assistant")[codes[:first_answer]].sum() == 0
