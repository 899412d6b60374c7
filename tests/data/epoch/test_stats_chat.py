"""The plan statistics on a store with conversations: `supervised_tokens`, `supervised_ratio`
and the per-source `supervised_tokens` count exactly the labels the loader gives under
data.chat_supervised (the sum over the epoch's batches of labels != -100), for the training
and the validation plans and a mixture's source passes, so a token budget
(train.max_supervised_tokens) sizes its horizon from the masked rate. What describes the
windows (target multiplicity, never a target, overlap) stays per stream position. The store's
token at position p is p, so every label names the store token it is."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.chat_stores import chat_documents, role_codes, write_chat_store
from helpers.plans import config
from packlm.data.datamodule import PackedDataModule
from packlm.data.epoch import chat_mask as chat_mask_module
from packlm.data.epoch.chat_mask import ChatMask
from packlm.data.epoch.curriculum import sample_targets
from packlm.data.epoch.plan import build_plan
from packlm.data.epoch.statistics import plan_statistics
from packlm.data.store.prepared import PreparedData
from packlm.tokenizer.chat import supervised_table
from packlm.train.compose import _expected_batches

LENGTHS, ROLES = chat_documents(120, seed=3)
SOURCES = np.arange(120) % 3
NAMES = ["a", "b", "c"]
VAL_LENGTHS, VAL_ROLES = chat_documents(20, seed=8)
DOC_OF = np.repeat(np.arange(len(LENGTHS)), LENGTHS)  # store document of each store token
VAL_DOC_OF = np.repeat(np.arange(len(VAL_LENGTHS)), VAL_LENGTHS)
MASKED = ("supervised_tokens", "supervised_ratio")  # the keys the chat mask changes


def prepare(root, train=(LENGTHS, ROLES, SOURCES, NAMES), val=(VAL_LENGTHS, VAL_ROLES)):
    t = write_chat_store(root / "train", *train[:2], train[2].tolist(), train[3])
    v = write_chat_store(root / "val", *val)
    return PreparedData(None, root, t.path, v.path, t.manifest, v.manifest)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    return prepare(tmp_path_factory.mktemp("chat_stats"))


def module(prepared, **keys) -> PackedDataModule:
    keys = {"batch_size": 5, "seed": 11, "random_offset": True, "shuffle": True, **keys}
    return PackedDataModule(prepared=prepared, **keys)


def epoch_labels(loader) -> np.ndarray:
    """int64 [targets]: every label of the epoch's batches that is a target (store positions)."""
    out = [batch["labels"].numpy() for batch in loader]
    return np.concatenate([lab[lab != -100] for lab in out]) if out else np.zeros(0, np.int64)


def unmasked(dm, split="train") -> dict:
    """The statistics of the same plan without the chat mask (every target: the old count)."""
    plan = dm.plan(0, split)
    mask, plan.chat_mask = plan.chat_mask, None
    try:
        store = dm.store(split)
        return plan_statistics(plan, np.asarray(store.doc_sources), store.source_names)
    finally:
        plan.chat_mask = mask


