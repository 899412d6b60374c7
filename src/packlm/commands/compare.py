"""`python -m packlm.compare <multirun dir | run dirs ...> [--out PNG]`: a sweep at a glance.

Prints one row per run (job): the settings that differ between the runs (what the sweep
varied), supervised tokens, wall time, final val/loss and val/bpb and the step of the best
val/loss; and draws val/bpb against supervised tokens for every run into one PNG. Every
number is read back from the runs' TensorBoard event files (`tb/`); the settings come from
the HParams row the run wrote and, for Hydra jobs, from the overrides of its launch and
resumes (`.hydra/`).
"""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from packlm.errors import OneLineParser, bounded

if TYPE_CHECKING:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

# TensorBoard's reader and packlm's callbacks (Lightning, torch: seconds to import) are
# imported where they are used, so `python -m packlm.compare --help` answers at once.

SESSION_TAG = "_hparams_/session_start_info"
FORMATS = {  # the summary columns and how they print
    "supervised tokens": "{:,.0f}",
    "wall time (s)": "{:.1f}",
    "val/loss": "{:.4f}",
    "val/bpb": "{:.4f}",
    "best step": "{}",
}
COLUMNS = tuple(FORMATS)


class NoRunsError(FileNotFoundError):
    """A path holds no run directory (no `tb/` below it)."""


def find_runs(paths: list[Path]) -> list[Path]:
    """Run directories (those holding `tb/`) at or below each path, in natural order."""
    runs: list[Path] = []
    for path in paths:
        if not path.exists():
            raise NoRunsError(f"{path}: no such directory")
        found = [path] if (path / "tb").is_dir() else [t.parent for t in path.glob("**/tb")]
        found = [p for p in found if (p / "tb").is_dir()]
        if not found:
            raise NoRunsError(f"{path}: no run below it (no tb/ directory)")
        runs += sorted(found, key=_natural)
    return list(dict.fromkeys(runs))


def _natural(path: Path) -> list[Any]:
    """Sort key: `10_window=...` after `9_window=...`."""
    return [int(s) if s.isdigit() else s for s in re.split(r"(\d+)", str(path))]


def read_run(run: Path) -> dict[str, Any]:
    """Settings, curves and summary numbers of one run."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from packlm.callbacks.token_axis import BY_TOKENS

    acc = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    by_tokens = EventAccumulator(str(run / "tb" / BY_TOKENS), size_guidance={"scalars": 0})
    if (run / "tb" / BY_TOKENS).is_dir():  # the token-axis curves' own writer
        by_tokens.Reload()
    tags = set(acc.Tags()["scalars"])
    token_tags = set(by_tokens.Tags()["scalars"])

    def series(tag: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if tag in token_tags:
            events = by_tokens.Scalars(tag)
        else:
            events = acc.Scalars(tag) if tag in tags else []
        return (
            np.array([e.step for e in events], dtype=np.int64),
            np.array([e.value for e in events], dtype=np.float64),
            np.array([e.wall_time for e in events], dtype=np.float64),
        )

    loss_steps, loss, _ = series("val/loss")
    _, bpb, _ = series("val/bpb")
    train_steps, supervised, _ = series("tokens/supervised")
    loss_steps = log_steps(loss_steps, train_steps)
    bpb_tokens, bpb_by_tokens, _ = series("val_by_tokens/bpb")
    walls = [series(t)[2] for t in tags]
    last_wall = max((float(w.max()) for w in walls if len(w)), default=math.nan)
    try:
        first_wall = acc.FirstEventTimestamp()
    except ValueError:  # no event at all
        first_wall = math.nan
    return {
        "run": run,
        "settings": {**_hparams(acc), **_overrides(run)},
        # tokens/supervised is logged every n steps; the last validation knows the total
        "supervised tokens": float(max(supervised.max(initial=-1), bpb_tokens.max(initial=-1)))
        if len(supervised) or len(bpb_tokens)
        else math.nan,
        "wall time (s)": last_wall - first_wall,
        "val/loss": float(loss[-1]) if len(loss) else math.nan,
        "val/bpb": float(bpb[-1]) if len(bpb) else math.nan,
        "best step": int(loss_steps[np.argmin(loss)]) if len(loss) else None,
        "curve": (bpb_tokens, bpb_by_tokens),  # val/bpb against supervised tokens
        "curve steps": loss_steps if len(loss_steps) == len(bpb_tokens) else None,
    }


def log_steps(val_steps: np.ndarray, train_steps: np.ndarray) -> np.ndarray:
    """The validations' steps as the run's log says them ("validation at step 10": optimizer
    steps done), from their TensorBoard step indices: Lightning writes the k-th optimizer
    step's curves at index k-1, a validation inside fit too, but the one `trainer.validate`
    runs after fit (train.validate_at_end) at k, the index past the last training step."""
    end = int(train_steps.max()) + 1 if len(train_steps) else None  # steps trained
    steps = val_steps + 1
    return steps if end is None else np.minimum(steps, max(end, 1))


def _hparams(acc: EventAccumulator) -> dict[str, str]:
    """The run's HParams row (`packlm.callbacks.HParams`) as text values."""
    from tensorboard.plugins.hparams import metadata as hparams_metadata

    try:
        content = acc.PluginTagToContent("hparams").get(SESSION_TAG)
    except KeyError:  # no hparams plugin data in this run
        return {}
    if content is None:
        return {}
    info = hparams_metadata.parse_session_start_info_plugin_data(content)
    # keyed like overrides: `data.window` (runs of packlm <= 0.1 wrote `data/window`)
    return {name.replace("/", "."): _value_text(v) for name, v in info.hparams.items()}


