"""What a person reads in the terminal: the data counts, the model's size, why a run stopped,
the summary."""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Timer
from lightning.pytorch.utilities import rank_zero_only

log = logging.getLogger(__name__)


NOISE = (
    "💡 Tip:",  # an advertisement for Lightning's cloud logger, not about this run
    "GPU available: False",  # said on every CPU run; a GPU that is there is still reported
    "TPU available: False",
    "HPU available: False",
    "`Trainer.fit` stopped:",  # printed into the progress bar's line; the summary says why
)
"""Lines of Lightning's `rank_zero_info` that tell a packlm user nothing (message prefixes)."""


class _QuietLightning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(NOISE)


def quiet_lightning_noise() -> None:
    """Configure `NOISE` off at its source: the logger Lightning's rank_zero_info writes to."""
    source = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _QuietLightning) for f in source.filters):
        source.addFilter(_QuietLightning())


def stop_reason(trainer: L.Trainer, budget: int | None) -> str:
    """Why fit ended, in the config's words (Lightning's own line is in `NOISE`)."""
    if budget and trainer.lightning_module.supervised_tokens_seen >= budget:
        return f"train.max_supervised_tokens={budget} reached"
    if trainer.max_steps >= 0 and trainer.global_step >= trainer.max_steps:
        return f"trainer.max_steps={trainer.max_steps} reached"
    if any(isinstance(c, Timer) and c.time_remaining() <= 0 for c in trainer.callbacks):
        return "trainer.max_time reached"
    if trainer.max_epochs is not None and trainer.current_epoch >= trainer.max_epochs:
        return f"trainer.max_epochs={trainer.max_epochs} reached"
    return "a callback stopped it"


LEAF_SPEC_DEPRECATION = r"`isinstance\(treespec, LeafSpec\)` is deprecated"
LIGHTNING_PYTREE = r"lightning\.pytorch\.utilities\._pytree"


def quiet_lightning_leaf_spec() -> None:
    """Lightning 2.6.6 (`lightning/pytorch/utilities/_pytree.py`) calls torch's `LeafSpec()`
    on every fit, which torch 2.13 deprecates with a FutureWarning packlm cannot act on:
    that one message, raised from that module, is ignored (pyproject's pytest
    `filterwarnings` has the same line for the Trainers of the tests)."""
    warnings.filterwarnings(
        "ignore", message=LEAF_SPEC_DEPRECATION, category=FutureWarning, module=LIGHTNING_PYTREE
    )


def log_model_size(module: L.LightningModule) -> None:
    params = sum(p.numel() for p in module.parameters())
    embedding = module.model.wte.weight.numel()
    where = (
        "the embedding, tied to the head" if module.model_config.tie_embeddings else "the embedding"
    )
    log.info("model: %.2fM parameters (%.2fM in %s)", params / 1e6, embedding / 1e6, where)


@dataclass(frozen=True)
class Ran:
    """What this process trained: steps and supervised tokens since its start (a resume
    counts from its checkpoint), in how many seconds, and the step it ended at."""

    steps: int
    tokens: int
    seconds: float
    final_step: int
    why: str = ""
    """What ended it (`stop_reason`)."""


def summary(
    metrics: dict[str, float],
    ran: Ran,
    last: Path,
    run_dir: Path,
    validated: bool,
    note: str | None = None,
) -> str:
    """The last lines of a run: time, steps, tokens, the final validation, where things are."""
    if ran.steps > 0:
        lines = [
            f"trained {ran.steps} steps in {ran.seconds:.0f} s"
            + (f" ({ran.why})" if ran.why else "")
            + f": {ran.tokens:,.0f} supervised "
            f"tokens ({ran.tokens / max(ran.seconds, 1e-9):,.0f} tokens/s)",
        ]
    else:
        lines = [
            f"trained 0 steps: the run had already ended at step {ran.final_step} (nothing to "
            "do; raise trainer.max_steps or train.max_supervised_tokens to train further)"
        ]
    if validated and not math.isnan(metrics.get("val/loss", math.nan)):
        lines.append(
            f"val/loss {metrics['val/loss']:.4f}   val/bpb {metrics.get('val/bpb', math.nan):.4f}"
        )
    else:
        lines.append("no validation (no validation documents, or trainer.limit_val_batches=0)")
    if note:
        lines.append(note)
    lines += [f"checkpoint: {last}", f"TensorBoard: tensorboard --logdir {run_dir}"]
    return "\n".join(lines)


def vocab_note(config: Any, real: int) -> str | None:
    """When the corpus gave fewer entries (`real`) than tokenizer.vocab_size asked for: say so
    (a vocabulary sweep's jobs above that size are the same run)."""
    asked = config.tokenizer.vocab_size
    if config.tokenizer.path is not None or real >= asked:
        return None
    return (
        f"tokenizer.vocab_size={asked}: the corpus gave only {real} entries (no pair left to "
        f"merge); the run used {real}, as its hparams and checkpoint record"
    )


def _drop_order(item: tuple[str, int]) -> int:
    order = ("empty", "invalid_utf8", "binary", "special_files", "duplicate_of_train")
    return order.index(item[0]) if item[0] in order else len(order)


@rank_zero_only
def log_data_counts(datamodule: Any) -> None:
    """What reading the sources dropped or changed (counted at build time, in the manifests)."""
    for split, manifest in datamodule.prepared.manifests.items():
        counts = manifest.get("counts", {})
        dropped = counts.get("dropped", {})
        log.info(
            "data %s: %d documents, %d tokens; dropped %s; replaced invalid UTF-8 in %d",
            split,
            counts.get("documents", 0),
            counts.get("tokens", 0),
            ", ".join(f"{v} {k}" for k, v in sorted(dropped.items(), key=_drop_order)) or "none",
            counts.get("replaced_invalid_utf8", 0),
        )
