"""(epoch, global batch) -> the rows' samples and their document pieces, from the plans alone
(the steps 1-3 of `packlm.trace`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from packlm.batch import IGNORE_INDEX, drop_skipped, drop_unsupervised, labels
from packlm.commands.trace.mixture_batch import mixture_batch
from packlm.commands.trace.turns import conversation_turns, document_codes, piece_turns
from packlm.data.epoch.curriculum import Phase, Position, Segment, epoch_segments
from packlm.data.plans import EpochPlans
from packlm.data.skip import StepSkips
from packlm.data.store.sources.document import parse_doc_id, split_turn
from packlm.errors import ConfigError
from packlm.tokenizer.chat import ChatFormat, supervised_table

LABEL_RULE = (
    "labels[j] = token j+1 when it is real and in the same segment as token j (packing "
    "document/none: a piece of L tokens gives L-1 targets; stream: a row is one segment, "
    "so a row that read R tokens gives R-1), else -100 (packlm.batch.labels); and -100 where "
    "token j+1 is a conversation's token whose role does not train (data.chat_supervised)"
)
EDGE = 40  # characters of a piece's text shown at each end
MAX_WALK = 10_000
"""Epochs a trace walks from the run's start to find where one begins (each a plan of the
corpus; a mixture's epochs are all alike and need no walk): an epoch further is refused."""


@dataclass
class Schedule:
    """How optimizer steps map to global batches (the run's trainer settings)."""

    world_size: int = 1
    accumulate: int = 1
    limit_batches: int | float | None = None  # trainer.limit_train_batches

    @property
    def limited(self) -> bool:
        """Whether trainer.limit_train_batches cuts epochs."""
        limit = self.limit_batches
        return not (limit is None or (isinstance(limit, float) and limit >= 1.0))

    def batches_of(self, n: int) -> int:
        """Global batches Lightning runs of an epoch of n."""
        limit = self.limit_batches
        if not self.limited:
            return n
        return min(n, int(limit)) if isinstance(limit, int) else int(n * limit)


