"""`python train.py`: compose the config, build data and model, fit, validate, report.

`train(cfg)` does the work and returns the final metrics, so tests and notebooks call it
directly; `main` is only the Hydra entry point (the Lightning+Hydra template's split).
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import hydra
import lightning as L
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from omegaconf import DictConfig
from torch.utils.tensorboard.summary import hparams as hparams_summary

from packlm.callbacks import (
    BatchImages,
    CheckpointExtras,
    SupervisedTokenAxis,
    SupervisedTokenBudget,
    TextSamples,
)
from packlm.config import CONFIG_DIR, Validated, validate_config
from packlm.data.datamodule import PackedDataModule
from packlm.model.lit_module import LitCausalLM

log = logging.getLogger(__name__)

# LitCausalLM tags stream batches in on_before_batch_transfer (on the CPU, no device sync);
# the DataModule has no such hook, so Lightning's "it will use the LightningModule's" is moot.
warnings.filterwarnings("ignore", message=".*overridden `on_before_batch_transfer`.*")


def train(cfg: DictConfig, run_dir: str | Path | None = None) -> dict[str, float]:
    """Train one run in `run_dir` (default: Hydra's output dir) and return its final metrics."""
    config = validate_config(cfg)  # every key checked before any work starts
    run_dir = Path(run_dir or HydraConfig.get().runtime.output_dir)
    if cfg.ckpt_path:  # resume: keep writing into the run the checkpoint belongs to
        run_dir = _run_dir_of(Path(cfg.ckpt_path))
    L.seed_everything(cfg.seed, workers=True)

    datamodule = PackedDataModule(
        tokenizer=config.tokenizer,
        cache_dir=cfg.cache_dir,
        model_context=config.model.context_length,
        **asdict(config.data),
    )
    datamodule.prepare_data()
    datamodule.setup("fit")
    model_config = replace(config.model, vocab_size=datamodule.vocab_size)
    optim = _schedule_horizon(config, datamodule)
    module = LitCausalLM(model=model_config, optim=optim)
    module.set_token_byte_lengths(datamodule.token_byte_lengths)  # for val/bpb

    logger = TensorBoardLogger(
        save_dir=str(run_dir), name="tb", version="", default_hp_metric=False
    )
    checkpoints = ModelCheckpoint(
        dirpath=run_dir / "checkpoints",
        filename="best-step{step}",
        auto_insert_metric_name=False,
        monitor="val/loss",
        mode="min",
        save_last=True,
    )
    callbacks: list[L.Callback] = [
        checkpoints,
        CheckpointExtras(datamodule.tokenizer, asdict(config.data)),
        SupervisedTokenAxis(config.trainer.log_every_n_steps),
    ]
    if config.train.max_supervised_tokens:
        callbacks.append(SupervisedTokenBudget(config.train.max_supervised_tokens))
    if config.train.log_batch_images:
        callbacks.append(BatchImages())
    if config.train.sample_prompt:
        callbacks.append(
            TextSamples(
                datamodule.tokenizer, config.train.sample_prompt, config.train.sample_tokens
            )
        )

    trainer_kwargs = asdict(config.trainer)
    if config.train.max_supervised_tokens:
        trainer_kwargs["max_steps"] = -1  # the token budget decides
    trainer = L.Trainer(
        **trainer_kwargs,
        logger=logger,
        callbacks=callbacks,
        use_distributed_sampler=False,  # the DataModule shards the epoch plan itself
        reload_dataloaders_every_n_epochs=1,  # each epoch has its own plan (and length)
        default_root_dir=str(run_dir),
    )
    _log_hparams(logger, config, datamodule)
    trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.ckpt_path)

    metrics = {
        k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(("val/", "train/"))
    }
    if config.train.validate_at_end and not config.trainer.fast_dev_run:
        (final,) = trainer.validate(module, datamodule=datamodule, verbose=False)
        metrics.update({k: float(v) for k, v in final.items()})
    metrics["tokens/supervised"] = float(module.supervised_tokens_seen)
    if trainer.is_global_zero:
        _report(metrics, checkpoints, run_dir)
    return metrics


def _schedule_horizon(config: Validated, datamodule: PackedDataModule):
    """The cosine schedule's length: optim.max_steps, else the step budget or token budget."""
    optim = config.optim
    if optim.max_steps is not None:
        return optim
    if config.train.max_supervised_tokens:
        per_step = datamodule.supervised_tokens_per_batch() * config.trainer.accumulate_grad_batches
        per_step *= max(1, _world_size(config))
        steps = math.ceil(config.train.max_supervised_tokens / max(per_step, 1.0))
    else:
        steps = config.trainer.max_steps
    return replace(optim, max_steps=max(1, steps))


def _world_size(config: Validated) -> int:
    devices = config.trainer.devices
    n = devices if isinstance(devices, int) and devices > 0 else 1
    return n * config.trainer.num_nodes


def _log_hparams(
    logger: TensorBoardLogger, config: Validated, datamodule: PackedDataModule
) -> None:
    """One HParams row per run: the data and model choices, with val/loss and val/bpb columns.

    The metric columns read the run's own `val/loss` and `val/bpb` scalars, so the row shows
    the latest validation without writing placeholder values.
    """
    data = config.data
    params: dict[str, Any] = {
        "data/window": data.window,
        "data/stride": data.stride,
        "data/packing": data.packing,
        "data/random_offset": data.random_offset,
        "data/tail": data.tail,
        "data/pack_size": data.pack_size or 0,
        "data/batch_size": data.batch_size,
        "tokenizer/vocab_size": datamodule.vocab_size,
        "model/n_layer": config.model.n_layer,
        "model/n_embd": config.model.n_embd,
        "model/context_length": config.model.context_length,
        "optim/lr": config.optim.lr,
        "train/max_supervised_tokens": config.train.max_supervised_tokens or 0,
    }
    writer = logger.experiment
    for summary in hparams_summary(params, {"val/loss": 0.0, "val/bpb": 0.0}):
        writer.file_writer.add_summary(summary)


def _run_dir_of(ckpt_path: Path) -> Path:
    if not ckpt_path.is_file():
        raise FileNotFoundError(f"ckpt_path={ckpt_path}: no such checkpoint")
    parent = ckpt_path.resolve().parent
    return parent.parent if parent.name == "checkpoints" else parent


def _report(metrics: dict[str, float], checkpoints: ModelCheckpoint, run_dir: Path) -> None:
    last = Path(checkpoints.dirpath) / "last.ckpt"
    lines = [
        f"val/loss {metrics.get('val/loss', float('nan')):.4f}   val/bpb {metrics.get('val/bpb', float('nan')):.4f}",
        f"checkpoint: {last}",
        f"TensorBoard: tensorboard --logdir {run_dir}",
    ]
    print("\n".join(lines))


@hydra.main(config_path=CONFIG_DIR, config_name="config", version_base=None)
def main(cfg: DictConfig) -> float:
    """Hydra entry point; returns val/loss so sweepers can optimize it."""
    metrics = train(cfg)
    return metrics.get("val/loss", float("nan"))


if __name__ == "__main__":
    main()
