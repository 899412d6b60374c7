"""Draw the README figures into docs/img/: `python docs/figures.py [--sweep-dir DIR]`.

- mask.png      the attention mask of one real packed row (packing=document, pack_size=T+1):
                one causal triangle per document, padding as lone diagonal pixels;
- coverage.png  how many times each token is a target, for a few (window, stride) pairs;
- sweep.png     val/loss against supervised tokens for the 4 runs of a window x stride sweep.

Everything is built from scratch in a temporary directory (no network, no ../shared): a small
store from the standard library's own source files, and a tiny sweep run with
`python train.py -m ...` (about a minute on two CPU cores). `--sweep-dir DIR` reads the sweep
in DIR instead, or runs it there first when DIR holds no runs yet.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

import packlm  # noqa: E402
from packlm.data.datamodule import PackedDataModule  # noqa: E402
from packlm.data.epoch.plan import build_plan  # noqa: E402
from packlm.data.epoch.statistics import plan_statistics  # noqa: E402
from packlm.model.masks import allowed  # noqa: E402

ROOT = Path(packlm.__file__).resolve().parents[2]  # the repository (editable install)
STDLIB = Path(sysconfig.get_paths()["stdlib"])
DPI = 100


def datamodule(work: Path, separator: str, **data_keys) -> PackedDataModule:
    """A DataModule over the stdlib `json` package, one document per `separator` split."""
    return PackedDataModule(
        sources=[f"{STDLIB}/json/*.py"],
        separator=separator,
        val_fraction=0.1,
        tokenizer={"vocab_size": 300},
        cache_dir=work / "cache",
        num_workers=0,
        progress=False,
        **data_keys,
    )


def mask_figure(work: Path, out: Path) -> None:
    """The mask of the batch row with the most documents (and padding) of a document-packed batch."""
    window = 48
    dm = datamodule(
        work,
        "\n",
        window=window,
        stride=window,
        batch_size=16,
        packing="document",
        pack_size=window + 1,
    )
    batch = next(iter(dm.train_dataloader()))
    seg = batch["segment_ids"]  # [B, T]
    row = max(range(len(seg)), key=lambda r: (int(seg[r].max()), bool((seg[r] < 0).any())))
    s = seg[row].numpy()
    ok = allowed(seg[row : row + 1])[0].numpy()  # [T, T] bool
    # colour each allowed cell by its document: 0 masked, 1 PAD (attends to itself), 2+ documents
    image = np.where(ok, np.where(s[:, None] >= 0, 2 + s[:, None], 1), 0)
    n_docs = int(s.max()) + 1
    colours = ["white", "0.35", *plt.get_cmap("tab10").colors[:n_docs]]

    fig, ax = plt.subplots(figsize=(4.6, 4.8))
    ax.imshow(
        image, cmap=ListedColormap(colours), vmin=0, vmax=len(colours) - 1, interpolation="nearest"
    )
    ax.set_xticks(np.arange(-0.5, window, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, window, 1), minor=True)
    ax.grid(which="minor", color="0.9", linewidth=0.3)
    ax.tick_params(which="minor", length=0)
    ax.set(xlabel="key position", ylabel="query position")
    ax.set_title(
        f"packing=document: one row, {n_docs} documents + PAD\n(window {window}, pack_size = window + 1)",
        fontsize=10,
    )
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours[2:]] + [
        plt.Rectangle((0, 0), 1, 1, color=colours[1]),
        plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="0.6"),
    ]
    labels = [f"document {d}" for d in range(n_docs)] + ["PAD: attends to itself only", "masked"]
    ax.legend(handles, labels, loc="upper right", fontsize=8, framealpha=0.95)
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)


def coverage_figure(work: Path, out: Path) -> None:
    """Target count along the start of the stream, for (window, stride) pairs (packing=stream)."""
    dm = datamodule(work, "\n\n", window=32, stride=32)
    lengths = dm.store().doc_lengths
    base = replace(dm.data, packing="stream", shuffle=False, shuffle_documents=False)
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    x = np.arange(140)
    for i, (window, stride) in enumerate([(32, 32), (32, 16), (32, 8), (16, 24)]):
        plan = build_plan(lengths, replace(base, window=window, stride=stride), epoch=0)
        _, g, r = plan.windows(np.arange(plan.n_samples))  # stream start, tokens read
        count = _intervals_holding(x, g + 1, g + r)  # windows targeting each token
        mean = plan_statistics(plan)["target_multiplicity_mean"]
        ax.step(
            x,
            count + 0.05 * i,
            where="post",
            linewidth=1.6,
            label=f"window {window}, stride {stride}: mean {mean:.2f}",
        )
    ax.set(
        xlabel="token position in the stream",
        ylabel="times a target (one epoch)",
        yticks=range(5),
        ylim=(-0.2, 5.6),
        title="Each token is a target window/stride times per epoch",
    )
    ax.legend(fontsize=8, loc="upper right", ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)


SWEEP = [
    "data.window=32,64",  # the swept keys: 2 x 2 = 4 runs
    "data.stride=16,32",
    f"data.sources=[{STDLIB}/json/*.py,{STDLIB}/email/*.py]",
    "data.separator='\n\n'",  # a real newline inside Hydra quotes
    "data.val_fraction=0.05",
    "data.batch_size=16",
    "data.num_workers=0",
    "tokenizer.vocab_size=512",
    "model.context_length=64",
    "model.n_layer=2",
    "model.n_head=2",
    "model.n_embd=64",
    "optim.warmup_steps=10",
    "train.max_supervised_tokens=120000",  # equal data for every run
    "trainer.val_check_interval=15",
    "trainer.log_every_n_steps=5",
    "trainer.enable_progress_bar=false",
    "train.sample_prompt=",
    "train.log_batch_images=false",
]


def run_sweep(sweep_dir: Path, work: Path) -> None:
    train = [str(ROOT / "train.py")] if (ROOT / "train.py").is_file() else ["-m", "packlm.train"]
    args = [*SWEEP, f"cache_dir={work / 'cache'}", f"hydra.sweep.dir={sweep_dir}"]
    print(f"running the 4 runs of the sweep into {sweep_dir} (under a minute on two cores)")
    result = subprocess.run(
        [sys.executable, *train, "-m", *args], cwd=work, capture_output=True, text=True
    )
    if result.returncode != 0:
        sys.exit(result.stderr[-3000:])


def read_scalars(tb_dir: Path, tag: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one scalar tag, the last value per step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    acc.Reload()
    points = {e.step: e.value for e in acc.Scalars(tag)}
    return list(points), list(points.values())


def sweep_figure(sweep_dir: Path, out: Path) -> None:
    """val/loss against supervised tokens, one line per run of the sweep."""
    runs = sorted(sweep_dir.glob("*/tb"))
    if not runs:
        sys.exit(f"{sweep_dir}: no runs (no */tb directory)")
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for tb in runs:
        tokens, loss = read_scalars(tb, "val_by_tokens/loss")
        name = tb.parent.name.split("_", 1)[1].replace("_", ", ").replace("=", " ")
        ax.plot(tokens, loss, marker="o", markersize=3, label=name)
    ax.set(xlabel="supervised tokens seen", ylabel="val/loss (nats per token)")
    ax.set_title(
        "A window x stride sweep at equal data (val_by_tokens/loss)\n"
        "batches of 16 windows: the window-64 runs make half as many optimizer steps",
        fontsize=10,
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep-dir", type=Path, help="read this sweep (run it there if empty)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "img")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="packlm-figures-") as tmp:
        work = Path(tmp)
        mask_figure(work, args.out / "mask.png")
        coverage_figure(work, args.out / "coverage.png")
        sweep_dir = args.sweep_dir or work / "sweep"
        if not any(sweep_dir.glob("*/tb")):
            run_sweep(sweep_dir.resolve(), work)
        sweep_figure(sweep_dir, args.out / "sweep.png")
    for name in ("mask.png", "coverage.png", "sweep.png"):
        path = args.out / name
        print(f"{path}  {path.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()


def _intervals_holding(x: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """How many intervals [start, end) hold each x."""
    return np.searchsorted(np.sort(starts), x, side="right") - np.searchsorted(
        np.sort(ends), x, side="right"
    )
