"""The Lightning + Hydra surface: every Trainer argument, logger/callbacks/debug/experiment
groups, validation off, the resume table, init_from, one-message errors, sweep folder names."""

from __future__ import annotations

import csv
import inspect
import math
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import lightning as L
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from lightning.pytorch.callbacks import ModelCheckpoint, Timer
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers.runs import ROOT, tiny_overrides
from packlm.callbacks.token_axis import BY_TOKENS
from packlm.config import trainer as trainer_config
from packlm.config.schema import CONFIG_DIR, validate_config
from packlm.config.trainer import OWNED, TrainerSchema
from packlm.errors import ConfigError
from packlm.train import main, train


def scalars(run: Path, tag: str) -> dict[int, float]:
    acc = EventAccumulator(str(run / "tb" / BY_TOKENS if "_by_tokens/" in tag else run / "tb"))
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars(tag)}


# --- trainer.*: every Lightning argument, checked ----------------------------------------------


def test_every_trainer_argument_is_a_key_except_the_ones_packlm_sets():
    names = set(inspect.signature(L.Trainer.__init__).parameters) - {"self"}
    keys = set(TrainerSchema.__dataclass_fields__)
    assert names - set(OWNED) <= keys and not keys & set(OWNED)


def test_the_schema_reads_lightnings_defaults_without_importing_it(monkeypatch):
    """trainer_defaults parses Lightning's source (no torch import for `packlm.prepare`); it
    must agree with the signature of the installed Trainer, and fall back to it."""
    params = inspect.signature(L.Trainer.__init__).parameters
    expected = {k: p.default for k, p in params.items() if k != "self" and k not in OWNED}
    assert trainer_config.trainer_defaults() == expected
    monkeypatch.setattr(trainer_config.Path, "read_text", lambda *a, **k: "class Other: pass")
    assert trainer_config.trainer_defaults() == expected


@pytest.mark.parametrize(
    "override, key, value",
    [
        ("trainer.max_time=00:00:01:00", "max_time", "00:00:01:00"),
        ("trainer.limit_train_batches=5", "limit_train_batches", 5),
        ("trainer.profiler=simple", "profiler", "simple"),
        ("trainer.benchmark=true", "benchmark", True),
    ],
)
def test_any_trainer_argument_is_settable_without_a_plus(compose_tiny, override, key, value):
    trainer = validate_config(compose_tiny(override)).trainer
    assert trainer.trainer_kwargs()[key] == value


def test_defaults_are_not_passed_to_the_trainer():
    kwargs = TrainerSchema().trainer_kwargs()
    assert "limit_val_batches" not in kwargs and "accelerator" not in kwargs  # Lightning's own
    assert kwargs["max_steps"] == 950


def test_max_time_stops_the_run_on_time(compose_tiny, tmp_path, capsys):
    cfg = compose_tiny(
        "trainer.max_steps=-1", "trainer.max_time=00:00:00:03", "train.sample_prompt="
    )
    start = time.perf_counter()
    with pytest.warns(UserWarning, match=r"no step horizon \(trainer\.max_time alone\)"):
        metrics = train(cfg, run_dir=tmp_path / "run")  # nothing but the time can end this run
    assert time.perf_counter() - start >= 3  # a lower bound: a busy machine only adds to it
    assert "(trainer.max_time reached)" in capsys.readouterr().out
    assert scalars(tmp_path / "run", "train/loss") and math.isfinite(metrics["val/loss"])


class StepClock(Timer):
    """Lightning's Timer of trainer.max_time on an injected clock that advances `per_step`
    seconds an optimizer step: the time rule is tested, not the machine's speed (on a loaded
    machine 3 real seconds held fewer than 10 steps)."""

    def __init__(self, seconds: float, per_step: float):
        super().__init__(duration=timedelta(seconds=seconds), interval="step", verbose=False)
        self.per_step, self._trainer = per_step, None

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        self._trainer = trainer

    def time_elapsed(self, stage: str = "train") -> float:
        trainer = self._trainer
        return trainer.global_step * self.per_step if trainer and stage == "train" else 0.0


