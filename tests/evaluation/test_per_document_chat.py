"""`evaluate` on conversations: per_document=true scores exactly the targets the run's chat
mask keeps (data.chat_supervised, as the checkpoint records it), document by document, the
same targets and loss as the run-level validation windows where every document is whole;
given files (data.val_sources) are scored with the checkpoint's chat_supervised too."""

from __future__ import annotations

import csv
import json
import random

import numpy as np
import pytest
import torch

from packlm.checkpoint.contents import KEY
from packlm.commands.evaluate import evaluate, open_scoring
from packlm.model.lit_module import LitCausalLM
from packlm.tokenizer import Tokenizer, train_bpe_from_iterator
from packlm.tokenizer.chat import IM_END, IM_START, supervised_table

SPECIALS = ["<|endoftext|>", "<|pad|>", IM_START, IM_END]
WINDOW = 48
WORDS = ["alpha", "beta", "gamma", "delta", "sum", "is", "the", "answer", "7", "42"]


def conversations(n: int, seed: int) -> list[list[dict[str, str]]]:
    rng = random.Random(seed)
    out = []
    for k in range(n):
        turns = [{"role": "system", "content": "Be brief."}] if k % 3 == 0 else []
        for _ in range(rng.randint(1, 2)):
            turns.append({"role": "user", "content": " ".join(rng.choices(WORDS, k=3))})
            answer = " ".join(rng.choices(WORDS, k=rng.randint(1, 5)))
            turns.append({"role": "assistant", "content": answer})
        out.append(turns)
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(folder with chat.jsonl and prose.txt, a writer of checkpoints with a data config)."""
    root = tmp_path_factory.mktemp("per_document_chat")
    convs = conversations(24, seed=2)
    lines = "".join(json.dumps({"messages": t}) + "\n" for t in convs)
    (root / "chat.jsonl").write_text(lines, encoding="utf-8")
    prose = " ".join(random.Random(3).choices(WORDS, k=150)) + "."
    (root / "prose.txt").write_text(prose, encoding="utf-8")
    texts = [m["content"] for t in convs for m in t] + [prose]
    tok = Tokenizer(*train_bpe_from_iterator(texts, 300, SPECIALS, num_workers=1), SPECIALS)
    torch.manual_seed(0)
    module = LitCausalLM(model=dict(vocab_size=tok.vocab_size, context_length=WINDOW,
                                    n_layer=1, n_head=2, n_embd=32))  # fmt: skip

    def checkpoint(name: str, data: dict) -> str:
        ckpt = {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
                KEY: {"tokenizer": tok.__getstate__(), "data": data}}  # fmt: skip
        torch.save(ckpt, root / name)
        return str(root / name)

    return root, checkpoint


def mask_sums(store, chat_supervised: str, bos: bool) -> np.ndarray:
    """int64 [n_docs]: each document's targets the chat mask keeps, written out per document:
    token j of a document is a target for j >= 1 (with data.bos every stored token is, the
    BOS before it is not one) where its role code trains."""
    table, offsets = supervised_table(chat_supervised), np.asarray(store.doc_offsets)
    codes = np.zeros(store.n_tokens, np.uint8) if store.roles is None else np.asarray(store.roles)
    return np.array([int(table[codes[a + (0 if bos else 1) : b]].sum())
                     for a, b in zip(offsets[:-1], offsets[1:], strict=True)])  # fmt: skip


def table_rows(result) -> dict[int, dict[str, str]]:
    with open(result["per_document"]["csv"], newline="", encoding="utf-8") as f:
        return {int(r["document"]): r for r in csv.DictReader(f)}


@pytest.mark.parametrize("split", ["given", "own"])
@pytest.mark.parametrize("bos", [False, True])
@pytest.mark.parametrize("chat_supervised", ["assistant", "all"])
def test_per_document_scores_the_runs_chat_mask_like_the_validation_windows(
    run, tmp_path, chat_supervised, bos, split
):
    """Packing `none` and conversations no longer than the window: each is whole in its
    validation window, so both passes score the same targets with the same context."""
    root, checkpoint = run
    chat = {"path": str(root / "chat.jsonl"), "chat": "auto"}
    data = {"window": WINDOW, "packing": "none", "bos": bos, "chat_supervised": chat_supervised}
    if split == "own":  # the run's own validation split, as the checkpoint records it
        data.update(sources=[chat], val_fraction=0.5)
    ckpt = checkpoint(f"{chat_supervised}-{bos}-{split}.ckpt", data)
    keys = {"val_sources": [chat]} if split == "given" else {}
    store = open_scoring(ckpt, keys, tmp_path, per_document=True).store
    assert store.roles is not None and store.n_docs >= 5
    lengths = np.diff(np.asarray(store.doc_offsets)) + bos
    assert lengths.max() <= WINDOW + 1  # every document whole in one window
    expected = mask_sums(store, chat_supervised, bos)
    documents = evaluate(ckpt, keys, tmp_path, per_document_path=tmp_path / "d.csv")
    windows = evaluate(ckpt, keys, tmp_path)
    assert documents["supervised_tokens"] == windows["supervised_tokens"] == expected.sum()
    assert documents["loss"] == pytest.approx(windows["loss"], rel=1e-5)
    assert documents["bytes"] == windows["bytes"]
    rows = table_rows(documents)
    assert {d: int(r["supervised"]) for d, r in rows.items()} == dict(enumerate(expected))
    every = (lengths - 1).sum()  # all targets: what per_document scored before
    if chat_supervised == "assistant":
        assert expected.sum() < every
    else:
        assert expected.sum() == every


@pytest.mark.parametrize("chat_supervised", ["assistant", "all"])
def test_rolling_windows_keep_the_mask_and_score_each_target_once(run, tmp_path, chat_supervised):
    """A text document longer than the window beside conversations: rolling windows (stride
    16) over it, the mask on the conversations; each document's count is its mask sum."""
    root, checkpoint = run
    data = {"window": WINDOW, "packing": "document", "chat_supervised": chat_supervised}
    ckpt = checkpoint(f"rolling-{chat_supervised}.ckpt", data)
    sources = [{"path": str(root / "chat.jsonl"), "chat": "auto"}, str(root / "prose.txt")]
    keys = {"val_sources": sources}
    store = open_scoring(ckpt, keys, tmp_path, per_document=True).store
    lengths = np.diff(np.asarray(store.doc_offsets))
    assert lengths.max() > 2 * WINDOW  # the prose: several rolling windows
    expected = mask_sums(store, chat_supervised, False)
    result = evaluate(ckpt, keys, tmp_path, per_document_path=tmp_path / "r.csv",
                      per_document_stride=16)  # fmt: skip
    assert result["supervised_tokens"] == expected.sum()
    rows = table_rows(result)
    assert {d: int(r["supervised"]) for d, r in rows.items()} == dict(enumerate(expected))
    long = int(np.argmax(lengths))
    assert int(rows[long]["supervised"]) == lengths[long] - 1  # plain text: every target


