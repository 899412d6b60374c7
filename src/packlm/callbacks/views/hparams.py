"""One HParams row per run, in an experiment that declares its columns.

TensorBoard's HParams tab ticks only the first 5 hyperparameters of the experiment by
default (those marked `differs` first, then by name), shows booleans as numbers unless
their domain says otherwise, and has no "null". So the experiment is declared here:
the data choices a sweep varies are the 5 shown, and its first columns, every value has a typed domain, null is
written as the string "none", and the metric columns are val/loss, val/bpb and the
supervised tokens seen (read from the run's own scalars: no placeholder values).

Integers stay numbers, though TensorBoard's table prints every number with five significant
digits (`16.000`: its frontend's `toPrecision(5)`, tensorboard 2.20): written as text they
would read `16` but sort `128` before `16` and lose their axis in the parallel-coordinates
view. `python -m packlm.compare` prints them as integers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_only
from tensorboard.plugins.hparams import api_pb2
from tensorboard.plugins.hparams import summary_v2 as hp
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

from packlm.callbacks.views.tensorboard import tensorboard_logger

SHOWN = ("data.window", "data.stride", "data.packing", "data.tail", "data.random_offset")
METRICS = (
    ("val/loss", "val/loss"),
    ("val/bpb", "val/bpb"),
    ("tokens/supervised", "supervised tokens"),
)
COUNT = hp.IntInterval(0, 2**31 - 1)
DOMAINS: dict[str, Any] = {
    "data.packing": hp.Discrete(["none", "document", "stream"]),
    "data.tail": hp.Discrete(["drop", "cover", "pad"]),
}


def run_hparams(config: Any, vocab_size: int) -> dict[str, Any]:
    """The hyperparameters of one run (`packlm.config.schema.Validated`), keyed like overrides."""
    data, model = config.data, config.model
    return {
        "data.window": data.window,
        "data.stride": data.stride,
        "data.packing": data.packing,
        "data.tail": data.tail,
        "data.random_offset": data.random_offset,
        "data.pack_size": _text(data.pack_size),
        "data.shuffle": data.shuffle,
        "data.batch_size": data.batch_size,
        "tokenizer.vocab_size": vocab_size,
        "model.n_layer": model.n_layer,
        "model.n_head": model.n_head,
        "model.n_embd": model.n_embd,
        "model.context_length": model.context_length,
        "optim.lr": float(config.optim.lr),
        "train.max_supervised_tokens": _text(config.train.max_supervised_tokens),
        "data.seed": data.seed,
    }


def _text(value: Any) -> str:
    return "none" if value is None else str(value)


def _domain(name: str, value: Any) -> Any:
    if name in DOMAINS:
        return DOMAINS[name]
    if isinstance(value, bool):
        return hp.Discrete([False, True])
    if isinstance(value, int):
        return COUNT
    if isinstance(value, float):
        return hp.RealInterval(0.0, 1e9)
    return None  # a string: typed below, TensorBoard offers a regex filter


def hparams_summaries(
    params: dict[str, Any], shown: tuple[str, ...] = SHOWN, trial_id: str | None = None
) -> list[Any]:
    """The experiment declaration and the run's session start, as Summary protos
    (`trial_id`: the name of the run in the table; default, a hash of the values)."""
    order = [*(k for k in shown if k in params), *(k for k in params if k not in shown)]
    hparams = [hp.HParam(name, _domain(name, params[name])) for name in order]  # columns
    metrics = [hp.Metric(tag, display_name=name) for tag, name in METRICS]
    experiment = hp.hparams_config_pb(hparams=hparams, metrics=metrics)
    plugin_data = experiment.value[0].metadata.plugin_data
    data = HParamsPluginData.FromString(plugin_data.content)
    for info in data.experiment.hparam_infos:  # TensorBoard ticks `differs` ones first
        info.differs = info.name in shown
        if info.type == api_pb2.DATA_TYPE_UNSET:
            info.type = api_pb2.DATA_TYPE_STRING
    plugin_data.content = data.SerializeToString()
    return [experiment, hp.hparams_pb(params, trial_id=trial_id)]


class HParams(L.Callback):
    """Write the run's HParams row at the start of fit (rank 0, TensorBoard only), named
    by its run directory."""

    def __init__(self, params: dict[str, Any], shown: tuple[str, ...] = SHOWN):
        self.params = params
        self.shown = shown

    @classmethod
    def of_run(cls, config: Any, datamodule: Any, varied: tuple[str, ...] = ()) -> HParams:
        """From the validated config; `varied` (keys a sweep changes, e.g. the job's Hydra
        overrides) are shown first, those that are no hyperparameter here ignored."""
        params = run_hparams(config, datamodule.vocab_size)
        varied = tuple(k for k in dict.fromkeys(varied) if k in params)
        shown = (*varied, *(k for k in SHOWN if k not in varied))[: len(SHOWN)]
        return cls(params, shown)

    @rank_zero_only
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger = tensorboard_logger(trainer)
        if logger is None:
            return
        run = "/".join(Path(logger.save_dir).parts[-2:])  # <sweep time>/<job>, <date>/<time>
        for summary in hparams_summaries(self.params, self.shown, trial_id=run):
            logger.experiment.file_writer.add_summary(summary)
