"""`python -m packlm.stats [overrides] [+epochs=N]`: what the epoch plans do to the data.

Takes the same overrides as train.py and prints, as JSON, the plan statistics of the first
N training epochs (`+epochs=N` or `+stats_epochs=N`, default 1) and of the validation
windows: samples, fill, supervised tokens, target multiplicity, overlap, per-source counts.
With data.curriculum, "curriculum" lists each phase (window, stride, until) with the
statistics of its plan of epoch 0 ("train" is then the last phase's, the run's window).
With a mixture by share, "mixture" gives each source's pass and supervised targets per row
and, per schedule phase, its shares, rows and expected supervised tokens per source (global
batches of data.batch_size rows: one rank; "train" is then the plan of all sources at their
natural size).
With `ckpt_path=<run>/checkpoints/last.ckpt`: that run's settings as it trains them now (its
launch and every accepted resume, the command line's on top), composed as a resume does.
No model is built and neither torch nor Lightning is imported; the tokenizer and stores come
from the cache (built if missing).
"""

from __future__ import annotations

import json
import sys

import hydra
from omegaconf import DictConfig

from packlm.commands.prepare import logs_to_stderr
from packlm.config.data import DataConfig
from packlm.config.help import exit_if_help
from packlm.config.model import ModelConfig
from packlm.config.precheck import precheck
from packlm.config.schema import CONFIG_DIR
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.epoch.statistics import to_json
from packlm.data.plans import EpochPlans
from packlm.data.store.sources.document import SourceError
from packlm.data.store.token_store import StoreError
from packlm.errors import ConfigError, one_line_errors
from packlm.train.resume_config import resume_config

MAX_EPOCHS = 1000
"""The most epochs `+epochs=N` counts: the work is N plans of the whole corpus, refused
before any is built rather than left running for hours."""


def stats_epochs(cfg: DictConfig) -> int:
    """`+epochs=N` (or `+stats_epochs=N`): a positive integer, else a ConfigError naming it."""
    key = "epochs" if "epochs" in cfg else "stats_epochs"
    value = cfg.get(key, 1)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_EPOCHS:
        raise ConfigError(f"+{key}={value!r}: an integer from 1 to {MAX_EPOCHS} (epochs described)")
    return value


def check_config(cfg: DictConfig) -> None:
    """The precheck's validation: the groups a plan depends on, and the epochs asked."""
    model = ModelConfig.from_mapping(cfg.model)
    DataConfig.from_mapping(cfg.data).validate(model_context=model.context_length)
    TokenizerConfig.from_mapping(cfg.tokenizer)
    stats_epochs(cfg)


def statistics(cfg: DictConfig, epochs: int = 1) -> dict:
    """{"train": [stats of epoch 0..epochs-1], "val": stats} for a composed config. Only the
    groups a plan depends on are validated (data, tokenizer, model.context_length): the
    trainer's schema is Lightning's, which this tool does not import."""
    model = ModelConfig.from_mapping(cfg.model)
    data = DataConfig.from_mapping(cfg.data).validate(model_context=model.context_length)
    tokenizer = TokenizerConfig.from_mapping(cfg.tokenizer)
    plans = EpochPlans(tokenizer, cfg.cache_dir, model.context_length, data=data)
    plans.setup()
    out = {
        "train": [to_json(plans.plan_statistics(e)) for e in range(epochs)],
        "val": to_json(plans.plan_statistics(0, "val")),
    }
    if plans.mixture:  # one rank: data.batch_size rows a global batch, one per optimizer step
        out["mixture"] = plans.mixture_statistics(data.batch_size)
    if data.curriculum:
        out["curriculum"] = [
            {**phase._asdict(), "phase": p, **to_json(plans.plan_statistics(0, phase=p))}
            for p, phase in enumerate(plans.phases)
        ]
    return out


@hydra.main(config_path=CONFIG_DIR, config_name="tools", version_base=None)
def main(cfg: DictConfig) -> None:
    """Bad input (config, sources, files) prints one line and exits 2 (config) or 1;
    HYDRA_FULL_ERROR=1 shows the traceback."""
    logs_to_stderr()  # keep stdout pure JSON
    with one_line_errors(ConfigError, SourceError, StoreError, OSError):
        if cfg.get("ckpt_path"):  # a run's: the settings it trains with now, as a resume takes
            cfg = resume_config(cfg)
        epochs = stats_epochs(cfg)
        json.dump(statistics(cfg, epochs), sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    exit_if_help("stats")
    precheck("tools", check_config)
    main()
