"""What the loss by source costs a training step (`packlm.callbacks.SourceLosses`).

    python bench/source_loss.py [--blocks 6] [--device cpu] [--threads 1]   # about 2 minutes on a shared 2-core machine

One fit per `log_every_n_steps` setting (1: the worst case; 10: the default) of the default
config's shape (2 x 128, vocab 4096, window 128, batch 32, document packing, three sources
mixed), with StepMetrics, in what trainer.precision=auto picks. SourceLosses is switched on
and off in blocks of 5 steps (10 at log_every_n_steps=10), so every block holds the same
logging steps and a busy minute on a shared machine hits both; a step's time is the wall
time between consecutive step ends. The ratio is the median over block pairs of mean step
time on / off (the first block pair, warm-up, is dropped); and, less noisy, the time spent
inside the callback's training hook per step (its scatter, the all-reduce and host read of a
logging step, the log call) against the step time without it. Validation: one
`trainer.validate` over the validation store (per-source losses and the hardest documents),
on / off, alternated twice. `--threads 1` (default): on a shared 2-core machine more torch
threads than free cores spin and swamp the figures.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from packlm.callbacks import SourceLosses, StepMetrics
from packlm.config.precision import auto_precision
from packlm.data.datamodule import PackedDataModule
from packlm.data.store.prepared import PreparedData
from packlm.data.store.token_store import write_store
from packlm.model.lit_module import LitCausalLM
from packlm.train.report import quiet_lightning_leaf_spec

V, T, B = 4096, 128, 32
NAMES = ["web", "code", "books"]


def synthetic_store(path: Path, n_docs: int, seed: int):
    rng = np.random.default_rng(seed)
    lengths = np.maximum(2, rng.lognormal(5.0, 1.0, size=n_docs).astype(np.int64))
    docs = [np.append(rng.integers(0, V - 2, size=int(n) - 1), V - 2) for n in lengths]
    sources = rng.integers(0, len(NAMES), size=n_docs).tolist()
    ids = [f"{NAMES[s]}:{NAMES[s]}.jsonl:{i}" for i, s in enumerate(sources)]
    return write_store(path, docs, V, V - 2, V - 1, ids, sources, NAMES)


class Switched(SourceLosses):
    """SourceLosses that does its training work only while `active`, timing it."""

    active = True
    hook_seconds = 0.0  # inside the training hook, active steps

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if self.active:
            t = time.perf_counter()
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            self.hook_seconds += time.perf_counter() - t
        else:
            self._seen_step = trainer.global_step

    def on_validation_batch_end(self, *args, **kwargs) -> None:
        if self.active:
            super().on_validation_batch_end(*args, **kwargs)

    def on_validation_epoch_end(self, *args, **kwargs) -> None:
        if self.active:
            super().on_validation_epoch_end(*args, **kwargs)
        self._val = self._docs = None


class Blocks(L.Callback):
    """Times every step and switches `Switched.active` every `block` steps."""

    def __init__(self, switched: Switched, block: int):
        self.switched, self.block = switched, block
        self.times: list[tuple[bool, float]] = []  # (active, seconds) of each step
        self._last: float | None = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        now = time.perf_counter()
        if self._last is not None:
            self.times.append((self.switched.active, now - self._last))
        self._last = now
        self.switched.active = (trainer.global_step // self.block) % 2 == 0


def ratio(times: list[tuple[bool, float]], block: int) -> tuple[float, float, float]:
    """(median over block pairs of mean on / mean off, mean on, mean off), warm-up dropped."""
    on, off = [t for a, t in times if a], [t for a, t in times if not a]
    pairs = min(len(on), len(off)) // block
    if pairs < 2:
        raise SystemExit("--blocks: give at least 4")
    ratios = [
        statistics.mean(on[i * block : (i + 1) * block])
        / statistics.mean(off[i * block : (i + 1) * block])
        for i in range(1, pairs)
    ]
    return statistics.median(ratios), statistics.mean(on[block:]), statistics.mean(off[block:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--blocks", type=int, default=6, help="blocks on and off per fit")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (a shared "
                        "machine: more threads than free cores spin)")  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    quiet_lightning_leaf_spec()
    precision = auto_precision(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        train, val = synthetic_store(root / "train", 8000, 1), synthetic_store(root / "val", 400, 2)
        prepared = PreparedData(None, root, train.path, val.path, train.manifest, val.manifest)
        threads = torch.get_num_threads()
        print(f"{precision}, {args.device}, {threads} thread(s); stores: {train.n_tokens:,} / "
              f"{val.n_tokens:,} tokens")  # fmt: skip
        for every in (1, 10):
            block = 5 if every == 1 else 10
            dm = PackedDataModule(prepared=prepared, window=T, stride=T, batch_size=B,
                                  num_workers=0, packing="document")  # fmt: skip
            torch.manual_seed(0)
            lit = LitCausalLM({"vocab_size": V, "context_length": T}, {"warmup_steps": 10},
                              torch.ones(V, dtype=torch.int64))  # fmt: skip
            switched = Switched()
            blocks = Blocks(switched, block)
            trainer = L.Trainer(
                accelerator=args.device, devices=1, precision=precision,
                max_steps=args.blocks * block + 1,
                logger=TensorBoardLogger(str(root / "tb")), log_every_n_steps=every,
                callbacks=[StepMetrics(), switched, blocks], enable_checkpointing=False,
                enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                use_distributed_sampler=False,
            )  # fmt: skip
            trainer.fit(lit, datamodule=dm)
            r, on, off = ratio(blocks.times, block)
            active = sum(a for a, _ in blocks.times) + 1  # the first step has no time
            hook = switched.hook_seconds / active
            print(f"log_every_n_steps={every}: step {on * 1e3:.1f} ms with, {off * 1e3:.1f} ms "
                  f"without the loss by source: {r:.4f}x (median of block pairs); inside its "
                  f"hook {hook * 1e3:.3f} ms a step: {1 + hook / off:.4f}x")  # fmt: skip
        trainer.limit_val_batches = 1.0
        seconds = {True: [], False: []}
        for _ in range(2):
            for active in (True, False):
                switched.active = active
                t = time.perf_counter()
                trainer.validate(lit, datamodule=dm, verbose=False)
                seconds[active].append(time.perf_counter() - t)
        on, off = statistics.median(seconds[True]), statistics.median(seconds[False])
        print(f"validation ({val.n_docs} documents): {on:.3f} s with, {off:.3f} s without: "
              f"{on / off:.4f}x (medians of 2)")  # fmt: skip


if __name__ == "__main__":
    main()
