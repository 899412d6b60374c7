"""SourceLosses: `Loss/train_by_source/<name>` and `Loss/val_by_source/<name>` weighted by each
source's supervised targets add up to train/loss and val/loss, and the hardest validation
documents reach TensorBoard's Text tab."""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import Logger, TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.data import DataLoader

from helpers.models import V, cat_rows, pack_row, random_docs, tiny_config
from packlm.batch import supervised_by_source
from packlm.callbacks import SourceLosses, StepMetrics
from packlm.callbacks.source_loss import HARDEST, TRAIN, VAL
from packlm.data.datamodule import PackedDataModule
from packlm.data.store.prepared import PreparedData
from packlm.data.store.token_store import write_store
from packlm.model.lit_module import LitCausalLM
from packlm.model.loss import cross_entropy_per_target

T = 16
NAMES = ["a", "b", "c"]


def store(path, n_docs: int, seed: int):
    rng = np.random.default_rng(seed)
    docs = [
        np.append(rng.integers(0, V - 2, size=int(n)), V - 2) for n in rng.integers(2, 40, n_docs)
    ]
    sources = rng.integers(0, 3, size=n_docs).tolist()
    ids = [f"{NAMES[s]}:{NAMES[s]}.jsonl:{i}" for i, s in enumerate(sources)]
    return write_store(path, docs, V, V - 2, V - 1, ids, sources, NAMES)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("stores")
    train, val = store(root / "train", 60, 1), store(root / "val", 14, 2)
    return PreparedData(None, root, train.path, val.path, train.manifest, val.manifest)


class Capture(Logger):
    name, version = "capture", 0

    def __init__(self):
        super().__init__()
        self.rows: dict[int, dict[str, float]] = {}

    def log_metrics(self, metrics, step=None):
        self.rows.setdefault(step, {}).update(metrics)

    def log_hyperparams(self, params, *args, **kwargs):
        pass


class StepBatches(L.Callback):
    """The supervised targets per source of each optimizer step (0-based, Lightning's index)."""

    def __init__(self):
        self.by_step: dict[int, np.ndarray] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        counts = supervised_by_source(batch["labels"].numpy(), batch["source_ids"].numpy(), 3)
        self.by_step[trainer.global_step] = self.by_step.get(trainer.global_step, 0) + counts


def run(prepared, tmp_path, every: int, weighting: str = "token"):
    dm = PackedDataModule(prepared=prepared, window=T, stride=T, batch_size=3, num_workers=0,
                          packing="document", shuffle=True)  # fmt: skip
    torch.manual_seed(0)
    lit = LitCausalLM(tiny_config(context_length=T, loss_weighting=weighting),
                      {"warmup_steps": 0, "lr": 1e-2}, torch.ones(V, dtype=torch.int64))  # fmt: skip
    capture, steps = Capture(), StepBatches()
    tb = TensorBoardLogger(str(tmp_path), name="tb", version="")
    trainer = L.Trainer(
        accelerator="cpu", devices=1, logger=[capture, tb], enable_checkpointing=False,
        max_steps=6, accumulate_grad_batches=2, log_every_n_steps=every, num_sanity_val_steps=1,
        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
        callbacks=[StepMetrics(), SourceLosses(), steps], use_distributed_sampler=False,
    )  # fmt: skip
    trainer.fit(lit, datamodule=dm)
    trainer.limit_val_batches = 1.0
    trainer.validate(lit, datamodule=dm, verbose=False)
    tb.experiment.flush()
    return dm, capture, steps, tb


def weighted(row: dict[str, float], prefix: str, counts: np.ndarray) -> float:
    losses = np.array([row.get(prefix + n, 0.0) for n in NAMES])
    assert all((prefix + n in row) == (c > 0) for n, c in zip(NAMES, counts, strict=True))
    return float((losses * counts).sum() / counts.sum())


@pytest.mark.parametrize("every", [1, 2])
def test_train_source_losses_weighted_by_their_targets_are_the_step_loss(prepared, tmp_path, every):
    _, capture, steps, _ = run(prepared, tmp_path, every)
    logged = {s: r for s, r in capture.rows.items() if "train/loss" in r}
    assert sorted(logged) == [s for s in range(6) if (s + 1) % every == 0]
    for step, row in logged.items():
        counts = steps.by_step[step]
        assert (counts > 0).sum() >= 2  # the check mixes sources
        assert weighted(row, TRAIN, counts) == pytest.approx(row["train/loss"], rel=1e-6)
    assert not any(
        TRAIN + n in r for r in capture.rows.values() if "train/loss" not in r for n in NAMES
    )


