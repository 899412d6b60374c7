"""`python -m packlm.trace`: the arguments, and the trace as text or JSON."""

from __future__ import annotations

import difflib
import json
import logging
import sys
from typing import Any

from packlm.commands.trace.run import tracer_of
from packlm.commands.trace.tracer import LABEL_RULE
from packlm.errors import ConfigError


def render(traces: list[dict[str, Any]]) -> str:
    """The human-readable trace."""
    lines = []
    for t in traces:
        phase = "" if t["phase"] is None else f", curriculum phase {t['phase']}"
        lines.append(
            (
                f"plan step {t['plan_step']} (left out by data.skip_steps, never trained)"
                if t["skipped_step"]
                else f"step {t['step']}"
                + ("" if t["plan_step"] == t["step"] else f" (plan step {t['plan_step']})")
            )
            + f": epoch {t['epoch']}, global batch {t['batch']}{phase} "
            f"(window {t['window']}, stride {t['stride']}, tail {t['tail']}, packing "
            f"{t['packing']}; {t['world_size']} rank(s) x {t['batch_size']} rows; samples "
            f"{t['first_sample_position']}.. of {t['epoch_samples']} in the epoch order)"
        )
        if "mixture_shares" in t:
            shares = ", ".join(f"{n} {v:g}" for n, v in t["mixture_shares"].items())
            rows = ", ".join(f"{n} {v}" for n, v in t["mixture_rows"].items())
            lines.append(f"  mixture: shares {shares}; rows {rows}")
        for r in t["rows"]:
            w = r["window"]
            m = r.get("mixture")
            lines.append(
                f"  rank {r['rank']} row {r['row']}: "
                + ("" if m is None else f"{m['source']} pass {m['pass']} row {m['stream_row']}, ")
                + f"sample {r['sample']}, {r['supervised']} "
                f"supervised of {len(r['input_ids'])} at columns {r['supervised_columns']}; "
                f"window {w['index']} of {w['windows_in_sequence']} of sequence {w['sequence']}"
                f" (length {w['sequence_length']}, offset {w['offset']}, starts at "
                f"{w['start_in_sequence']}, reads {w['tokens_read']}"
                f"{', tail' if w['tail_window'] else ''})"
            )
            for p in r["pieces"]:
                where = p["path"] or p["doc_id"]
                record = "" if p["record"] is None else f" record {p['record']}"
                if p.get("first_turn") is not None:  # a piece of a cut conversation
                    record += f" from turn {p['first_turn']}"
                span = p.get("text_byte_span")
                lines.append(
                    f"    doc {p['document']} [{p['source']}] {where}{record}: tokens "
                    f"{p['token_span'][0]}:{p['token_span'][1]} of {p['document_tokens']}"
                    + (f", text bytes {span[0]}:{span[1]}" if span else "")
                    + f", row columns {p['row_columns'][0]}:{p['row_columns'][1]}, "
                    f"{p['targets']} targets"
                    + (" (data.skip_documents: not supervised)" if p["skipped"] else "")
                )
                if p.get("turns"):
                    lines.append(
                        "      turns: "
                        + ", ".join(
                            f"{u['turn']} {u['role']} columns {u['row_columns'][0]}:"
                            f"{u['row_columns'][1]} ({u['targets']} targets)"
                            for u in p["turns"]
                        )
                    )
                if "text_first" in p:
                    lines.append(f"      {p['text_first']!r} ... {p['text_last']!r}")
    lines.append(f"labels: {LABEL_RULE}")
    lines.append(
        "bytes: the store keeps no byte offsets in the source files; text bytes are inside "
        "the document's UTF-8 text (the store's doc_offsets give its tokens)"
    )
    return "\n".join(lines)


USAGE = (
    "usage: python -m packlm.trace <run dir | checkpoint> step=N | epoch=E batch=B "
    "[rank=R] [world=W] [--json | json=true]"
)


HELP = """\
What a step trained on, from the run's saved config alone (no replay): for every row of the
global batch, its samples and their pieces (store document, source and record, token and text
spans, supervised targets; for a conversation, each turn's index, role and targets).

  step=N          the optimizer step as the run logged it (its plan step is printed too)
  epoch=E batch=B a global batch of an epoch instead
  rank=R          only the rows of rank R
  world=W         the number of ranks (default: the run's)
  --json          JSON for tools instead of text

More: docs/trace.md"""


def show_why() -> None:
    """packlm's INFO lines on stderr (why a store is rebuilt, which store is traced), unless
    the caller configured logging already."""
    logger = logging.getLogger("packlm")
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


KEYS = {"step": 0, "epoch": 0, "batch": 0, "rank": 0, "world": 1}
"""trace's integer arguments and the least value each takes."""


def arguments(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """({key: int, "json": bool}, paths) of the command line; ConfigError naming a wrong one
    (an unknown key with the closest one, a value that is not an integer or is too small)."""
    from packlm.config.credentials import check_arguments

    check_arguments(argv)  # a URL's credential is refused masked, never echoed in an error
    opts: dict[str, Any] = {}
    paths = []
    for a in argv:
        if a == "--json":
            opts["json"] = True
            continue
        if "=" not in a:
            paths.append(a)
            continue
        key, _, value = a.partition("=")
        key = key.lstrip("+")
        if key == "json":
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ConfigError(f"json={value!r}: must be true or false")
            opts["json"] = value.lower() in ("true", "1", "yes")
        elif key in KEYS:
            try:
                opts[key] = int(value)
            except ValueError:
                raise ConfigError(f"{key}={value!r}: must be an integer") from None
            if opts[key] < KEYS[key]:
                raise ConfigError(f"{key}={value}: must be >= {KEYS[key]}")
        else:
            near = difflib.get_close_matches(key, [*KEYS, "json"], n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ConfigError(f"{key}: unknown argument{hint}; {USAGE}")
    if len(paths) != 1 or not ("step" in opts or "batch" in opts):
        raise ConfigError(USAGE)
    return opts, paths


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from packlm.data.store.sources import SourceError
    from packlm.data.store.token_store import StoreError
    from packlm.errors import one_line_errors

    if argv and argv[0] in ("-h", "--help"):
        print(f"{USAGE}\n\n{HELP}")
        return 0
    with one_line_errors(ConfigError, OSError, SourceError, StoreError):
        ints, paths = arguments(argv)
        show_why()
        tracer = tracer_of(paths[0], ints.get("world"), ints.get("step"))  # its settings then
        if "step" in ints:
            where = tracer.step_batches(ints["step"])
            last = tracer.trained_steps
            if last is not None and ints["step"] > last:
                print(
                    f"note: step {ints['step']} is past the run's last trained step ({last}, its "
                    "checkpoint's): this is the plan's batch for that step, never trained",
                    file=sys.stderr,
                )
        else:
            where = [(ints.get("epoch", 0), ints["batch"])]
        traces = [tracer.batch(e, b, ints.get("rank")) for e, b in where]
        if ints.get("json"):
            json.dump(traces, sys.stdout, indent=1)
            sys.stdout.write("\n")
        else:
            print(render(traces))
    return 0
