"""Supervised tokens per source: the batch's `source_ids` (built in the workers) and the step
metrics' `tokens/supervised_by_source/<name>`, which sum exactly to tokens/supervised."""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from helpers.lightning_doubles import Capture
from helpers.models import cat_rows, pack_row, random_docs, tiny_config
from helpers.plans import config, write_position_store
from packlm.batch import supervised_by_source
from packlm.callbacks import StepMetrics
from packlm.data.epoch.loader import PlanDataLoader, WindowDataset, plan_signature
from packlm.data.epoch.plan import build_plan
from packlm.data.epoch.sampler import PlanSampler
from packlm.model.lit_module import LitCausalLM

LENGTHS = np.random.default_rng(5).integers(1, 30, size=80)
SOURCES = np.random.default_rng(6).integers(0, 3, size=80)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("s") / "store"
    return write_position_store(path, LENGTHS, SOURCES.tolist(), ["a", "b", "c"])


@pytest.mark.parametrize("packing", ["none", "document", "stream"])
@pytest.mark.parametrize("bos", [False, True])
def test_per_source_supervised_tokens_equal_a_brute_force_count(store, packing, bos):
    cfg = config(window=8, stride=5, packing=packing, bos=bos, shuffle=True, batch_size=4)
    lengths = np.diff(store.doc_offsets) + int(bos)
    sampler = PlanSampler(lambda e: build_plan(lengths, cfg, e), cfg.batch_size)
    dataset = WindowDataset(store.path, cfg.window, store.pad_id, store.eos_id if bos else None)
    loader = PlanDataLoader(dataset, sampler, packing, plan_signature(cfg, store, None))
    offsets, total = np.asarray(store.doc_offsets), 0
    for batch in loader:
        ids, labels = batch["input_ids"].numpy(), batch["labels"].numpy()
        assert batch["source_ids"].dtype == torch.int16
        got = supervised_by_source(labels, batch["source_ids"].numpy(), 3)
        expected = np.zeros(3, dtype=np.int64)
        for r, j in zip(*np.nonzero(labels != -100), strict=True):
            # a store token's id is its position; a BOS (eos id) belongs to its target's document
            p = ids[r, j] if ids[r, j] < store.eos_id else labels[r, j]
            expected[SOURCES[np.searchsorted(offsets, p, side="right") - 1]] += 1
        assert got.tolist() == expected.tolist()
        assert got.sum() == (labels != -100).sum()
        total += int(got.sum())
    assert total > 0


def with_sources(batch: dict, sources: list[list[int]]) -> dict:
    """A packed batch with the source of each row's documents (-1 on PAD)."""
    seg = batch["segment_ids"]
    table = torch.tensor([s + [-1] * (seg.shape[1] - len(s)) for s in sources])
    src = torch.where(seg >= 0, table.gather(1, seg.clamp(min=0).long()), -1)
    return {**batch, "source_ids": src.to(torch.int16)}


T = 16
A = with_sources(
    cat_rows(pack_row(random_docs([7, 8], 1), T), pack_row(random_docs([15], 2), T)),
    [[0, 2], [1]],
)
B = with_sources(cat_rows(pack_row(random_docs([3, 5], 3), T), pack_row([], T)), [[2, 2], [0]])


@pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no")
def test_logged_per_source_tokens_sum_to_supervised_and_survive_a_checkpoint():
    logger = Capture()
    torch.manual_seed(0)
    lit = LitCausalLM(tiny_config(context_length=T), {"warmup_steps": 0})
    metrics = StepMetrics()
    metrics.source_names = ["a", "b", "c"]
    run = L.Trainer(
        accelerator="cpu", devices=1, logger=logger, enable_checkpointing=False, max_steps=3,
        enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1,
        accumulate_grad_batches=2, callbacks=[metrics], limit_val_batches=0,
    )  # fmt: skip
    batches = [A, B, B, A, A, A]
    run.fit(lit, DataLoader(batches, batch_size=None))
    rows = [m for _, m in logger.rows if "tokens/supervised" in m]
    assert len(rows) == 3
    expected = np.zeros(3, dtype=np.int64)
    for k, row in enumerate(rows):
        for b in batches[2 * k : 2 * k + 2]:
            expected += supervised_by_source(b["labels"].numpy(), b["source_ids"].numpy(), 3)
        by_source = [row[f"tokens/supervised_by_source/{n}"] for n in "abc"]
        assert by_source == expected.tolist()
        assert sum(by_source) == row["tokens/supervised"]
    restored = StepMetrics()
    restored.load_state_dict(metrics.state_dict())
    assert restored.state_dict()["supervised_by_source"] == dict(
        zip("abc", expected.tolist(), strict=True)
    )
