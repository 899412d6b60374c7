"""A resume rewrites the run's TensorBoard events without what the killed run logged past
the checkpoint, so no step appears twice (a SIGKILL loses the steps after the last
checkpoint; the resumed run logs them again).

Every event file of the log dir is read back; summaries at a step >= the resumed step (or,
for the curves against supervised tokens, at >= the resumed token count) are dropped; the
rest goes into one new event file, written whole before the old files are removed (a kill
in between leaves duplicates, never a loss). TensorBoard's own `purge_step` cannot do this:
it purges every tag at the same step, and would erase the token-axis curves.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto import event_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

log = logging.getLogger(__name__)

TOKEN_AXIS_PREFIXES = ("train_by_tokens/", "val_by_tokens/")
"""Tags whose step is the count of supervised tokens (callbacks.SupervisedTokenAxis)."""


def _before(tag: str, at: int, step: int, tokens: int) -> bool:
    """Logged before the checkpoint: Lightning's step index of the k-th optimizer step is
    k-1 (so < step); a token-axis point carries the tokens seen after its step (so <= tokens)."""
    return at <= tokens if tag.startswith(TOKEN_AXIS_PREFIXES) else at < step


def purge_after(log_dir: Path, step: int, tokens: int) -> int:
    """Drop the summaries past (step, tokens) from the event files in `log_dir`; return how
    many values were dropped (0: the files are left as they are)."""
    files = sorted(Path(log_dir).glob("events.out.tfevents.*"))
    kept, dropped = [], 0
    for path in files:
        for raw in RawEventFileLoader(str(path)).Load():
            event = event_pb2.Event.FromString(raw)
            if event.HasField("file_version"):
                continue  # the new file writes its own
            if event.HasField("summary"):
                values = [
                    v for v in event.summary.value if _before(v.tag, event.step, step, tokens)
                ]
                dropped += len(event.summary.value) - len(values)
                if not values:
                    continue
                del event.summary.value[:]
                event.summary.value.extend(values)
            kept.append(event)
    if not dropped:
        return 0
    writer = EventFileWriter(str(log_dir), filename_suffix=".resumed")
    for event in kept:
        writer.add_event(event)
    writer.close()
    for path in files:
        path.unlink()
    log.info(
        "resume: dropped %d TensorBoard values logged past step %d from %s", dropped, step, log_dir
    )
    return dropped
