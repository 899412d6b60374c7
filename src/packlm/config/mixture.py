"""Mixtures by token share: `share`/`name` on `data.sources` entries, `data.mixture_schedule`.

`mixture_points` turns either form into one list of (step, {name: share}) points, checked
before any work: shares in [0, 1] that sum to 1, names that are unique and known, steps
ascending from 0, and no share outside the training sources. Each error names its key.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from packlm.config.sources import source_name, source_share
from packlm.errors import ConfigError

INTERPOLATIONS = ("constant", "linear")
TOLERANCE = 1e-6
"""How far from 1 the shares of one point may sum (decimal fractions such as 0.7+0.2+0.1)."""

Point = tuple[int, dict[str, float]]


def is_mixture(cfg: Any) -> bool:
    """Whether the training sources are mixed by share (an entry's share or a schedule)."""
    return cfg.mixture_schedule is not None or any(source_share(e) is not None for e in cfg.sources)


def mixture_names(cfg: Any) -> list[str]:
    """Each training source's name in the mixture (its `name`, else its path's stem)."""
    return [source_name(e) for e in cfg.sources]


def mixture_points(cfg: Any) -> list[Point]:
    """The shares at each schedule point: [(step, {name: share of every source})], the first at
    step 0; from the entries' shares when there is no data.mixture_schedule. ConfigError naming
    the key of the first bad value."""
    names = mixture_names(cfg)
    shares = [source_share(e) for e in cfg.sources]
    if cfg.val_sources:
        for i, entry in enumerate(cfg.val_sources):
            if source_share(entry) is not None:
                raise ConfigError(
                    f"data.val_sources[{i}].share: validation is scored as it is, not mixed; "
                    "give shares on data.sources only"
                )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(
            f"data.sources: the names {twice} are used twice (a name is the path's stem unless "
            "given); give each source a name: {path: ..., name: ..., share: ...}"
        )
    if cfg.mixture_schedule is None:
        missing = [f"data.sources[{i}]" for i, s in enumerate(shares) if s is None]
        if missing:
            raise ConfigError(
                f"{', '.join(missing)}: no share, while other sources have one; give every "
                "training source a share (they sum to 1)"
            )
        point = dict(zip(names, [float(s) for s in shares], strict=True))
        _check_sum("data.sources[*].share", point)
        return [(0, point)]
    given = [f"data.sources[{i}].share" for i, s in enumerate(shares) if s is not None]
    if given:
        raise ConfigError(
            f"{given[0]}: data.mixture_schedule gives the shares; give them in one place"
        )
    return _schedule_points(cfg.mixture_schedule, names)


def _schedule_points(schedule: Any, names: list[str]) -> list[Point]:
    if not isinstance(schedule, (list, tuple)) or not schedule:
        raise ConfigError(
            f"data.mixture_schedule={schedule!r}: a list of {{step: n, shares: {{name: share}}}}"
        )
    points: list[Point] = []
    for i, point in enumerate(schedule):
        key = f"data.mixture_schedule[{i}]"
        if not (hasattr(point, "get") and hasattr(point, "keys")):
            raise ConfigError(f"{key}={point!r}: expected {{step: n, shares: {{name: share}}}}")
        unknown = sorted(set(point.keys()) - {"step", "shares"})
        if unknown:
            raise ConfigError(f"{key}: unknown keys {unknown}; allowed ['step', 'shares']")
        step, shares = point.get("step"), point.get("shares")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ConfigError(f"{key}.step={step!r}: an integer optimizer step >= 0")
        if i == 0 and step != 0:
            raise ConfigError(f"{key}.step={step}: the first point is at step 0")
        if points and step <= points[-1][0]:
            raise ConfigError(
                f"{key}.step={step}: steps must ascend (the previous point is at {points[-1][0]})"
            )
        if not (hasattr(shares, "get") and hasattr(shares, "keys")):
            raise ConfigError(f"{key}.shares={shares!r}: a mapping {{source name: share}}")
        strangers = [n for n in shares if n not in names]
        if strangers:
            raise ConfigError(
                f"{key}.shares: no training source is named {strangers[0]!r} (the names: "
                f"{names}; a name is the path's stem unless the entry gives one)"
            )
        for name in shares:
            share = shares[name]
            if (
                isinstance(share, bool)
                or not isinstance(share, (int, float))
                or not 0 <= share <= 1
            ):
                raise ConfigError(f"{key}.shares.{name}={share!r}: a fraction in [0, 1]")
        values = {n: float(shares.get(n, 0.0)) for n in names}
        _check_sum(f"{key}.shares", values)
        points.append((step, values))
    return points


def _check_sum(key: str, shares: dict[str, float]) -> None:
    total = sum(shares.values())
    if abs(total - 1.0) > TOLERANCE:
        listed = ", ".join(f"{n} {s:g}" for n, s in shares.items())
        raise ConfigError(f"{key}: the shares sum to {total:g}, not 1 ({listed})")


MAX_ROWS = 2**24
"""Rows of one batch of a mixture (16.8 M: that many windows of even 64 tokens are 8 GiB of
input ids alone)."""


def check_mixture(cfg: Any) -> None:
    """The mixture keys of a DataConfig, before any work (nothing to check without one)."""
    if cfg.mixture_interpolation not in INTERPOLATIONS:
        raise ConfigError(
            f"data.mixture_interpolation={cfg.mixture_interpolation!r}: one of {list(INTERPOLATIONS)}"
        )
    if not is_mixture(cfg):
        return
    mixture_points(cfg)
    if isinstance(cfg.batch_size, int) and cfg.batch_size > MAX_ROWS:
        raise ConfigError(  # every row of a mixture is dealt, none clamped to a split's size
            f"data.batch_size={cfg.batch_size}: a mixture deals every row of a batch from its "
            f"sources, and a batch holds at most {MAX_ROWS:,} rows; lower data.batch_size "
            "(trainer.accumulate_grad_batches adds rows to a step)"
        )
    if cfg.curriculum is not None:
        raise ConfigError(
            "data.curriculum: not with a mixture by share (data.sources[*].share or "
            "data.mixture_schedule); use one of them"
        )


MIXTURE_KEY = "data.mixture_schedule / data.sources[*].share"
"""How a resume check names the mixture (the schedule, or the entries' shares)."""


def mixture_signature(data: Any) -> dict[str, Any] | None:
    """The mixture of a DataConfig or of a checkpoint's saved `data` mapping, comparable
    between the two: the points and the interpolation; None without a mixture."""
    get = data.get if hasattr(data, "get") else lambda k, d=None: getattr(data, k, d)
    view = SimpleNamespace(
        sources=get("sources") or [],
        val_sources=get("val_sources"),
        mixture_schedule=get("mixture_schedule"),
        mixture_interpolation=get("mixture_interpolation") or "constant",
        curriculum=None,
    )
    if not is_mixture(view):
        return None
    points = [[step, dict(shares)] for step, shares in mixture_points(view)]
    return {"points": points, "interpolation": view.mixture_interpolation}
