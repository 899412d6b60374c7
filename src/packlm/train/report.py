"""What a person reads in the terminal: the model's size, why a run stopped, the summary."""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import lightning as L

log = logging.getLogger(__name__)


class _NoTips(logging.Filter):
    """Lightning's advertisement for its cloud logger is not about this run."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "💡 Tip:" not in record.getMessage()


def quiet_lightning_tips() -> None:
    """Configure the tip off at its source: the logger Lightning's rank_zero_info writes to."""
    source = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _NoTips) for f in source.filters):
        source.addFilter(_NoTips())


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
            f"trained {ran.steps} steps in {ran.seconds:.0f} s: {ran.tokens:,.0f} supervised "
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
