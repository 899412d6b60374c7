"""Bad settings of the training run (docs/reliability.md, bad-input catalogue): each is refused
before any work naming its key, or, where it only shows while training (a diverging loss),
stops the run with one message and leaves the last good checkpoint."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

import packlm.train.compose as run_compose
from helpers.runs import checkpoint_step, weights
from packlm.callbacks import LastCheckpoint, TrainingDiverged
from packlm.checkpoint.contents import KEY as EXTRAS_KEY
from packlm.config.schema import CONFIG_DIR, validate_config
from packlm.errors import ConfigError
from packlm.train import train


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("optim.lr=inf", r"optim\.lr=inf: must be a finite number"),
        ("optim.lr=nan", r"optim\.lr=nan: must be a finite number"),
        ("trainer.gradient_clip_val=nan", r"trainer\.gradient_clip_val=nan: must be a finite"),
        ("model.rope_base=nan", r"model\.rope_base=nan: must be a finite number"),
        ("model.dropout=nan", r"model\.dropout=nan"),
        ("optim.betas=[0.9,nan]", r"optim\.betas\[1\]=nan: must be a finite number"),
        ("optim.eps=inf", r"optim\.eps=inf"),
        ("data.val_fraction=nan", r"data\.val_fraction=nan"),
        ("trainer.limit_val_batches=inf", r"trainer\.limit_val_batches=inf"),
        ("trainer.gradient_clip_val=-1", r"trainer\.gradient_clip_val=-1\.0: must be >= 0"),
        ("trainer.devices=0", r"trainer\.devices=0: a positive count"),
        ("trainer.val_check_interval=0", r"trainer\.val_check_interval=0: must be >= 1"),
        ("trainer.val_check_interval=0.0", r"trainer\.val_check_interval=0\.0: a fraction"),
        ("train.sample_tokens=-1", r"train\.sample_tokens=-1: must be a positive integer"),
    ],
)
def test_a_non_finite_or_out_of_range_setting_is_refused_naming_its_key(
    compose_tiny, override, message
):
    with pytest.raises(ConfigError, match=message):
        validate_config(compose_tiny(override))


def test_a_bad_setting_fails_before_the_tokenizer_or_the_store_is_built(compose_tiny, tmp_path):
    cfg = compose_tiny("optim.lr=nan", f"cache_dir={tmp_path / 'cache'}")
    with pytest.raises(ConfigError, match=r"optim\.lr=nan"):
        train(cfg, run_dir=tmp_path / "run")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("accelerator", ["cpu", "auto"])
def test_fsdp_without_a_gpu_is_refused_before_any_work(compose_tiny, tmp_path, accelerator):
    if accelerator == "auto" and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: FSDP is allowed")
    cfg = compose_tiny(
        "trainer.strategy=fsdp", f"trainer.accelerator={accelerator}", "trainer.devices=2",
        f"cache_dir={tmp_path / 'cache'}",
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"trainer\.strategy=fsdp: Lightning's FSDP needs CUDA"):
        train(cfg, run_dir=tmp_path / "run")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "run").exists()


class PoisonAfter(L.Callback):
    """Sets one weight to NaN after optimizer step `step` (after that step's checkpoint)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, *args) -> None:
        if trainer.global_step == self.step:
            with torch.no_grad():
                next(pl_module.parameters()).view(-1)[0] = float("nan")


def test_a_nan_loss_stops_the_run_and_keeps_the_last_finite_checkpoint(compose_tiny, tmp_path):
    run = tmp_path / "run"
    with pytest.raises(TrainingDiverged, match=r"training diverged at step 4: the training loss "
                       r"is nan; .*last\.ckpt keeps step 3\. Try a lower optim\.lr"):  # fmt: skip
        train(compose_tiny(), run_dir=run, callbacks=[PoisonAfter(3)])
    last = run / "checkpoints" / "last.ckpt"
    assert checkpoint_step(last) == 3
    assert all(torch.isfinite(w).all() for w in weights(last).values())


def test_last_checkpoint_never_writes_non_finite_weights(tmp_path):
    module = torch.nn.Linear(2, 2)
    written = []
    trainer = SimpleNamespace(
        fast_dev_run=False,
        global_step=7,
        lightning_module=module,
        save_checkpoint=lambda path, weights_only: written.append(path),
    )
    last = LastCheckpoint(tmp_path)
    last.save(trainer)
    assert written == [last.path] and last.saved_step == 7
    with torch.no_grad():
        module.bias[1] = float("inf")
    trainer.global_step = 8
    with pytest.raises(
        TrainingDiverged, match=r"step 8: the weight bias is not finite; .* keeps step 7"
    ):
        last.save(trainer)
    assert written == [last.path] and last.saved_step == 7


# --- settings that used to be replaced quietly --------------------------------------------------


def test_a_model_vocabulary_smaller_than_the_tokenizers_is_refused(compose_tiny):
    with pytest.raises(
        ConfigError, match=r"model\.vocab_size=290: smaller than tokenizer\.vocab_size=300"
    ):
        validate_config(compose_tiny("model.vocab_size=290"))
    config = validate_config(compose_tiny("model.vocab_size=300"))
    assert run_compose.model_vocab(config, 300) == 300
    with pytest.raises(ConfigError, match=r"model\.vocab_size=300: smaller than the tokenizer's "
                       r"vocabulary \(305 entries"):  # fmt: skip
        run_compose.model_vocab(config, 305)  # a loaded tokenizer (tokenizer.path) of 305 ids
    assert (
        run_compose.model_vocab(validate_config(compose_tiny()), 305) == 305
    )  # default: the tokenizer's


def test_a_vocabulary_the_corpus_cannot_fill_is_said_and_the_real_size_recorded(
    compose_tiny, tmp_path, capsys, caplog
):
    run = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="packlm.train.job"):
        train(compose_tiny("tokenizer.vocab_size=50000", "trainer.max_steps=1"), run_dir=run)
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    real = ckpt["hyper_parameters"]["model"]["vocab_size"]
    assert 258 < real < 50000
    assert ckpt[EXTRAS_KEY]["settings"]["tokenizer.vocab_size"] == real  # before: not recorded
    note = f"tokenizer.vocab_size=50000: the corpus gave only {real} entries"
    assert note in caplog.text and note in capsys.readouterr().out


def test_a_finished_run_resumed_trains_nothing_and_says_so(compose_tiny, tmp_path, capsys):
    run = tmp_path / "run"
    train(compose_tiny("trainer.max_steps=2"), run_dir=run)
    assert "trained 2 steps in" in capsys.readouterr().out
    train(compose_tiny("trainer.max_steps=2", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}"))
    out = capsys.readouterr().out
    assert "trained 0 steps: the run had already ended at step 2" in out
    assert "tokens/s" not in out  # before: "trained 2 steps in 1 s: ... tokens/s"


def test_an_impossible_run_directory_is_one_error_line_before_hydra_writes_into_it(capsys):
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        hydra_cfg = compose("config", overrides=[], return_hydra_config=True)
    callback = hydra_cfg.hydra.callbacks.writable_run_dir  # registered in conf/config.yaml
    cfg = OmegaConf.create({"hydra": {"run": {"dir": "/proc/packlm-nope/run"}}})
    with pytest.raises(SystemExit) as exited:
        instantiate(callback).on_run_start(config=cfg)
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert "the run directory (hydra.run.dir) /proc/packlm-nope/run is not writable" in err
