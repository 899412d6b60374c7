"""data.curriculum through train(): the switch in a real run, TensorBoard's data/window and
data/stride, validation at the last phase's window, an lr schedule that follows tokens, and
exact resume from checkpoints written before, at and after the switch."""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from helpers.plans import write_position_store
from helpers.runs import assert_same_weights, checkpoint_step, reliability_overrides
from packlm.commands.stats import statistics
from packlm.config.schema import CONFIG_DIR
from packlm.data.datamodule import PackedDataModule
from packlm.data.store.prepared import PreparedData
from packlm.train import train

CURRICULUM = "data.curriculum=[{window: 8, stride: 8, until: 100}, {window: 32, stride: 16}]"
EXTRA = (CURRICULUM, "optim.warmup_steps=6", "optim.max_steps=8")


class Steps(L.Callback):
    """Per optimizer step: (width of the batch, lr used, supervised tokens trained before it,
    logged data/window and data/stride); the widths of the validation batches."""

    def __init__(self):
        self.rows: dict[int, tuple] = {}
        self.val_widths: set[int] = set()
        self._start: tuple = ()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        lr = trainer.optimizers[0].param_groups[0]["lr"]
        self._start = (batch["input_ids"].shape[1], lr, pl_module.tokens_seen["supervised"])

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        logged = trainer.callback_metrics
        window, stride = (float(logged[k]) for k in ("data/window", "data/stride"))
        self.rows[trainer.global_step - 1] = (*self._start, window, stride)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self.val_widths.add(batch["input_ids"].shape[1])


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_corpus, cache_dir):
    run = tmp_path_factory.mktemp("curriculum")
    steps = Steps()
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        cfg = compose("config", overrides=reliability_overrides(tiny_corpus, cache_dir, *EXTRA))
    train(cfg, run_dir=run, callbacks=[steps])
    return run, steps


def test_the_run_switches_windows_logs_them_and_validates_at_the_last(reference):
    _, steps = reference
    widths = [steps.rows[s][0] for s in sorted(steps.rows)]
    switch = widths.index(32)
    assert 0 < switch < len(widths) - 1 and set(widths[:switch]) == {8}
    assert set(widths[switch:]) == {32}
    for width, _, before, window, stride in steps.rows.values():
        assert (window, stride) == ((8.0, 8.0) if before < 100 else (32.0, 16.0))
        assert window == width
    assert steps.rows[switch][2] >= 100 > steps.rows[switch - 1][2]  # the first batch after until
    assert steps.val_widths == {32}


def test_the_lr_warmup_is_linear_in_tokens_across_the_switch(reference):
    _, steps = reference
    rows = [steps.rows[s] for s in sorted(steps.rows)]
    width = [r[0] for r in rows]
    switch = width.index(32)
    slope = [
        (rows[k + 1][1] - rows[k][1]) / (rows[k + 1][2] - rows[k][2]) for k in range(len(rows) - 1)
    ]
    # warmup: lr per token is the same before and after the switch, though a step of the
    # second phase trains about 4 times the tokens of the first
    assert slope[switch] == pytest.approx(slope[0], rel=1e-6)
    tokens_per_step = [rows[k + 1][2] - rows[k][2] for k in range(len(rows) - 1)]
    assert tokens_per_step[switch] > 2 * tokens_per_step[0]


@pytest.mark.parametrize(
    "where", [pytest.param(-1, marks=pytest.mark.slow), 0, pytest.param(1, marks=pytest.mark.slow)]
)
def test_resume_before_at_and_after_the_switch_is_exact(reference, compose_tiny, tmp_path, where):
    ref_run, ref = reference
    switch = [ref.rows[s][0] for s in sorted(ref.rows)].index(32)
    stop = switch + where
    run = tmp_path / "run"
    train(compose_tiny(*EXTRA, f"trainer.max_steps={stop}"), run_dir=run)
    last = run / "checkpoints" / "last.ckpt"
    assert checkpoint_step(last) == stop
    steps = Steps()
    train(compose_tiny(*EXTRA, f"ckpt_path={last}"), callbacks=[steps])
    assert sorted(steps.rows) == list(range(stop, 8))
    for s, row in steps.rows.items():
        assert row[0] == ref.rows[s][0] and row[2] == ref.rows[s][2]  # same batches, tokens
        assert row[1] == pytest.approx(ref.rows[s][1], rel=1e-9)  # same lr
    assert_same_weights(last, ref_run / "checkpoints" / "last.ckpt")


