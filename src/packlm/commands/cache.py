"""`python -m packlm.cache`: list, remove and prune the tokenizers and token stores a cache holds.

    python -m packlm.cache                              # every entry, least recently used first
    python -m packlm.cache remove 3f2a9c0d11e4b7a2      # one entry by its name (a prefix will do)
    python -m packlm.cache prune --unused-days 30       # what no run used for 30 days
    python -m packlm.cache prune --unused-days 30 --dry-run
    python -m packlm.cache prune --max-gb 20                # least recently used first, to 20 GB

Sweeps over the tokenizer or the data write one entry per setting; nothing removes them but
this. `--cache-dir` defaults to what train.py uses ($PACKLM_CACHE, else .cache/packlm).
An entry a live run holds is never removed: `remove` refuses it, naming the run (exit 1),
`prune` skips it and says so.
"""

from __future__ import annotations

import os
import sys

from packlm.cache import DEFAULT_CACHE_DIR
from packlm.cache.hold import EntryInUse, holders, in_use_message
from packlm.commands.cache_inventory import Entry, entries, remove
from packlm.errors import OneLineParser, bounded


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m packlm.cache", description=__doc__.split("\n")[0])
    parser.add_argument("--cache-dir", default=os.environ.get("PACKLM_CACHE", DEFAULT_CACHE_DIR))
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("list", help="every entry (the default)")
    by_name = commands.add_parser("remove", help="remove entries by name")
    by_name.add_argument("names", nargs="+", help="entry names as listed, or unique prefixes")
    prune = commands.add_parser(
        "prune", help="remove the entries no run used for N days, or the least recently used "
        "until the cache fits in a size (both: either reason)",
    )  # fmt: skip
    prune.add_argument("--unused-days", type=float, help="remove what no run used for N days")
    prune.add_argument("--max-gb", type=float, help="then the oldest-used until the rest fits")
    prune.add_argument("--dry-run", action="store_true", help="list them, remove nothing")
    args = parser.parse_args(argv)
    if args.command == "prune" and args.unused_days is None and args.max_gb is None:
        parser.exit(2, "error: prune needs --unused-days N, --max-gb G or both\n")
    for flag in ("unused_days", "max_gb"):
        value = getattr(args, flag, None)
        if value is not None and not 0 <= value < float("inf"):  # NaN fails too
            parser.error(f"--{flag.replace('_', '-')} {value}: must be a number >= 0")

    found = entries(args.cache_dir)
    if args.command in (None, "list"):
        print(table(found) if found else f"{args.cache_dir}: no cache entries")
        return 0
    if args.command == "remove":
        chosen = []
        for name in args.names:
            matches = [e for e in found if e.name.startswith(name)]
            if len(matches) != 1:
                which = "no entry" if not matches else f"{len(matches)} entries"
                parser.exit(
                    2, f"error: {bounded(repr(name))}: {which} in {args.cache_dir} by that name\n"
                )
            chosen += matches
    else:
        chosen = prune_choice(found, args.unused_days, args.max_gb)
        for entry in list(chosen):
            owners = holders(entry.path)
            if owners:
                chosen.remove(entry)
                print(f"skipping {in_use_message(entry.path, owners)}")
    if not chosen:
        print("nothing to remove")
        return 0
    print(table(chosen))
    if getattr(args, "dry_run", False):
        print(f"would remove {len(chosen)} entries, {_size(sum(e.bytes for e in chosen))}")
        return 0
    removed, refused = [], []
    for entry in chosen:
        try:
            remove(entry)
            removed.append(entry)
        except EntryInUse as e:  # remove refuses; prune skips one a run opened meanwhile
            refused.append(entry)
            if args.command == "remove":
                print(f"error: {e.strerror}", file=sys.stderr)
            else:
                print(f"skipping {e.strerror}")
    print(f"removed {len(removed)} entries, {_size(sum(e.bytes for e in removed))}")
    return 1 if refused and args.command == "remove" else 0


def prune_choice(
    found: list[Entry], unused_days: float | None, max_gb: float | None
) -> list[Entry]:
    """`found` (least recently used first) -> what prune removes: the entries unused for
    `unused_days`, then more, oldest-used first, until the rest fits in `max_gb`."""
    chosen, kept = [], []
    for entry in found:
        stale = unused_days is not None and entry.unused_days() >= unused_days
        (chosen if stale else kept).append(entry)
    if max_gb is not None:
        left = sum(e.bytes for e in kept)
        for entry in kept:  # least recently used first
            if left <= max_gb * 2**30:
                break
            chosen.append(entry)
            left -= entry.bytes
    return chosen


def table(found: list[Entry]) -> str:
    """One line per entry: kind, name, size, days since last used, what it was built from."""
    rows = [("kind", "name", "size", "unused", "built from")] + [
        (e.kind, e.name[:16], _size(e.bytes), f"{e.unused_days():.1f} d", e.built_from)
        for e in found
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [
        "  ".join([*(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)), r[4]]) for r in rows
    ]
    return "\n".join(
        lines + [f"total {_size(sum(e.bytes for e in found))} in {len(found)} entries"]
    )


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


if __name__ == "__main__":
    sys.exit(main())