def test_given_files_are_scored_with_the_checkpoints_chat_supervised(run, tmp_path):
    """data.val_sources given: the checkpoint's chat_supervised is kept (as its window and
    packing are), and a typed data.chat_supervised still wins."""
    root, checkpoint = run
    chat = {"path": str(root / "chat.jsonl"), "chat": "auto"}
    ckpt = checkpoint("all.ckpt", {"window": WINDOW, "packing": "none", "chat_supervised": "all"})
    kept = evaluate(ckpt, {"val_sources": [chat]}, tmp_path)
    typed = evaluate(ckpt, {"val_sources": [chat], "chat_supervised": "assistant"}, tmp_path)
    store = open_scoring(ckpt, {"val_sources": [chat]}, tmp_path).store
    assert kept["supervised_tokens"] == mask_sums(store, "all", False).sum()
    assert typed["supervised_tokens"] == mask_sums(store, "assistant", False).sum()
    assert typed["supervised_tokens"] < kept["supervised_tokens"]


def test_given_files_keep_the_checkpoints_chat_overflow(run, tmp_path):
    """A run that dropped long conversations scores given files the same way (the store is
    built with the checkpoint's chat_overflow, window and pack size); a typed key still wins."""
    root, checkpoint = run
    chat = {"path": str(root / "chat.jsonl"), "chat": "auto"}
    data = {"window": 24, "packing": "none"}  # some conversations are longer than 25 tokens
    stores = {}
    for overflow in ("drop", "cut_turns"):
        ckpt = checkpoint(f"{overflow}.ckpt", {**data, "chat_overflow": overflow})
        stores[overflow] = open_scoring(ckpt, {"val_sources": [chat]}, tmp_path).store
    typed = open_scoring(ckpt, {"val_sources": [chat], "chat_overflow": "drop"}, tmp_path).store
    assert 0 < stores["drop"].n_tokens < stores["cut_turns"].n_tokens
    assert typed.n_tokens == stores["drop"].n_tokens
    for store in stores.values():  # every document fits one sample of the run's window
        assert np.diff(np.asarray(store.doc_offsets)).max() <= 24 + 1
