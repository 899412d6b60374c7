"""The `data` config group as a dataclass: every key, its default, and its validation.

Validation runs before any work starts and names the offending key, so a bad override
fails in milliseconds instead of after the store was built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from packlm.config.group import ConfigGroup, check_choice, check_positive_int
from packlm.errors import ConfigError

__all__ = ["DataConfig"]

PACKING_MODES = ("none", "document", "stream")
TAIL_POLICIES = ("drop", "cover", "pad")
GROUP_BY = ("none", "source", "directory")
SNAP_TO = ("none", "document", "paragraph")
PACK_STRATEGIES = ("ordered", "best_fit")
ENCODING_ERRORS = ("strict", "replace", "skip")
SOURCE_KEYS = ("path", "weight", "include", "exclude", "span")


@dataclass
class DataConfig(ConfigGroup):
    group: ClassVar[str] = "data"

    # --- sources -> documents (packlm.data.store.sources) ---
    sources: list[Any] = field(default_factory=lambda: ["default"])
    """Entries: "default" (the embedded stdlib corpus), a file, a directory, a glob, or
    {path: ..., weight: w, include: [...], exclude: [...], span: [a, b]}: each document of the
    source is seen w times per epoch on average; include/exclude are globs on paths under the
    entry; span reads bytes [a, b) of each (uncompressed text) file, as fractions of its size.
    Files: text, JSON lines (.jsonl/.ndjson/.json), Parquet, Arrow/Feather (the extra
    packlm[arrow]), a datasets save_to_disk folder; gzip/bz2/xz/zstd compressed (by content)."""
    val_sources: list[Any] | None = None
    """Explicit validation sources (null: `val_fraction` of the documents by content hash);
    exact duplicates of training documents are dropped and counted."""
    val_fraction: float = 0.05
    """Without `val_sources`, this fraction of documents goes to validation by a stable hash
    of the content."""
    text_field: str = "text"
    """The field (JSONL) or column (Parquet, Arrow) holding the text."""
    separator: str | None = None
    """Split each text file into documents on this string (e.g. "\\n\\n"; the escapes \\n \\t
    \\r \\\\ are expanded, also when typed on the command line: data.separator='\\n\\n');
    null: one file, one document."""
    encoding_errors: str = "strict"
    """Non-UTF-8 input: strict (error with path and byte offset), replace (U+FFFD), skip (drop the document)."""
    normalize_newlines: bool = True
    """CRLF and lone CR become LF before a file is split on the separator (the files changed
    are counted in the manifest); false: the bytes as they are."""
    shard: str | None = None
    """Prepare only shard "i/N" (0 <= i < N): the i-th of N contiguous runs of the sources'
    files, balanced by bytes, a cache entry of its own, so N processes or machines sharing
    cache_dir build the shards at once (python -m packlm.prepare -m data.shard=0/4,1/4,...);
    the tokenizer is trained once, on the whole corpus, by the first shard to need it. A run
    given data.shard reads that shard alone."""
    shards: int | None = None
    """Read the corpus as the N stores that data.shard=0/N ... N-1/N built (null: one store):
    one corpus, the same documents, tokens and plans as one store; a missing shard is an
    error naming it (python -m packlm.prepare data.shards=N builds the missing ones)."""

    # --- store -> epoch plan -> samples (packlm.data.epoch.plan) ---
    bos: bool = False
    """Start every document with a BOS token of its own segment (EOS doubling as BOS, as in
    GPT-2), so its first real token is a target: n tokens + EOS give n+1 targets, not n.
    Validation scores the same way (compare bpb between runs with the same setting)."""
    window: int = 128
    """T: input positions per sample; a sample reads T+1 tokens; at most model.context_length."""
    stride: int = 128
    """Distance between window starts; a token is a target window/stride times per epoch on
    average; stride > window leaves gaps (warned, counted)."""
    curriculum: list[Any] | None = None
    """Context-length curriculum: phases [{window: w, stride: s, until: n}, ..., {window: W,
    stride: S}] (stride defaults to the window); a phase ends at the first batch before which
    n supervised tokens (all ranks) were trained, mid-epoch too; the last has no until. The
    last phase's window and stride are the run's data.window/stride (validation uses them); a
    data.window or data.stride other than its default and that phase's is an error."""
    random_offset: bool = True
    """The first window of each sequence starts uniformly in [0, min(stride-1, len-T-1)],
    re-drawn every epoch (false: at 0)."""
    snap: str = "none"
    """Move a window start that is not its sequence's first forward to the next boundary when
    one lies within snap_tolerance tokens (fewer samples start mid-sentence): none, document
    (document starts), paragraph (document starts and paragraph starts: the first text token
    after a blank line, derived from the store's tokens once and cached next to the store).
    A snapped window may end before T+1 tokens at the sequence's end (padded)."""
    snap_tolerance: int = 16
    """Tokens a window start may move forward with data.snap (less than data.stride)."""
    tail: str = "pad"
    """End of a sequence no full window reaches: drop, cover (one window aligned to the end), pad."""
    packing: str = "document"
    """none (a sequence is one document, padded), document (packs with a block-diagonal mask,
    no target across documents), stream (plain causal, EOS predicts the next document)."""
    pack_size: int | None = None
    """Tokens per pack; null: unlimited (the split in epoch order is one sequence); window+1:
    each pack is one padded sample and no document that fits is cut."""
    pack_strategy: str = "ordered"
    """How documents fill packs of data.pack_size: ordered (greedy in epoch order: a pack
    closes when the next document does not fit) or best_fit (best-fit decreasing inside each
    buffer of data.pack_buffer consecutive epoch documents: tighter packs, fewer pads; still
    a pure function of (seed, epoch), documents never cut). Needs data.pack_size."""
    pack_buffer: int = 16384
    """data.pack_strategy=best_fit: how many consecutive documents of the epoch order are
    packed together (with data.group_by a buffer never spans two groups). A buffer should
    hold many packs' worth of tokens: its last pack is partly empty (1024 short documents
    and pack_size 2049 fill worse than ordered packing; 16384 fills within 0.3% of full)."""
    shuffle: bool = True
    """Reshuffle the samples every epoch."""
    shuffle_documents: bool = True
    """Reshuffle the document order before packing every epoch."""
    group_by: str = "none"
    """Keep related documents adjacent before packing: none, source (the data.sources entry),
    directory (the folder of a file: one project's files in one window's context); the groups
    are shuffled among themselves every epoch, documents keep their order inside a group."""
    batch_size: int = 32
    """Samples per batch per rank."""
    num_workers: int = 1
    """DataLoader worker processes per rank (stateless: the sampler sends the document
    pieces of each batch)."""
    seed: int = 1337
    """Seed of the epoch plans: the plan of epoch e is a pure function of (store, data config,
    seed, e)."""

    # --- skipping (packlm.data.skip): the plan unchanged, some of it not trained ---
    skip_documents: list[Any] = field(default_factory=list)
    """Training documents never supervised: store indices (`doc N` in `python -m
    packlm.trace`) or "path:record" / "path" ids as the trace prints them (the store's
    doc_ids, with or without the "source:" prefix); their tokens stay in the windows (the
    plan is unchanged) but every label whose input or target is one of their tokens is -100."""
    skip_steps: list[int] = field(default_factory=list)
    """Optimizer steps whose batches are not trained: the next step's are taken instead
    (the data after moves one step earlier). Numbered as a run without skip_steps logs them
    (its global_step); `python -m packlm.trace` prints this "plan step" of every step."""

    @classmethod
    def _from_config_values(cls, values: dict[str, Any]) -> dict[str, Any]:
        """`data.separator='\\n\\n'` typed on a command line arrives as backslash + n (Hydra does
        not expand escapes), so they are expanded here, once, for every command."""
        if isinstance(values.get("separator"), str):
            values = {**values, "separator": expand_escapes(values["separator"])}
        return values

    def validate(self, model_context: int | None = None) -> DataConfig:
        """Raise ConfigError naming the key of the first invalid value; returns self."""
        if not isinstance(self.sources, (list, tuple)) or len(self.sources) == 0:
            raise ConfigError("data.sources: give at least one source (e.g. [default])")
        for i, entry in enumerate(self.sources):
            _check_source_entry(f"data.sources[{i}]", entry)
        if self.val_sources is not None:
            for i, entry in enumerate(self.val_sources):
                _check_source_entry(f"data.val_sources[{i}]", entry)
        if not 0.0 <= self.val_fraction < 1.0:
            raise ConfigError(f"data.val_fraction={self.val_fraction}: must be in [0, 1)")
        check_choice("data.encoding_errors", self.encoding_errors, ENCODING_ERRORS)
        if self.separator is not None and self.separator == "":
            raise ConfigError("data.separator: must be a non-empty string or null")
        shard = parse_shard(self.shard)
        if self.shards is not None:
            check_positive_int("data.shards", self.shards)
            if shard is not None and shard[1] != self.shards:
                raise ConfigError(
                    f"data.shard={self.shard}: a shard of {shard[1]}, but data.shards={self.shards}"
                )
        if self.curriculum is not None:  # the last phase's window and stride are the run's
            self.window, self.stride = _check_curriculum(self, model_context)
        for key in ("window", "stride", "batch_size"):
            check_positive_int(f"data.{key}", getattr(self, key))
        if not isinstance(self.num_workers, int) or self.num_workers < 0:
            raise ConfigError(f"data.num_workers={self.num_workers}: must be an integer >= 0")
        check_choice("data.packing", self.packing, PACKING_MODES)
        check_choice("data.tail", self.tail, TAIL_POLICIES)
        check_choice("data.group_by", self.group_by, GROUP_BY)
        check_choice("data.snap", self.snap, SNAP_TO)
        if not isinstance(self.snap_tolerance, int) or self.snap_tolerance < 0:
            raise ConfigError(f"data.snap_tolerance={self.snap_tolerance!r}: an integer >= 0")
        if self.snap != "none" and self.snap_tolerance >= self.stride:
            raise ConfigError(
                f"data.snap_tolerance={self.snap_tolerance}: must be less than "
                f"data.stride={self.stride} (a window would pass the next one's start)"
            )
        check_choice("data.pack_strategy", self.pack_strategy, PACK_STRATEGIES)
        _check_skips(self.skip_documents, self.skip_steps)
        buffer = self.pack_buffer
        if not isinstance(buffer, int) or isinstance(buffer, bool) or buffer < 2:
            raise ConfigError(f"data.pack_buffer={buffer!r}: an integer >= 2 (documents)")
        if self.pack_strategy == "best_fit" and (self.pack_size is None or self.packing == "none"):
            raise ConfigError(
                f"data.pack_strategy=best_fit: needs packs to fit (data.pack_size set, it is "
                f"{self.pack_size}, and data.packing document or stream, it is {self.packing})"
            )
        if self.pack_size is not None and self.pack_size < self.window + 1:
            raise ConfigError(
                f"data.pack_size={self.pack_size}: must be at least data.window + 1 = {self.window + 1}"
            )
        if model_context is not None and self.window > model_context:
            raise ConfigError(
                f"data.window={self.window}: longer than the model's context "
                f"(model.context_length={model_context})"
            )
        return self