@pytest.mark.parametrize("chat_supervised", ["assistant", "all"])
@pytest.mark.parametrize("packing", ["none", "document", "stream"])
@pytest.mark.parametrize(("window", "bos"), [(1, True), (4, False), (4, True), (48, True)])
def test_supervised_tokens_are_the_labels_the_loader_gives(
    prepared, chat_supervised, packing, window, bos
):
    """Windows of 1 and 4 are shorter than most conversations (up to 39 tokens), 48 longer
    than any: training and validation statistics equal the labels, in total and per source."""
    dm = module(prepared, chat_supervised=chat_supervised, packing=packing, window=window,
                stride=max(1, window * 3 // 4), bos=bos)  # fmt: skip
    stats = dm.plan_statistics(0)
    labels = epoch_labels(dm.train_dataloader())
    table = supervised_table(chat_supervised)
    assert table[role_codes(LENGTHS, ROLES)[labels]].all()  # the loader does mask
    assert stats["supervised_tokens"] == len(labels) > 0
    assert stats["supervised_ratio"] == len(labels) / (stats["samples"] * window)
    per_source = np.bincount(SOURCES[DOC_OF[labels]], minlength=3)
    by_name = {n: stats["sources"][n]["supervised_tokens"] for n in NAMES}
    assert by_name == dict(zip(NAMES, per_source.tolist(), strict=True))
    assert sum(by_name.values()) == stats["supervised_tokens"]
    val = dm.plan_statistics(0, "val")
    assert val["supervised_tokens"] == len(epoch_labels(dm.val_dataloader()))

    # the per-position statistics are those of every window target, as without a mask
    old = unmasked(dm)
    assert {k: v for k, v in stats.items() if k not in (*MASKED, "sources", "histograms")} == {
        k: v for k, v in old.items() if k not in (*MASKED, "sources", "histograms")
    }
    assert stats["target_multiplicity_mean"] == old["supervised_tokens"] / stats["stream_tokens"]
    assert stats["supervised_tokens"] <= old["supervised_tokens"]
    if chat_supervised == "assistant":
        assert stats["supervised_tokens"] < old["supervised_tokens"]
    elif not (packing == "stream" and bos):  # `all`: the old count, bit for bit
        assert stats["supervised_tokens"] == old["supervised_tokens"]
        assert stats["sources"] == old["sources"]
    # (`all` in stream packing with a BOS: a BOS inside a row is never a label, was counted)


def test_a_plain_text_store_keeps_its_statistics_bit_for_bit(tmp_path):
    """No role codes: no mask, no role read, the coverage's counts as before."""
    plain = prepare(tmp_path, train=(LENGTHS, [None] * len(LENGTHS), SOURCES, NAMES))
    dm = module(plain, packing="document", window=8, stride=6, bos=True)
    assert dm.plan(0).chat_mask is None and dm.plan(0, "val").chat_mask is not None
    stats = dm.plan_statistics(0)
    assert stats["supervised_tokens"] == len(epoch_labels(dm.train_dataloader()))
    assert unmasked(dm)["supervised_tokens"] == stats["supervised_tokens"]


@pytest.mark.parametrize("chunk_tokens", [9, 40, 1 << 21])
def test_roles_are_read_in_bounded_chunks_and_the_count_does_not_depend_on_them(
    prepared, monkeypatch, chunk_tokens
):
    """No call of `ChatMask.allowed` reads more than TOKENS tokens (or one sample's T+1); the
    counts are the same whatever the chunk."""
    reference = module(prepared, packing="stream", window=8, stride=5).plan_statistics(0)
    reads, allowed = [], ChatMask.allowed

    def counting(self, doc, start, length):
        reads.append(int(np.sum(length)))
        return allowed(self, doc, start, length)

    monkeypatch.setattr(chat_mask_module, "TOKENS", chunk_tokens)
    monkeypatch.setattr(ChatMask, "allowed", counting)
    stats = module(prepared, packing="stream", window=8, stride=5).plan_statistics(0)
    assert stats["supervised_tokens"] == reference["supervised_tokens"]
    assert stats["sources"] == reference["sources"]
    assert reads and max(reads) <= max(chunk_tokens, 8 + 1)


def test_a_token_budget_sizes_its_horizon_from_the_masked_rate(prepared):
    """train.max_supervised_tokens = one epoch's labels: the expected global batches are the
    epoch's samples / B (the stats' rate is exact for epoch 0), and the loader reaches the
    budget at the epoch's last batch, within one batch of it; the unmasked rate would have
    ended the schedule far earlier."""
    dm = module(prepared, packing="document", window=8, stride=8)
    stats = dm.plan_statistics(0)
    budget = stats["supervised_tokens"]
    expected = _expected_batches(dm, 1)(budget)
    assert expected == pytest.approx(stats["samples"] / 5)
    per_batch = [int((b["labels"] != -100).sum()) for b in dm.train_dataloader()]
    reached = int(np.searchsorted(np.cumsum(per_batch), budget)) + 1  # batches to the budget
    assert reached == len(per_batch) and 0 <= reached - expected < 1
    old_rate = unmasked(dm)["supervised_tokens"] / stats["samples"] * 5  # every target
    assert budget / old_rate < reached - 1  # the old horizon: short by more than a batch
    half = _expected_batches(dm, 1)(budget / 2)  # the curve's midpoint
    assert half == pytest.approx(expected / 2)


def test_a_mixture_rates_its_sources_by_the_masked_targets(prepared):
    """Each source's pass 0 supervised targets per row (the mixture's token horizon) are the
    labels of its samples under the mask (the curriculum's count, itself the loader's)."""
    shares = zip(NAMES, (0.5, 0.3, 0.2), strict=True)
    sources = [{"path": f"{n}.jsonl", "name": n, "share": s} for n, s in shares]
    dm = module(prepared, packing="document", window=8, stride=8, sources=sources)
    rates = dm.mixture_rates(5)
    streams = dm.streams(5)
    for s in range(3):
        plan = streams.plan(s, 0)
        assert plan.chat_mask is not None
        labels = int(sample_targets(plan, np.arange(plan.n_samples)).sum())
        assert rates.per_row[s] == pytest.approx(labels / plan.n_samples)
        plan.chat_mask = None
        every = int(sample_targets(plan, np.arange(plan.n_samples)).sum())
        assert labels < every


def test_conversations_without_an_assistant_token_have_no_supervised_target(tmp_path):
    """Only context in every window: 0 supervised tokens (ratio 0) under the assistant mask,
    yet every window target counts under `all`; the per-position statistics are the same."""
    lengths, roles = chat_documents(30, seed=4, context_first=30)
    context = prepare(tmp_path, train=(lengths, roles, np.arange(30) % 3, NAMES))
    stats = {}
    for mode in ("assistant", "all"):
        dm = module(context, chat_supervised=mode, packing="document", window=4, stride=4)
        stats[mode] = dm.plan_statistics(0)
        assert stats[mode]["supervised_tokens"] == len(epoch_labels(dm.train_dataloader()))
    assert stats["assistant"]["supervised_tokens"] == 0
    assert stats["assistant"]["supervised_ratio"] == 0.0
    assert all(s["supervised_tokens"] == 0 for s in stats["assistant"]["sources"].values())
    assert stats["all"]["supervised_tokens"] > 0
    same = ("target_multiplicity_mean", "never_target_fraction", "overlap_ratio", "samples")
    assert all(stats["assistant"][k] == stats["all"][k] for k in same)


def test_a_plan_without_samples_and_an_empty_split_count_zero(prepared, tmp_path):
    """A plan of no document under a chat mask (a store's mask, an empty epoch) and a
    validation split without documents: 0 samples, 0 targets, no division by zero."""
    mask = module(prepared).plan(0).chat_mask
    plan = build_plan(np.zeros(0, np.int64), config(window=4), 0)
    plan.chat_mask = mask
    stats = plan_statistics(plan, np.zeros(0, np.int64), NAMES)
    assert (stats["samples"], stats["supervised_tokens"], stats["supervised_ratio"]) == (0, 0, 0)
    assert [s["supervised_tokens"] for s in stats["sources"].values()] == [0, 0, 0]
    empty = prepare(tmp_path, val=([], []))
    val = module(empty, packing="document", window=4, stride=4).plan_statistics(0, "val")
    assert (val["samples"], val["supervised_tokens"], val["supervised_ratio"]) == (0, 0, 0.0)