def _value_text(value: Any) -> str:
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        number = value.number_value
        return str(int(number)) if number.is_integer() else f"{number:g}"
    if kind == "bool_value":
        return str(value.bool_value).lower()
    return str(getattr(value, kind)) if kind else ""


def _overrides(run: Path) -> dict[str, str]:
    """`key=value` overrides a Hydra job ended with: its launch's, then each accepted resume's
    on top (packlm.runtime.run_records), so a resume that changed a setting shows its value."""
    from packlm.runtime.run_records import overrides_in_force

    pairs = (str(e).lstrip("+~").split("=", 1) for e in overrides_in_force(run))
    return {
        k: v
        for k, v, *_ in (p + [""] for p in pairs)
        if not k.startswith("hydra.") and k != "ckpt_path"
    }


def varied(rows: list[dict[str, Any]]) -> list[str]:
    """Settings whose value is not the same in every run (all of them: none for one run)."""
    from packlm.callbacks.views.hparams import SHOWN

    keys = {k for r in rows for k in r["settings"]}
    keys = sorted(keys, key=lambda k: (SHOWN.index(k) if k in SHOWN else len(SHOWN), k))
    return [k for k in keys if len({r["settings"].get(k, "-") for r in rows}) > 1]


def table(rows: list[dict[str, Any]]) -> str:
    """An aligned plain-text table: run, varied settings, summary columns."""
    keys = varied(rows)
    head = ["run", *keys, *COLUMNS]
    body = [
        [
            _short(r["run"].name),
            *(r["settings"].get(k, "-") for k in keys),
            *(_cell(r[c], c) for c in COLUMNS),
        ]
        for r in rows
    ]
    widths = [max(len(str(x)) for x in column) for column in zip(head, *body, strict=True)]
    lines = [
        "  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True))
        for line in (head, *body)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


def _short(name: str, width: int = 40) -> str:
    """A run's directory name, cut: the varied columns say what tells the runs apart."""
    return name if len(name) <= width else name[: width - 3] + "..."


def _cell(value: Any, column: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return FORMATS[column].format(value)


def plot(rows: list[dict[str, Any]], out: Path) -> Path:
    """`figure(rows)` written atomically to `out`."""
    fig = figure(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    fig.savefig(tmp, format="png")
    os.replace(tmp, out)
    return out


def figure(rows: list[dict[str, Any]]) -> Any:
    """val/bpb against supervised tokens, one line per run, its last point labelled with the
    run's varied settings and the step of its last validation."""
    from packlm.callbacks.views.render import new_figure, require_matplotlib

    require_matplotlib()
    fig = new_figure(8, 4.2)
    ax = fig.add_axes((0.1, 0.13, 0.58, 0.77))
    keys = varied(rows)
    for r in rows:
        tokens, bpb = r["curve"]
        label = ", ".join(f"{k.split('.')[-1]}={r['settings'].get(k, '-')}" for k in keys)
        (line,) = ax.plot(tokens, bpb, marker="o", markersize=4, label=label or r["run"].name)
        if len(tokens):  # the last point says its run and step: one validation is one dot
            step = r.get("curve steps")
            text = (label or r["run"].name) + (f", step {step[-1]}" if step is not None else "")
            ax.annotate(
                text, (tokens[-1], bpb[-1]), xytext=(4, 4), textcoords="offset points",
                fontsize=7, color=line.get_color(),
            )  # fmt: skip
    plain_token_axis(ax, [t for r in rows for t in r["curve"][0]])
    ax.set(xlabel="supervised tokens seen", ylabel="val/bpb (bits per byte)")
    ax.set_title(f"{len(rows)} runs: validation bits per byte at equal data", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8, frameon=False)
    return fig


def plain_token_axis(ax: Any, tokens: list[float]) -> None:
    """x ticks as plain token counts with thousands separators (matplotlib's default turns
    runs ending at nearly the same count into an offset: 40948.0 ... 40952.0 + 4e4), and a
    range of at least 10% around them."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True, min_n_ticks=2))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
    if tokens:
        low, high = min(tokens), max(tokens)
        pad = max((high - low) * 0.05, high * 0.05, 1.0)
        ax.set_xlim(max(low - pad, 0), high + pad)


def compare(paths: list[str | Path], out: str | Path | None = None) -> tuple[str, Path]:
    """Read every run below `paths`; returns the table and the PNG's path (default:
    `compare.png` in the first path)."""
    paths = [Path(p) for p in paths]
    rows = [read_run(run) for run in find_runs(paths)]
    png = plot(rows, Path(out) if out else paths[0] / "compare.png")
    return table(rows), png


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(prog="python -m packlm.compare", description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", help="a multirun directory or run directories")
    parser.add_argument("--out", help="the PNG to write (default: <first path>/compare.png)")
    args = parser.parse_args(argv)
    try:
        text, png = compare(args.paths, args.out)
    except NoRunsError as e:
        sys.exit(f"error: {bounded(str(e))}")  # one line, exit 1, as every command
    print(text)
    print(f"\nval/bpb against supervised tokens: {png}")


if __name__ == "__main__":
    main()
