"""The token store: one split's documents as a flat memory-mapped array of token ids.

The files of a store directory are named in `layout.py`.

Opening is O(1) in the store size (memmaps); a store is written into a temporary directory
and renamed into place only when complete, so a reader never sees a partial one. Opening
checks the manifest itself (its checksum, and its counts against the files' sizes and the
offsets), so an edited manifest is a StoreError, which the cache turns into a rebuild.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from packlm.cache.entry import replace_dir, temporary_sibling
from packlm.data.store.layout import (
    DATA_FILES,
    FORMAT_VERSION,
    IDS_FILE,
    MANIFEST_FILE,
    OFFSETS_FILE,
    ROLES_FILE,
    SOURCES_FILE,
    TOKENS_FILE,
    StoreError,
    token_dtype,
    write_npy,
)


class TokenStore:
    """A read-only view of one split: `tokens` and `doc_offsets` are memmaps."""

    def __init__(self, path: Path, manifest: dict[str, Any]):
        self.path = Path(path)
        self.manifest = manifest
        dtype = np.dtype(manifest["dtype"])
        n_tokens = manifest["counts"]["tokens"]
        self.tokens = (
            np.memmap(self.path / TOKENS_FILE, dtype=dtype, mode="r", shape=(n_tokens,))
            if n_tokens > 0
            else np.zeros(0, dtype=dtype)
        )
        self.doc_offsets: np.ndarray = np.load(self.path / OFFSETS_FILE, mmap_mode="r")
        self.doc_sources: np.ndarray = np.load(self.path / SOURCES_FILE, mmap_mode="r")
        self.roles: np.ndarray | None = None
        """uint8 [n_tokens]: each token's chat role code (`packlm.tokenizer.chat`); None: a
        store of plain text only."""
        if ROLES_FILE in manifest.get("files", {}):
            self.roles = (np.memmap(self.path / ROLES_FILE, dtype=np.uint8, mode="r",
                                    shape=(n_tokens,)) if n_tokens > 0 else np.zeros(0, np.uint8))  # fmt: skip
        self._doc_ids: list[str] | None = None

    @classmethod
    def open(cls, path: str | os.PathLike) -> TokenStore:
        """Open a complete store; raise StoreError if anything is missing or truncated."""
        path = Path(path)
        manifest_path = path / MANIFEST_FILE
        if not manifest_path.is_file():
            raise StoreError(f"{path}: no {MANIFEST_FILE}; not a complete token store")
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise StoreError(f"{manifest_path}: corrupt manifest ({e})") from e
        if not isinstance(manifest, dict):
            raise StoreError(f"{manifest_path}: corrupt manifest (JSON {type(manifest).__name__}, "
                             "not an object)")  # fmt: skip
        if manifest.get("format_version") != FORMAT_VERSION:
            raise StoreError(
                f"{manifest_path}: format_version {manifest.get('format_version')!r}, "
                f"expected {FORMAT_VERSION}"
            )
        from packlm.data.store.verify import (  # verify reads this module's file layout
            verify_checksums,
            verify_files,
            verify_manifest,
            verify_offsets,
        )

        problem = verify_manifest(path, manifest) or verify_files(path, manifest)
        if problem:
            raise StoreError(problem)
        roles = manifest.get("files", {}).get(ROLES_FILE)
        if roles is not None and roles != manifest["counts"]["tokens"]:
            raise StoreError(f"{path / ROLES_FILE}: {roles} bytes, not one per token "
                             f"({manifest['counts']['tokens']})")  # fmt: skip
        try:  # same sizes, other bytes: an .npy header numpy cannot read
            store = cls(path, manifest)
        except ValueError as e:
            raise StoreError(
                verify_checksums(path, manifest, (OFFSETS_FILE, SOURCES_FILE))
                or f"{path}: unreadable store file ({e})"
            ) from None
        problem = verify_offsets(path, manifest, store)
        if problem:  # say the file changed when its checksum says so: the precise cause
            raise StoreError(
                verify_checksums(path, manifest, (OFFSETS_FILE, SOURCES_FILE)) or problem
            )
        return store

    @property
    def n_docs(self) -> int:
        return len(self.doc_offsets) - 1

    @property
    def n_tokens(self) -> int:
        return int(self.doc_offsets[-1])

    @property
    def doc_lengths(self) -> np.ndarray:
        """int64 [n_docs]: tokens per document, EOS included."""
        return np.diff(self.doc_offsets)

    @property
    def source_names(self) -> list[str]:
        return [s["name"] for s in self.manifest["sources"]]

    @property
    def eos_id(self) -> int:
        return int(self.manifest["eos_id"])

    @property
    def pad_id(self) -> int:
        return int(self.manifest["pad_id"])

    def document(self, d: int) -> np.ndarray:
        """Token ids of document d (a memmap slice, no copy), EOS included."""
        return self.tokens[self.doc_offsets[d] : self.doc_offsets[d + 1]]

    def paragraph_starts(self, tokenizer: Any) -> np.ndarray:
        """Sorted store positions of the paragraph starts (`packlm.data.store.paragraphs`),
        from a packlm Tokenizer or a list of bytes per id; cached in the store directory."""
        from packlm.data.store.paragraphs import cached_paragraph_starts, token_table

        table = tokenizer if isinstance(tokenizer, (list, tuple)) else token_table(tokenizer)
        return cached_paragraph_starts(self, table)

    def doc_id(self, d: int) -> str:
        """The stable id of document d (loaded on first use)."""
        if self._doc_ids is None:
            self._doc_ids = (self.path / IDS_FILE).read_text(encoding="utf-8").split("\n")[:-1]
        return self._doc_ids[d]


class StoreWriter:
    """Append documents, then `finish(manifest)`: written under a temporary name, then renamed.

    Nothing at `path` changes until `finish` succeeds; `abort` (or an exception inside a
    `with` block) removes the temporary directory.
    """

    def __init__(self, path: str | os.PathLike, vocab_size: int):
        self.path = Path(path)
        self.dtype = token_dtype(vocab_size)
        self.vocab_size = vocab_size
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = temporary_sibling(self.path)
        self.tmp.mkdir()
        self._tokens = open(self.tmp / TOKENS_FILE, "wb")  # noqa: SIM115 (closed in finish/abort)
        self._ids = open(self.tmp / IDS_FILE, "w", encoding="utf-8")  # noqa: SIM115
        # Per-document arrays grow as numpy chunks (12 bytes a document), not Python ints.
        self._offsets: list[np.ndarray] = [np.zeros(1, dtype=np.int64)]
        self._sources: list[np.ndarray] = []
        self._n_docs = 0
        self._n_tokens = 0
        self._roles = None  # opened at the first conversation (a plain-text store has none)
        self._role_counts = np.zeros(256, dtype=np.int64)

    @property
    def n_docs(self) -> int:
        return self._n_docs

    @property
    def n_tokens(self) -> int:
        return self._n_tokens

    def add(self, ids: np.ndarray, doc_id: str, source_index: int = 0) -> None:
        """Append one document's ids (EOS already included)."""
        ids = np.asarray(ids)
        self.add_many(ids, np.array([ids.size]), [doc_id], np.array([source_index]))

    def add_many(
        self, ids: np.ndarray, lengths: np.ndarray, doc_ids: list[str], sources: np.ndarray,
        roles: np.ndarray | None = None,
    ) -> None:  # fmt: skip
        """Append a batch of documents given as one flat array plus per-document lengths, and
        with conversations among them a role code per id (None: plain text, codes 0)."""
        ids = np.asarray(ids)
        if ids.size and int(ids.max()) >= self.vocab_size:
            raise StoreError(
                f"batch starting {doc_ids[0]!r}: id {int(ids.max())} >= vocab {self.vocab_size}"
            )
        lengths = np.asarray(lengths, dtype=np.int64)
        if int(lengths.sum()) != ids.size or len(doc_ids) != len(lengths):
            raise StoreError(f"batch starting {doc_ids[0]!r}: lengths do not match ids or doc_ids")
        if roles is not None and len(roles) != ids.size:
            raise StoreError(f"batch starting {doc_ids[0]!r}: role codes do not match ids")
        self._write_roles(roles, ids.size)
        self._tokens.write(ids.astype(self.dtype, copy=False).tobytes())
        self._offsets.append(self._n_tokens + np.cumsum(lengths))
        self._sources.append(np.asarray(sources, dtype=np.int32))
        self._ids.write("".join(d.replace("\n", " ") + "\n" for d in doc_ids))
        self._n_docs += len(lengths)
        self._n_tokens += int(ids.size)

    def _write_roles(self, roles: np.ndarray | None, n: int) -> None:
        """The role codes of the next n ids; the file starts at the first conversation, with
        codes 0 (plain text) for every id before it."""
        if roles is None and self._roles is None:
            return
        if self._roles is None:
            self._roles = open(self.tmp / ROLES_FILE, "wb")  # noqa: SIM115 (closed in finish/abort)
            for start in range(0, self._n_tokens, 1 << 24):
                self._roles.write(bytes(min(1 << 24, self._n_tokens - start)))
            self._role_counts[0] += self._n_tokens
        if roles is None:
            self._roles.write(bytes(n))
            self._role_counts[0] += n
        else:
            roles = np.asarray(roles, dtype=np.uint8)
            self._roles.write(roles.tobytes())
            self._role_counts += np.bincount(roles, minlength=256)

    def finish(self, manifest: dict[str, Any]) -> TokenStore:
        """Write offsets and manifest, fsync, and atomically move the store into place."""
        self._tokens.flush()
        os.fsync(self._tokens.fileno())
        self._tokens.close()
        self._ids.close()
        files = DATA_FILES
        if self._roles is not None:
            self._roles.flush()
            os.fsync(self._roles.fileno())
            self._roles.close()
            files = (*DATA_FILES, ROLES_FILE)
        write_npy(self.tmp / OFFSETS_FILE, np.concatenate(self._offsets))
        write_npy(self.tmp / SOURCES_FILE, np.concatenate([np.zeros(0, np.int32), *self._sources]))
        manifest = dict(manifest)
        manifest["format_version"] = FORMAT_VERSION
        manifest["dtype"] = self.dtype.name
        manifest["vocab_size"] = self.vocab_size
        counts = dict(manifest.get("counts", {}))
        counts["documents"] = self._n_docs
        counts["tokens"] = self._n_tokens
        if self._roles is not None:  # tokens per role code, by name
            from packlm.tokenizer.chat import CODE_NAMES

            counts["roles"] = {n: int(self._role_counts[c]) for c, n in enumerate(CODE_NAMES)}
        manifest["counts"] = counts
        manifest["files"] = {name: (self.tmp / name).stat().st_size for name in files}
        from packlm.data.store.verify import file_checksum, manifest_checksum

        manifest["checksums"] = {name: file_checksum(self.tmp / name) for name in files}
        manifest["manifest_checksum"] = manifest_checksum(manifest)
        tmp_manifest = self.tmp / MANIFEST_FILE
        tmp_manifest.write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")
        replace_dir(self.tmp, self.path)
        return TokenStore.open(self.path)

    def abort(self) -> None:
        for f in (self._tokens, self._ids, self._roles):
            if f is not None and not f.closed:
                f.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()


def write_store(
    path: str | os.PathLike,
    documents: list[np.ndarray],
    vocab_size: int,
    eos_id: int,
    pad_id: int,
    doc_ids: list[str] | None = None,
    doc_sources: list[int] | None = None,
    source_names: list[str] | None = None,
    roles: list[np.ndarray | None] | None = None,
) -> TokenStore:
    """Write a store from in-memory token arrays (EOS included), with `roles` a role code per
    token of each conversation (None: plain text); for tests and small tools."""
    source_names = source_names or ["memory"]
    with StoreWriter(path, vocab_size) as writer:
        for d, ids in enumerate(documents):
            ids = np.asarray(ids)
            writer.add_many(
                ids,
                np.array([ids.size]),
                [doc_ids[d] if doc_ids else f"memory:{d}"],
                np.array([doc_sources[d] if doc_sources else 0]),
                None if roles is None else roles[d],
            )
        return writer.finish(
            {
                "eos_id": eos_id,
                "pad_id": pad_id,
                "sources": [{"name": n} for n in source_names],
                "fingerprint": {"kind": "memory"},
                "counts": {},
            }
        )