def test_anneal_by_time_ends_a_time_limited_run_on_the_floor(compose_tiny, tmp_path, recwarn):
    """max_time alone with optim.anneal_by_time: after warmup the cosine runs on the clock,
    so the lr falls step by step and the step the time limit stops is at lr * min_lr_ratio."""
    cfg = compose_tiny(
        "trainer.max_steps=-1",
        "trainer.max_time=00:00:00:03",  # the StepClock takes its place (Lightning: one Timer)
        "trainer.val_check_interval=1000",
        "train.sample_prompt=",
        "optim.anneal_by_time=true",
        "optim.lr=1e-3",
    )
    train(cfg, run_dir=tmp_path / "run", callbacks=[StepClock(3.0, per_step=0.2)])
    assert not [w for w in recwarn if "no step horizon" in str(w.message)]
    lrs = [lr for _, lr in sorted(scalars(tmp_path / "run", "lr").items())]
    assert len(lrs) == 15  # 3 s of 0.2 s steps, whatever the machine's speed
    after_warmup = lrs[cfg.optim.warmup_steps :]
    assert after_warmup[0] == pytest.approx(1e-3, rel=2e-2)  # one 0.2 s tick into the cosine
    assert all(b < a for a, b in zip(after_warmup, after_warmup[1:], strict=False))
    assert after_warmup[-1] <= 1e-3 * (cfg.optim.min_lr_ratio + 0.05)  # the cosine's end


# --- groups: logger, callbacks, debug, experiment ------------------------------------------------


def test_logger_group_csv_and_many(compose_tiny, tmp_path):
    train(compose_tiny("logger=csv", "trainer.max_steps=2"), run_dir=tmp_path / "csv")
    rows = list(csv.DictReader((tmp_path / "csv" / "csv" / "metrics.csv").open()))
    assert any(r.get("train/loss") for r in rows) and not (tmp_path / "csv" / "tb").exists()
    train(compose_tiny("logger=many", "trainer.max_steps=2"), run_dir=tmp_path / "many")
    assert (tmp_path / "many" / "csv" / "metrics.csv").is_file()
    assert scalars(tmp_path / "many", "train/loss")


def test_a_callback_is_added_by_target_and_the_default_set_can_be_emptied(compose_tiny, tmp_path):
    seen = []

    class Probe(L.Callback):
        def on_train_start(self, trainer, pl_module):
            seen.extend(type(c).__name__ for c in trainer.callbacks)
            seen.extend(
                "ModelCheckpoint" for c in trainer.callbacks if isinstance(c, ModelCheckpoint)
            )

    cfg = compose_tiny(
        "+callbacks.lr_monitor._target_=lightning.pytorch.callbacks.LearningRateMonitor",
        "trainer.max_steps=2",
    )
    train(cfg, run_dir=tmp_path / "a", callbacks=[Probe()])
    assert "LearningRateMonitor" in seen and "ModelCheckpoint" in seen
    seen.clear()
    train(
        compose_tiny("callbacks=none", "trainer.max_steps=2"),
        run_dir=tmp_path / "b",
        callbacks=[Probe()],
    )
    assert "ModelCheckpoint" not in seen and not list(
        (tmp_path / "b" / "checkpoints").glob("best*")
    )


def test_a_misspelled_preset_fails_and_the_presets_compose(compose_tiny):
    with pytest.raises(ConfigCompositionException, match="shakspeare"):
        compose_tiny("experiment=shakspeare")
    for preset in (
        "experiment=tiny",
        "experiment=code",
        "debug=fdr",
        "debug=overfit",
        "model=medium",
    ):
        validate_config(compose_tiny(preset))
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        cfg = compose("config", overrides=["experiment=shakespeare"])
    data = validate_config(cfg).data
    source, held_out = data.sources[0], data.val_sources[0]
    assert Path(source["path"]).is_absolute() and source["path"] == held_out["path"]
    assert (
        Path(source["path"]).resolve()
        == (ROOT.parent / "shared/data/tinyshakespeare.txt").resolve()
    )
    assert list(source["span"]) == [0.0, 0.9] and list(held_out["span"]) == [0.9, 1.0]


def test_fast_dev_run_debug_preset_runs(compose_tiny, tmp_path):
    metrics = train(compose_tiny("debug=fdr"), run_dir=tmp_path / "run")
    assert metrics["tokens/supervised"] > 0


# --- validation off, main's return value -----------------------------------------------------------