def test_under_document_weighting_they_add_up_to_the_per_token_loss(prepared, tmp_path):
    _, capture, steps, _ = run(prepared, tmp_path, 1, "document")
    for step, row in capture.rows.items():
        if "train/loss" in row:
            expected = row["train/loss_per_token"]
            assert weighted(row, TRAIN, steps.by_step[step]) == pytest.approx(expected, rel=1e-6)


def test_validation_source_losses_and_the_hardest_documents(prepared, tmp_path):
    dm, capture, _, tb = run(prepared, tmp_path, 2)
    counts = sum(
        supervised_by_source(b["labels"].numpy(), b["source_ids"].numpy(), 3)
        for b in dm.val_dataloader()
    )
    (row,) = [r for r in capture.rows.values() if "val/loss" in r]  # the sanity check logs none
    assert weighted(row, VAL, counts) == pytest.approx(row["val/loss"], rel=1e-6)

    events = EventAccumulator(tb.log_dir, size_guidance={"tensors": 0, "scalars": 0})
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert {TRAIN + n for n in NAMES} | {VAL + n for n in NAMES} <= scalars
    (event,) = events.Tensors(HARDEST + "/text_summary")
    text = event.tensor_proto.string_val[0].decode()
    caption, table = text.split("\n\n", 1)  # what it ranks, then the table
    window = dm.data.window
    assert caption.startswith(
        f"Ranked by each document's targets in the validation windows (window {window}, "
        f"stride {window}, packing {dm.data.packing}), as val/loss scores them"
    )
    assert "per_document=true" in caption
    lines = table.splitlines()[2:]
    assert len(lines) == 10
    losses = [float(line.split("|")[2]) for line in lines]
    assert losses == sorted(losses, reverse=True)
    val = dm.store("val")
    for line in lines:  # the store index and id, as `python -m packlm.trace` prints them
        document, doc_id = line.split("|")[6].strip(), line.split("|")[7].strip(" `")
        assert val.doc_id(int(document)) == doc_id


def with_sources(batch: dict, sources: list[list[int]]) -> dict:
    """A packed batch with the source of each row's documents (-1 on PAD)."""
    seg = batch["segment_ids"]
    table = torch.tensor([s + [-1] * (seg.shape[1] - len(s)) for s in sources])
    src = torch.where(seg >= 0, table.gather(1, seg.clamp(min=0).long()), -1)
    return {**batch, "source_ids": src.to(torch.int16)}


A = with_sources(
    cat_rows(pack_row(random_docs([7, 8], 1), T), pack_row(random_docs([15], 2), T)),
    [[0, 2], [1]],
)
B = with_sources(cat_rows(pack_row(random_docs([3, 5], 3), T), pack_row([], T)), [[2, 2], [0]])
SHARDS = [(A, B), (B, B)]  # rank r's two micro-batches of the one step (the ranks differ)


class RankShards(LitCausalLM):
    def train_dataloader(self):
        return DataLoader(list(SHARDS[self.global_rank]), batch_size=None)


class SavedSourceLosses(SourceLosses):
    """Rank 0 saves what the step logged (ddp_spawn: the test reads it from a file)."""

    def __init__(self, out: str):
        super().__init__()
        self.out, self.train_sources = out, NAMES

    def on_train_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            metrics = trainer.callback_metrics
            torch.save({k: float(v) for k, v in metrics.items() if k.startswith(TRAIN)}, self.out)


@pytest.mark.slow
def test_two_ddp_ranks_with_accumulation_give_the_brute_force_source_losses(tmp_path):
    out = tmp_path / "rank0.pt"
    torch.manual_seed(0)
    lit = RankShards(tiny_config(context_length=T), {"warmup_steps": 0})
    expected = np.zeros((2, 3))
    with torch.no_grad():  # the step's weights: the first step sees the initial ones
        for batch in [*SHARDS[0], *SHARDS[1]]:
            logits = lit(batch["input_ids"], batch["segment_ids"], batch["position_ids"])
            ce = cross_entropy_per_target(logits, batch["labels"]).double().numpy()
            target = batch["labels"].numpy() != -100
            src = batch["source_ids"].numpy()[target]
            expected[0] += np.bincount(src, weights=ce[target], minlength=3)
            expected[1] += np.bincount(src, minlength=3)
    ddp = L.Trainer(
        accelerator="cpu", devices=2, strategy="ddp_spawn", max_steps=1, logger=False,
        accumulate_grad_batches=2, log_every_n_steps=1, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
        use_distributed_sampler=False, callbacks=[SavedSourceLosses(str(out))],
    )  # fmt: skip
    ddp.fit(lit)
    got = torch.load(out)
    assert expected[1].min() > 0
    for i, name in enumerate(NAMES):
        assert got[TRAIN + name] == pytest.approx(expected[0, i] / expected[1, i], rel=1e-6)