class Tracer:
    """Steps and global batches of a run, from its plans (`EpochPlans`) and `Schedule`."""

    def __init__(self, plans: EpochPlans, schedule: Schedule):
        self.plans = plans
        self.schedule = schedule
        self.trained_steps: int | None = None  # the run's last step (its checkpoint's), if known
        self.curriculum = bool(plans.data.curriculum)
        self.phases = plans.phases if self.curriculum else [Phase(0, 0, None)]
        self.step_size = plans.data.batch_size * schedule.world_size  # samples per global batch
        self.streams = plans.streams(self.step_size, schedule.accumulate) if plans.mixture else None
        self._starts: list[Position] = [Position()]  # of epochs 0, 1, ... walked so far
        self._batches: list[int] = []  # global batches of each epoch walked
        self.skips = StepSkips.of(plans.data.skip_steps, schedule.accumulate)
        if self.skips and schedule.limited:
            raise ConfigError(
                "data.skip_steps: not with trainer.limit_train_batches (training refuses it)"
            )

    def plan_for(self, epoch: int, phase: int):
        return self.plans.plan(epoch, "train", phase if self.curriculum else None)

    def segments(self, at: Position) -> list[Segment]:
        """The epoch from `at` (its start), as the sampler deals it."""
        if self.streams is not None:  # a mixture: a fixed number of global batches
            return [Segment(0, 0, self.streams.epoch_batches(), None)]
        return epoch_segments(at, self.phases, self.plan_for, self.step_size)

    def epoch_start(self, epoch: int) -> Position:
        """The data position at the start of `epoch`: the curriculum's phase and count carry
        over from the epochs before (walked once from the run's start, then kept); a
        mixture's epochs carry nothing over."""
        if self.streams is not None:
            return Position(epoch)
        if epoch > MAX_WALK:
            raise ConfigError(self._too_far(f"epoch={epoch}"))
        while len(self._starts) <= epoch:
            at = self._starts[-1]
            segments, used = self.segments(at), 0
            ran = self.schedule.batches_of(sum(s.batches for s in segments))
            phase, tokens = at.phase, at.tokens
            for seg in segments:
                take = min(seg.batches, ran - used)
                if take > 0:
                    phase = seg.phase
                    if seg.targets is not None:
                        tokens += int(seg.targets[:take].sum())
                    used += take
            self._batches.append(ran)
            self._starts.append(Position(at.epoch + 1, phase, 0, tokens, 0))
        return self._starts[epoch]

    def epoch_batches(self, epoch: int) -> int:
        """Global batches of `epoch` that training runs."""
        if self.streams is not None:  # a mixture: the same for every epoch
            return self.schedule.batches_of(self.streams.epoch_batches())
        self.epoch_start(epoch + 1)
        return self._batches[epoch]

    def _too_far(self, what: str) -> str:
        return (
            f"{what} of the run: a trace walks the epochs from the run's start to find where "
            f"it begins, each a plan of the corpus (at most {MAX_WALK:,} epochs)"
        )

    def step_batches(self, step: int) -> list[tuple[int, int]]:
        """(epoch, global batch) of each micro-batch of optimizer step `step` (0-based: the
        step Lightning logs as global_step `step`, after which global_step is step+1); with
        data.skip_steps the step's batches are those of the plan step it trained."""
        if step < 0:
            raise ConfigError(f"step={step}: must be >= 0")
        step = self.skips.plan_step(step)
        acc, n = self.schedule.accumulate, self.epoch_batches(0)
        if self.streams is not None and n:  # a mixture: epochs all alike, no walk
            epoch, k = divmod(step, -(-n // acc))
            return [(epoch, b) for b in range(k * acc, min(n, k * acc + acc))]
        if n and step // -(-n // acc) > MAX_WALK:  # refused before walking that far
            raise ConfigError(self._too_far(f"step={step} (epoch ~{step // -(-n // acc):,})"))
        epoch, first = 0, 0
        while True:
            n = self.epoch_batches(epoch)
            steps = -(-n // acc)
            if n == 0:
                raise ConfigError(f"step={step}: epoch {epoch} has no batch (an empty plan)")
            if step < first + steps:
                lo = (step - first) * acc
                return [(epoch, b) for b in range(lo, min(n, lo + acc))]
            first, epoch = first + steps, epoch + 1

    def plan_step_of(self, epoch: int, batch: int) -> int:
        """The plan step (data.skip_steps' numbering) of global batch `batch` of `epoch`."""
        if self.streams is not None:  # a mixture: epochs all alike
            before = epoch * -(-self.epoch_batches(0) // self.schedule.accumulate)
        else:
            before = sum(
                -(-self.epoch_batches(e) // self.schedule.accumulate) for e in range(epoch)
            )
        return before + batch // self.schedule.accumulate

    def global_step_of(self, epoch: int, batch: int) -> int | None:
        """The optimizer step (as logged) that global batch `batch` of `epoch` (of the plan)
        belongs to; None: a batch of a step left out by data.skip_steps."""
        return self.skips.logged_step(self.plan_step_of(epoch, batch))

    def batch(self, epoch: int, batch: int, rank: int | None = None) -> dict[str, Any]:
        """The trace of global batch `batch` of `epoch` (counted in the plan, data.skip_steps'
        left-out batches included): every row (of `rank` only, if given)."""
        if self.streams is not None:
            return {**mixture_batch(self, epoch, batch, rank), "label_rule": LABEL_RULE}
        at = self.epoch_start(epoch)
        segments, before = self.segments(at), 0
        n_batches = self.schedule.batches_of(sum(s.batches for s in segments))
        if not 0 <= batch < n_batches:
            raise ConfigError(f"batch={batch}: epoch {epoch} has {n_batches} global batches")
        tokens = at.tokens
        for seg in segments:
            if batch < before + seg.batches:
                break
            if seg.targets is not None:
                tokens += int(seg.targets.sum())
            before += seg.batches
        j = batch - before
        if seg.targets is not None:
            tokens += int(seg.targets[:j].sum())
        plan = self.plan_for(epoch, seg.phase)
        base = seg.start + j * self.step_size
        positions = base + np.arange(self.step_size)
        positions = positions[positions < plan.n_samples]
        world = self.schedule.world_size
        slots = np.arange(len(positions))
        if rank is not None:
            if not 0 <= rank < world:
                raise ConfigError(f"rank={rank}: outside the run's {world} rank(s)")
            slots = slots[slots % world == rank]
        rows = self._rows(plan, positions[slots], slots)
        step = self.global_step_of(epoch, batch)
        return {
            "epoch": epoch,
            "batch": batch,
            "step": step,
            "plan_step": self.plan_step_of(epoch, batch),  # what data.skip_steps names
            "skipped_step": step is None,  # data.skip_steps: never trained
            "phase": seg.phase if self.curriculum else None,
            "window": plan.window,
            "stride": plan.stride,
            "tail": plan.tail,
            "packing": plan.packing,
            "world_size": world,
            "batch_size": self.plans.data.batch_size,
            "curriculum_tokens_before": tokens if self.curriculum else None,
            "first_sample_position": int(base),
            "epoch_samples": plan.n_samples,
            "label_rule": LABEL_RULE,
            "rows": rows,
        }

    def _rows(self, plan, positions: np.ndarray, slots: np.ndarray) -> list[dict[str, Any]]:
        ids = plan.sample_ids(positions)
        seq, g, read = plan.windows(ids)
        start, length, offset, full = plan.layout(seq)
        k = ids - plan.window_cum[seq]
        row, doc, begin, size = plan.pieces(ids)
        store, tok = self.plans.store("train"), self.plans.tokenizer
        names, world, bos = store.source_names, self.schedule.world_size, self.plans.data.bos
        skip = np.isin(doc, self.plans.skipped_documents())  # [p] data.skip_documents pieces
        byte_len = tok.token_byte_lengths() if tok is not None else None
        chat = getattr(store, "roles", None) is not None  # conversations: a mask, and turns
        table = supervised_table(self.plans.data.chat_supervised) if chat else None
        start_id = ChatFormat.of(tok).start_id if chat and tok is not None else None
        out = []
        for i, slot in enumerate(slots.tolist()):
            mine = np.flatnonzero(row == i)
            pieces, column, ids_row = [], 0, []
            skipped = np.zeros(plan.window + 1, dtype=bool)  # [T+1] tokens of skipped documents
            supervised = np.zeros(plan.window + 1, dtype=bool) if chat else None  # [T+1]
            for p in mine.tolist():
                d, b, L = int(doc[p]), int(begin[p]), int(size[p])
                piece_ids = document_tokens(store, d, b, L, bos)
                if skip[p]:  # no label has its tokens as input or target
                    skipped[column : column + L] = True
                if chat:  # may each token be a target: its role code, never the BOS
                    supervised[column : column + L] = table[document_codes(store, d, b, L, bos)]
                    supervised[column : column + L] &= np.arange(b, b + L) >= int(bos)
                pieces.append(
                    self._piece(store, names, tok, byte_len, d, b, L, bos, piece_ids)
                    | {"row_columns": [column, column + L], "skipped": bool(skip[p])}
                )
                ids_row.append(piece_ids)
                column += L
            tokens = np.full(plan.window + 1, store.pad_id, dtype=np.int64)
            segments = np.full(plan.window + 1, -1, dtype=np.int32)
            if ids_row:
                flat = np.concatenate(ids_row)
                tokens[: len(flat)] = flat
                segments[: len(flat)] = np.repeat(
                    np.arange(len(ids_row)), [len(x) for x in ids_row]
                )
            seg = np.where(segments >= 0, 0, -1) if plan.packing == "stream" else segments
            lab = drop_skipped(labels(tokens[None], seg[None].astype(np.int32)), skipped[None])
            lab = drop_unsupervised(lab, None if supervised is None else supervised[None])[0]
            for p, piece in zip(mine.tolist(), pieces, strict=True):  # labels of its inputs
                lo, hi = piece["row_columns"]
                piece["targets"] = int((lab[lo:hi] != IGNORE_INDEX).sum())
                turns = (
                    conversation_turns(store, piece["document"], start_id)
                    if start_id is not None else None
                )  # fmt: skip
                if turns is not None:
                    first = piece["first_turn"] or 0
                    piece["turns"] = piece_turns(turns, first, int(begin[p]), int(size[p]), bos,
                                                 lo, lab)  # fmt: skip
            supervised = lab != IGNORE_INDEX
            windows = int(plan.window_cum[seq[i] + 1] - plan.window_cum[seq[i]])
            out.append(
                {
                    "slot": slot,
                    "rank": slot % world,
                    "row": slot // world,
                    "sample": int(ids[i]),
                    "input_ids": tokens[:-1].tolist(),
                    "supervised": int(supervised.sum()),
                    "supervised_columns": runs(supervised),
                    "window": {
                        "sequence": int(seq[i]),
                        "sequence_stream_start": int(start[i]),
                        "sequence_length": int(length[i]),
                        "offset": int(offset[i]),
                        "index": int(k[i]),
                        "windows_in_sequence": windows,
                        "full_windows": int(full[i]),
                        "tail_window": bool(k[i] >= full[i]),
                        "start_in_sequence": int(g[i] - start[i]),
                        "tokens_read": int(read[i]),
                    },
                    "pieces": pieces,
                }
            )
        return out

    def _piece(self, store, names, tok, byte_len, d, b, L, bos, piece_ids) -> dict[str, Any]:
        doc_id = store.doc_id(d)
        source = int(store.doc_sources[d])
        out = {
            "document": d,
            "doc_id": doc_id,
            "source": names[source] if source < len(names) else source,
            "source_index": source,
            "path": None,
            "record": None,
            "token_span": [b, b + L],
            "document_tokens": int(store.doc_offsets[d + 1] - store.doc_offsets[d]) + int(bos),
            "store_offsets": [int(store.doc_offsets[d]), int(store.doc_offsets[d + 1])],
        }
        out.update(parse_doc_id(doc_id))
        out["first_turn"] = split_turn(doc_id)[1]  # a cut conversation's piece: its first turn
        if tok is not None:
            before = document_tokens(store, d, 0, b, bos)
            lo = int(byte_len[before].sum())
            out["text_byte_span"] = [lo, lo + int(byte_len[piece_ids].sum())]
            text = tok.decode(piece_ids.tolist())
            out["text_first"], out["text_last"] = text[:EDGE], text[-EDGE:]
        return out


def document_tokens(store, d: int, begin: int, length: int, bos: bool) -> np.ndarray:
    """int64: tokens [begin, begin+length) of document d as the plan counts them (with
    data.bos position 0 is the BOS, the store's EOS id, and position p >= 1 the store's p-1)."""
    pos = np.arange(begin, begin + length)
    first = int(store.doc_offsets[d])
    if not bos:
        return np.asarray(store.tokens[first + begin : first + begin + length], dtype=np.int64)
    read = np.asarray(store.tokens[first + np.maximum(pos - 1, 0)], dtype=np.int64)
    return np.where(pos == 0, store.eos_id, read)


def runs(mask: np.ndarray) -> list[list[int]]:
    """[[start, end), ...] of the True runs of a bool vector."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return edges.reshape(-1, 2).tolist()