def parse_shard(value: Any) -> tuple[int, int] | None:
    """data.shard "i/N" -> (i, N), None for null; ConfigError unless 0 <= i < N."""
    if value is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", value) if isinstance(value, str) else None
    if match is None or not int(match[1]) < int(match[2]):
        raise ConfigError(
            f'data.shard={value!r}: expected "i/N", shard i of N with 0 <= i < N (e.g. 0/4)'
        )
    return int(match[1]), int(match[2])


def _check_skips(documents: Any, steps: Any) -> None:
    """data.skip_documents: indices >= 0 or non-empty ids; data.skip_steps: distinct steps >= 0."""
    if not isinstance(documents, (list, tuple)):
        raise ConfigError(f"data.skip_documents={documents!r}: a list of document indices or ids")
    for i, d in enumerate(documents):
        if isinstance(d, bool) or not (isinstance(d, int) and d >= 0 or isinstance(d, str) and d):
            raise ConfigError(
                f"data.skip_documents[{i}]={d!r}: a store document index >= 0 or an id "
                '"path:record" as python -m packlm.trace prints it'
            )
    if not isinstance(steps, (list, tuple)):
        raise ConfigError(f"data.skip_steps={steps!r}: a list of optimizer steps")
    for i, k in enumerate(steps):
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ConfigError(f"data.skip_steps[{i}]={k!r}: an optimizer step >= 0")
    if len(set(steps)) != len(steps):
        twice = sorted({k for k in steps if list(steps).count(k) > 1})
        raise ConfigError(f"data.skip_steps: steps {twice} are listed twice")


