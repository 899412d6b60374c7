"""The `data` config group as a dataclass: every key, its default and its help line.

Validation (`data_checks.py`, source entries in `sources.py`) runs before any work starts
and names the offending key, so a bad override fails in milliseconds instead of after the
store was built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from packlm.config.data_checks import check_data
from packlm.config.group import ConfigGroup

__all__ = ["DataConfig"]


@dataclass
class DataConfig(ConfigGroup):
    group: ClassVar[str] = "data"

    # --- sources -> documents (packlm.data.store.sources) ---
    sources: list[Any] = field(default_factory=lambda: ["default"])
    """Entries: "default" (the embedded stdlib corpus), a file, a directory, a glob, or
    {path: ..., weight: w, include: [...], exclude: [...], span: [a, b]}: each document of the
    source is seen w times per epoch on average; or {path: ..., share: s, name: n}: a mixture,
    the fraction s of every global batch's rows from the source (the shares sum to 1; name
    defaults to the path's stem, a glob's to its folder; see data.mixture_schedule);
    include/exclude are globs on paths under the entry; span reads bytes [a, b) of each (uncompressed text) file, as fractions of its size;
    chat: auto (or messages, sharegpt, alpaca, prompt_completion) reads each record as one
    conversation (docs/conversations.md).
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
    files, balanced by bytes (with fewer files than shards, of byte ranges cut between
    records: JSONL lines, data.separator pieces, Parquet row groups, Arrow batches; a
    compressed file is read whole), a cache entry of its own, so N processes or machines
    sharing cache_dir build the shards at once (python -m packlm.prepare -m
    data.shard=0/4,1/4,...); the tokenizer is trained once, on the whole corpus, by the first
    shard to need it. A run given data.shard reads that shard alone."""
    shards: int | None = None
    """Read the corpus as the N stores that data.shard=0/N ... N-1/N built (null: one store):
    one corpus, the same documents, tokens and plans as one store; a missing shard is an
    error naming it (python -m packlm.prepare data.shards=N builds the missing ones)."""

    # --- mixtures by share (packlm.data.epoch.mixture) ---
    mixture_schedule: list[Any] | None = None
    """Shares that change with the optimizer step: [{step: 0, shares: {web: 0.7, code: 0.3}},
    {step: 9000, shares: {web: 0.3, code: 0.7}}] (source names; the first point at step 0,
    steps ascending, each point's shares summing to 1, a source left out has share 0);
    instead of the entries' share. null: the entries' shares, or no mixture. Under a mixture
    each source is read pass after pass (each its own reshuffle and offsets), and an epoch is
    the global batches one pass of every source at its natural size fills."""
    mixture_interpolation: str = "constant"
    """Shares between two data.mixture_schedule points: constant (a point's shares hold until
    the next point) or linear (they move step by step to the next point's)."""
    mixture_change_on_resume: bool = False
    """Let a resume change the shares or schedule (refused by default, naming the key): each
    source then continues where the new schedule, run from step 0, would have it at the resume
    step (exact when only steps after the resume point change; otherwise some rows of a source
    are repeated or left out)."""

    # --- store -> epoch plan -> samples (packlm.data.epoch.plan) ---
    bos: bool = False
    """Start every document with a BOS token of its own segment (EOS doubling as BOS, as in
    GPT-2), so its first real token is a target: n tokens + EOS give n+1 targets, not n.
    Validation scores the same way (compare bpb between runs with the same setting)."""
    chat_supervised: str = "assistant"
    """Conversation sources ({path: ..., chat: auto}, docs/conversations.md): the targets are
    each assistant turn's content and its end-of-turn token (assistant), or every token as
    in plain text (all). Plain-text documents are always supervised. Read at batch time from
    the roles the store keeps, so changing it rebuilds nothing."""
    chat_overflow: str = "cut_turns"
    """A conversation longer than one sample (window+1 tokens, data.pack_size when smaller,
    less the BOS with data.bos): cut_turns (cut between turns into documents that each end
    with a whole assistant turn and fit; turns that fit no piece are dropped) or drop (left
    out whole). Counted in the data summary (tokens in = stored + dropped). Done when the
    store is built, so with conversations the window is part of the store's key. No
    conversation is cut across rows only when a row is one pack (pack_size: window+1, or
    packing: none); docs/conversations.md."""
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
        return check_data(self, model_context)


def expand_escapes(text: str) -> str:
    r"""Turn the escapes \n, \t, \r and \\ into the characters they name."""
    return re.sub(
        r"\\([ntr\\])", lambda m: {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}[m[1]], text
    )