@pytest.mark.parametrize("override", ["data.val_fraction=0", "trainer.limit_val_batches=0"])
def test_validation_off_trains_and_says_so(compose_tiny, tmp_path, override, capsys):
    metrics = train(compose_tiny(override, "trainer.max_steps=3"), run_dir=tmp_path / "run")
    assert not any(k.startswith("val/") for k in metrics)
    assert "no validation" in capsys.readouterr().out
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()


def test_main_returns_the_optimized_metric(compose_tiny, tmp_path):
    cfg = compose_tiny("trainer.max_steps=2", f"hydra.run.dir={tmp_path}")
    with pytest.raises(ValueError, match="HydraConfig"):  # main needs Hydra's run dir: use train
        main(cfg)
    metrics = train(cfg, run_dir=tmp_path / "run")
    assert metrics["val/bpb"] > 0


# --- resume: applied or refused; init_from -----------------------------------------------------------


def test_a_resume_applies_a_changed_lr_and_schedule(compose_tiny, tmp_path, caplog):
    run = tmp_path / "run"
    train(compose_tiny("trainer.max_steps=4", "train.checkpoint_every_n_steps=4"), run_dir=run)
    caplog.set_level("INFO")
    last = run / "checkpoints" / "last.ckpt"
    train(compose_tiny("trainer.max_steps=8", "optim.lr=1e-3", f"ckpt_path={last}"))
    assert any("optim.lr: 0.003 -> 0.001" in r.getMessage() for r in caplog.records)
    assert any("trainer.max_steps: 4 -> 8" in r.getMessage() for r in caplog.records)
    # the lr after the resume is the schedule of the new config, as a fresh run has it
    fresh = tmp_path / "fresh"
    train(compose_tiny("trainer.max_steps=8", "optim.lr=1e-3"), run_dir=fresh)
    resumed_lr, fresh_lr = scalars(run, "lr"), scalars(fresh, "lr")
    assert [resumed_lr[s] for s in range(4, 8)] == pytest.approx([fresh_lr[s] for s in range(4, 8)])


def test_a_resume_with_another_model_is_refused_pointing_at_init_from(compose_tiny, tmp_path):
    run = tmp_path / "run"
    train(compose_tiny("trainer.max_steps=2"), run_dir=run)
    last = run / "checkpoints" / "last.ckpt"
    with pytest.raises(
        ConfigError, match=r"model\.n_layer: 1 in the checkpoint, 2 now.*init_from="
    ):
        train(compose_tiny("model.n_layer=2", f"ckpt_path={last}"))
    fresh = tmp_path / "fresh"
    train(compose_tiny("trainer.max_steps=1", f"init_from={last}", "optim.lr=1e-9"), run_dir=fresh)
    before = torch.load(last, weights_only=True)["state_dict"]
    after = torch.load(fresh / "checkpoints" / "last.ckpt", weights_only=True)
    assert after["global_step"] == 1  # a new run
    for k, v in before.items():  # one step at lr 1e-9 from the checkpoint's weights
        torch.testing.assert_close(after["state_dict"][k], v, atol=1e-6, rtol=0)


# --- the terminal: one message for packlm's errors; sweep folder names; no stray run folder ------


def cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *args],
        cwd=cwd, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_cli_errors_are_one_message_and_a_resume_makes_no_new_folder(tiny_corpus, tmp_path):
    args = tiny_overrides(tiny_corpus, tmp_path / "cache", steps=2, val_every=2)
    bad = cli([*args, "seed=-1"], tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines()[-1].startswith("error: seed=-1")
    first = cli([*args, "train.sample_prompt="], tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "supervised tokens" in first.stdout and "val/bpb" in first.stdout
    (last,) = (tmp_path / "outputs").glob("*/*/checkpoints/last.ckpt")
    run, folders = last.parent.parent, set((tmp_path / "outputs").glob("*/*"))
    again = cli([*args, "trainer.max_steps=3", f"ckpt_path={last}"], tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert folders == set((tmp_path / "outputs").glob("*/*"))  # no stray run folder
    assert list((run / ".hydra").glob("resume-*/config.yaml"))


@pytest.mark.slow
def test_model_compile_trains_like_eager_on_cpu(compose_tiny, tmp_path):
    eager = train(
        compose_tiny("trainer.max_steps=3", "train.sample_prompt="), run_dir=tmp_path / "e"
    )
    compiled = train(
        compose_tiny("trainer.max_steps=3", "train.sample_prompt=", "model.compile=true"),
        run_dir=tmp_path / "c",
    )
    assert compiled["val/loss"] == pytest.approx(eager["val/loss"], rel=1e-4)
    assert scalars(tmp_path / "c", "train/loss") == pytest.approx(
        scalars(tmp_path / "e", "train/loss"), rel=1e-4
    )


def test_hparams_search_preset_sets_the_optuna_sweeper(compose_tiny):
    pytest.importorskip(
        "hydra_plugins.hydra_optuna_sweeper", reason="pip install hydra-optuna-sweeper"
    )
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        cfg = compose("config", overrides=["hparams_search=optuna"], return_hydra_config=True)
    assert "optuna" in cfg.hydra.sweeper._target_.lower()
    assert set(cfg.hydra.sweeper.params) == {"data.window", "data.stride", "optim.lr"}
    assert cfg.optimized_metric == "val/bpb" and validate_config(cfg).train.max_supervised_tokens


@pytest.mark.slow
def test_an_optuna_search_runs_and_names_its_jobs_by_the_params(tiny_corpus, tmp_path):
    pytest.importorskip(
        "hydra_plugins.hydra_optuna_sweeper", reason="pip install hydra-optuna-sweeper"
    )
    args = tiny_overrides(tiny_corpus, tmp_path / "cache", steps=2, val_every=2)
    result = cli(
        ["-m", "hparams_search=optuna", "hydra.sweeper.n_trials=2", *args,
         "model.context_length=256", "train.max_supervised_tokens=300", "train.sample_prompt=",
         f"hydra.sweep.dir={tmp_path}/sweep"],
        tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = sorted(
        p.name for p in (tmp_path / "sweep").iterdir() if p.is_dir() and p.name[0].isdigit()
    )
    assert len(jobs) == 2 and all("data.window=" in j and "optim.lr=" in j for j in jobs), jobs


def test_a_resume_leaves_no_step_twice_in_tensorboard(compose_tiny, tmp_path):
    import shutil
    from collections import Counter

    run = tmp_path / "run"

    class KeepStep4(L.Callback):  # the checkpoint a kill after step 5 would leave
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 5:
                shutil.copy(run / "checkpoints" / "last.ckpt", tmp_path / "step4.ckpt")

    first = [
        "trainer.max_steps=6",
        "train.checkpoint_every_n_steps=4",
        "trainer.val_check_interval=2",
    ]
    train(compose_tiny(*first), run_dir=run, callbacks=[KeepStep4()])
    (run / "checkpoints" / "last.ckpt").unlink()
    shutil.move(tmp_path / "step4.ckpt", run / "checkpoints" / "last.ckpt")
    before = scalars(run, "train_by_tokens/loss")
    before_val = scalars(run, "val/loss")
    train(
        compose_tiny(
            "trainer.max_steps=8",
            "trainer.val_check_interval=2",
            f"ckpt_path={run}/checkpoints/last.ckpt",
        )
    )
    # as TensorBoard reads them: each writer's purge_step hides what the killed run logged
    # past the checkpoint (steps in tb/, supervised tokens in tb/by_tokens/)
    for tag in (
        "train/loss",
        "Loss/train",
        "val/loss",
        "train_by_tokens/loss",
        "val_by_tokens/loss",
        "tokens/supervised",
    ):
        logdir = run / "tb" / BY_TOKENS if "_by_tokens/" in tag else run / "tb"
        acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
        acc.Reload()
        steps = [e.step for e in acc.Scalars(tag)]
        assert max(Counter(steps).values()) == 1 and steps == sorted(steps), (tag, steps)
    assert max(scalars(run, "train/loss")) == 7
    after = sorted(scalars(run, "train_by_tokens/loss"))
    assert sorted(before)[:4] == after[:4]  # the curve before the checkpoint is kept
    assert sorted(scalars(run, "val/loss"))[:2] == sorted(before_val)[:2]  # steps 2, 4 kept


def test_a_run_prints_no_deprecation_of_lightning_internals(compose_tiny, tmp_path, recwarn):
    train(compose_tiny("trainer.max_steps=2"), run_dir=tmp_path / "run")
    assert not [w for w in recwarn if "LeafSpec" in str(w.message)]