def expand_escapes(text: str) -> str:
    r"""Turn the escapes \n, \t, \r and \\ into the characters they name."""
    return re.sub(
        r"\\([ntr\\])", lambda m: {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}[m[1]], text
    )


def source_weight(entry: Any) -> float:
    """The mixing weight of a source entry (1.0 unless given as {path, weight})."""
    if isinstance(entry, dict) or hasattr(entry, "get"):
        return float(entry.get("weight", 1.0))
    return 1.0


def source_path(entry: Any) -> str:
    """The path, glob or "default" of a source entry."""
    if isinstance(entry, str):
        return entry
    return str(entry.get("path"))


def _check_source_entry(key: str, entry: Any) -> None:
    if isinstance(entry, str):
        if not entry:
            raise ConfigError(f"{key}: empty path")
        return
    if hasattr(entry, "get") and hasattr(entry, "keys"):
        unknown = set(entry.keys()) - set(SOURCE_KEYS)
        if unknown:
            raise ConfigError(f"{key}: unknown keys {sorted(unknown)}; allowed {list(SOURCE_KEYS)}")
        if not entry.get("path"):
            raise ConfigError(f"{key}.path: missing")
        for patterns in ("include", "exclude"):
            value = entry.get(patterns)
            if value is not None and (
                isinstance(value, str) or not all(isinstance(p, str) for p in value)
            ):
                raise ConfigError(f"{key}.{patterns}={value!r}: a list of glob patterns")
        span = entry.get("span")
        if span is not None and not (
            len(span) == 2
            and all(isinstance(f, (int, float)) and not isinstance(f, bool) for f in span)
            and 0 <= span[0] < span[1] <= 1
        ):
            raise ConfigError(f"{key}.span={span!r}: two fractions [a, b] with 0 <= a < b <= 1")
        weight = entry.get("weight", 1.0)
        if not isinstance(weight, (int, float)) or isinstance(weight, bool) or weight <= 0:
            raise ConfigError(f"{key}.weight={weight!r}: must be a positive number")
        return
    raise ConfigError(f"{key}={entry!r}: expected a path string or {{path: ..., weight: ...}}")