def test_stats_reports_each_phase(compose_tiny):
    out = statistics(compose_tiny(CURRICULUM))
    phases = out["curriculum"]
    assert [(p["window"], p["stride"], p["until"]) for p in phases] == [(8, 8, 100), (32, 16, None)]
    assert phases[1]["samples"] == out["train"][0]["samples"]  # "train" is the last phase's
    assert phases[0]["samples"] > 2 * phases[1]["samples"]


# --- through Lightning's fit loop, on a store whose token at position p is p --------------------

LENGTHS = np.random.default_rng(0).integers(1, 60, size=90)


class Recorder(L.LightningModule):
    """Records every training batch; its one weight never changes the data."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[torch.Tensor] = []
        self.epochs: list[int] = []  # the epoch of each batch

    def training_step(self, batch, batch_idx):
        self.epochs.append(self.current_epoch)
        self.seen.append(batch["input_ids"].clone())
        return (self.w * batch["input_ids"].float().mean()).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


class SaveAt(L.Callback):
    def __init__(self, steps, directory):
        self.steps, self.directory = set(steps), directory

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step in self.steps:
            trainer.save_checkpoint(self.directory / f"{trainer.global_step}.ckpt")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("stores")
    train_store = write_position_store(root / "train", LENGTHS)
    val = write_position_store(root / "val", LENGTHS[:10])
    return PreparedData(None, root, train_store.path, val.path, train_store.manifest, val.manifest)


def fit(prepared, windows, until, ckpt_path=None, callbacks=(), workers=0):
    (w0, s0), (w1, s1) = windows
    curriculum = [{"window": w0, "stride": s0, "until": until}, {"window": w1, "stride": s1}]
    dm = PackedDataModule(
        prepared=prepared, curriculum=curriculum, batch_size=4, num_workers=workers, seed=5
    )
    model = Recorder()
    trainer = L.Trainer(
        max_epochs=3, accelerator="cpu", logger=False, callbacks=list(callbacks),
        use_distributed_sampler=False, reload_dataloaders_every_n_epochs=1,
        limit_val_batches=0, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return model


@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader` but have no `validation_step`")
@pytest.mark.parametrize(
    ("windows", "workers"),
    [
        (((4, 4), (16, 8)), 0),
        pytest.param(((4, 4), (16, 8)), 2, marks=pytest.mark.slow),
        (((16, 8), (4, 4)), 0),  # an epoch longer than the length read before the loader state
    ],
)
def test_lightning_resume_across_a_mid_epoch_switch_and_epoch_ends(
    prepared, tmp_path, windows, workers
):
    (w0, s0), (w1, _) = windows
    probe = PackedDataModule(prepared=prepared, batch_size=4, window=w0, stride=s0, seed=5)
    until = int(probe.plan_statistics(0)["supervised_tokens"] * 1.5)  # mid second epoch
    reference = fit(prepared, windows, until)
    widths = [b.shape[1] for b in reference.seen]
    switch, first_epoch = widths.index(w1), reference.epochs.count(0)
    assert set(widths[:switch]) == {w0} and set(widths[switch:]) == {w1}
    assert first_epoch < switch < first_epoch + reference.epochs.count(1)  # mid second epoch
    stops = sorted({switch - 1, switch, switch + 1, first_epoch, first_epoch + 1, len(widths) - 2})
    full = fit(prepared, windows, until, callbacks=[SaveAt(stops, tmp_path)], workers=workers)
    assert all(torch.equal(a, b) for a, b in zip(full.seen, reference.seen, strict=True))
    for stop in stops:
        rest = fit(prepared, windows, until, tmp_path / f"{stop}.ckpt", workers=workers)
        assert len(rest.seen) == len(full.seen) - stop, stop
        assert all(torch.equal(a, b) for a, b in zip(rest.seen, full.seen[stop:], strict=True))
        # epochs end at the same batches (validation at an epoch's end, epoch checkpoints):
        # Lightning reads an epoch's length before it restores the loader's state
        assert rest.epochs == full.epochs[stop:], stop