CURRICULUM_KEYS = ("window", "stride", "until")


def _check_curriculum(cfg: DataConfig, model_context: int | None) -> tuple[int, int]:
    """Check data.curriculum phase by phase, and that data.window/stride do not contradict
    it; returns the last phase's (window, stride)."""
    phases = cfg.curriculum
    if not isinstance(phases, (list, tuple)) or len(phases) == 0:
        raise ConfigError(f"data.curriculum={phases!r}: a list of {{window, stride, until}} phases")
    previous = 0
    for i, phase in enumerate(phases):
        key = f"data.curriculum[{i}]"
        if not (hasattr(phase, "get") and hasattr(phase, "keys")):
            raise ConfigError(f"{key}={phase!r}: expected {{window: ..., stride: ..., until: ...}}")
        unknown = sorted(set(phase.keys()) - set(CURRICULUM_KEYS))
        if unknown:
            raise ConfigError(f"{key}: unknown keys {unknown}; allowed {list(CURRICULUM_KEYS)}")
        window, until = phase.get("window"), phase.get("until")
        stride = phase.get("stride", window)
        check_positive_int(f"{key}.window", window)
        check_positive_int(f"{key}.stride", stride)
        last = i == len(phases) - 1
        if last and until is not None:
            raise ConfigError(f"{key}.until={until!r}: the last phase runs to the end (no until)")
        if not last:
            check_positive_int(f"{key}.until", until)
            if until <= previous:
                raise ConfigError(
                    f"{key}.until={until}: must be greater than the previous phase's ({previous})"
                )
            previous = until
        if model_context is not None and window > model_context:
            raise ConfigError(
                f"{key}.window={window}: longer than the model's context "
                f"(model.context_length={model_context}: it must cover the largest window)"
            )
        if cfg.pack_size is not None and cfg.pack_size < window + 1:
            raise ConfigError(f"{key}.window={window}: data.pack_size={cfg.pack_size} < window + 1")
        tolerance = cfg.snap_tolerance
        if cfg.snap != "none" and isinstance(tolerance, int) and tolerance >= stride:
            raise ConfigError(
                f"{key}.stride={stride}: data.snap_tolerance={tolerance} must be less than it"
            )
    run = {"window": phases[-1]["window"], "stride": phases[-1].get("stride", phases[-1]["window"])}
    for key, value in run.items():  # a window or stride set beside a curriculum would be lost
        given, default = getattr(cfg, key), DataConfig.__dataclass_fields__[key].default
        if given not in (value, default):
            raise ConfigError(
                f"data.{key}={given}: data.curriculum sets the {key} (its last phase: {value});"
                f" change that phase, or set data.curriculum=null to use data.{key}"
            )
    return run["window"], run["stride"]
