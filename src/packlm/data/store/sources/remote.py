"""Sources in object storage: an fsspec URL (s3://, gs://, hf://, https://) listed and read
through fsspec, so every format a local file may have (text, JSONL, Parquet, compressed)
reads the same.

- Listing (`list_objects`): one object, a prefix (every object under it but hidden ones) or
  a glob, with include/exclude as for a directory. Each object is identified by its URL,
  size and version (the listing's VersionId / generation / ETag, never a time), which is
  what the fingerprint holds: a changed object gives a new store, an unchanged one is reused.
- Reading (`RemoteFile.open`): streamed in blocks through the filesystem's range reads (no
  local copy); a transient error (a dropped connection, a timeout) reopens the object at the
  offset reached, up to `RETRIES` times, each logged.
- Credentials are the filesystem's own (for S3: AWS_* environment variables, AWS_PROFILE and
  the profile files, AWS_ENDPOINT_URL for an S3-compatible server); packlm never sees them,
  so no config, log or checkpoint can hold them. A URL carrying a user or password part, or a
  token, key or signature (a presigned URL) is refused (`packlm.config.credentials`):
  data.sources is saved with the run.
"""

from __future__ import annotations

import io
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from packlm.config import credentials
from packlm.data.store.sources.document import SourceError

log = logging.getLogger(__name__)

URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "hf": "hf"}
"""Scheme -> the packlm extra installing its filesystem (any other scheme: "remote")."""
VERSION_FIELDS = ("VersionId", "generation", "ETag", "etag", "md5Hash", "blob_id")
"""Listing fields naming an object's version, best first (S3, GCS, HTTP, the HF hub)."""
FALLBACK_FIELDS = ("Last-Modified", "mtime")
"""Used only where a filesystem lists none of VERSION_FIELDS (a web server without ETag)."""
RETRIES = 4
BACKOFF_S = 0.2
FIRST_READ, BLOCK = 1 << 16, 1 << 23
"""Range reads grow from FIRST_READ (what sniffing a format needs) to BLOCK bytes (the
memory per open object, not the object's size)."""


def is_url(name: str) -> bool:
    return bool(URL.match(name))


def filesystem(url: str, key: str) -> tuple[Any, str]:
    """(fsspec filesystem, path in it) of `url`; SourceError naming the extra to install."""
    scheme = url.split("://", 1)[0].lower()
    extra = EXTRAS.get(scheme, "remote")
    install = f'pip install -e ".[{extra}]"'
    credentials.check_text(key, url)  # the precheck refused it already; train(cfg) too
    try:
        import fsspec
    except ImportError:
        raise SourceError(f"{key}={url!r}: reading URLs needs fsspec ({install})") from None
    try:
        fs, path = fsspec.url_to_fs(url, skip_instance_cache=True)  # a fresh listing each run
    except ImportError as e:
        raise SourceError(f"{key}={url!r}: {scheme}:// needs its extra ({install}): {e}") from None
    except ValueError as e:  # an unknown protocol
        raise SourceError(f"{key}={url!r}: {e}") from None
    return fs, path


def list_objects(url: str, key: str, selected: Callable[[str], bool]) -> list[RemoteFile]:
    """The objects of `url` (an object, a prefix or a glob) whose path relative to it is
    `selected`, sorted, hidden names skipped; SourceError for a missing bucket or object,
    denied access or an unreachable endpoint."""
    fs, path = filesystem(url, key)
    base = re.split(r"[*?\[]", path, maxsplit=1)[0].rsplit("/", 1)[0] if _glob(path) else path
    try:
        if _glob(path):
            infos = fs.glob(path, detail=True)
            if not infos:
                fs.info(base)  # nothing matched: a missing bucket or prefix says so here
        else:
            info = fs.info(path)
            infos = {path: info} if info.get("type") == "file" else fs.find(path, detail=True)
    except Exception as e:  # noqa: BLE001 (each filesystem raises its own; all are one line)
        raise SourceError(f"{key}={url!r}: cannot list it ({_reason(e)})") from None
    objects = []
    for name, info in sorted(infos.items()):
        rel = name[len(base) :].lstrip("/") if name.startswith(base) else name
        hidden = any(part.startswith(".") for part in rel.split("/"))
        if info.get("type", "file") != "file" or hidden or not selected(rel):
            continue
        if info.get("size") is None:
            raise SourceError(f"{key}={url!r}: {name} has no size in the listing (no "
                              "Content-Length); packlm reads objects of a known size")  # fmt: skip
        objects.append(RemoteFile(fs.unstrip_protocol(name), name, int(info["size"]),
                                  _version(info), fs))  # fmt: skip
    if any(not o.version for o in objects):
        log.warning("%s: the listing gives no version (ETag) of its objects: a change that "
                    "keeps an object's size will not be seen", url)  # fmt: skip
    return objects


@dataclass(frozen=True)
class RemoteFile:
    """One listed object: what a local `Path` is to the readers (`name`, `as_posix`, `str`)."""

    url: str
    path: str
    """The object's path in `fs` (the URL without its scheme)."""
    size: int
    version: str
    fs: Any = field(compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def as_posix(self) -> str:
        return self.url

    def __str__(self) -> str:
        return self.url

    def stat(self) -> tuple[str, int, str]:
        """(URL, size, version) as the object is now (what `file_stat` gives for a file)."""
        try:
            info = self.fs.info(self.path)
        except Exception as e:  # noqa: BLE001
            raise SourceError(f"{self.url}: cannot read ({_reason(e)})") from None
        return self.url, int(info["size"]), _version(info)

    def open(self) -> BinaryIO:
        """A buffered, seekable stream of the object's bytes, retrying transient errors."""
        return io.BufferedReader(_RetryingReader(self), buffer_size=BLOCK)


class _RetryingReader(io.RawIOBase):
    """The object's bytes; a transient error reopens it at the offset reached (bounded)."""

    def __init__(self, obj: RemoteFile):
        self.obj, self.pos, self._f, self._next = obj, 0, None, FIRST_READ
        self._call(lambda f: None)  # open now: a missing object fails here

    def _open(self) -> Any:
        # no cache of fsspec's: each read is one range request, the BufferedReader buffers
        f = self.obj.fs.open(self.obj.path, "rb", block_size=BLOCK, cache_type="none")
        f.seek(self.pos)
        return f

    def _call(self, act):
        for attempt in range(RETRIES + 1):
            try:
                if self._f is None:
                    self._f = self._open()
                return act(self._f)
            except Exception as e:  # noqa: BLE001
                if not _transient(e) or attempt == RETRIES:
                    raise SourceError(
                        f"{self.obj.url}: cannot read at byte {self.pos:,}"
                        + (f" after {attempt + 1} tries" if attempt else "")
                        + f" ({_reason(e)})"
                    ) from None
                log.warning("%s: %s at byte %d; retrying (%d of %d)",
                            self.obj.url, _reason(e), self.pos, attempt + 1, RETRIES)  # fmt: skip
                self._drop()
                time.sleep(BACKOFF_S * 2**attempt)

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self._next)
        self._next = min(self._next * 4, BLOCK)
        data = self._call(lambda f: f.read(n))
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.obj.size}[whence]
        self.pos, self._next = max(0, base + offset), FIRST_READ
        self._call(lambda f: f.seek(self.pos))
        return self.pos

    def tell(self) -> int:
        return self.pos

    def _drop(self) -> None:
        f, self._f = self._f, None
        if f is not None:
            try:
                f.close()
            except Exception:  # noqa: BLE001 (a broken connection may fail to close too)
                log.debug("closing %s after an error failed", self.obj.url, exc_info=True)

    def close(self) -> None:
        self._drop()
        super().close()


def _transient(e: BaseException) -> bool:
    """A dropped connection or a timeout, worth reopening for; not a missing object, denied
    access or an object that changed (fsspec's FileExpired) mid-read."""
    if isinstance(e, FileNotFoundError | PermissionError | IsADirectoryError):
        return False
    if type(e).__name__ == "FileExpired":
        return False
    names = {c.__module__.split(".")[0] for c in type(e).__mro__}
    return isinstance(e, OSError | EOFError | TimeoutError) or bool(
        names & {"aiohttp", "botocore", "urllib3", "requests"}
    )


def _version(info: dict[str, Any]) -> str:
    for name in VERSION_FIELDS + FALLBACK_FIELDS:
        if info.get(name) not in (None, ""):
            return f"{name}={str(info[name]).strip(chr(34))}"
    return ""


def _reason(e: BaseException) -> str:
    """One line: the exception's message, or its class name where it has none."""
    text = " ".join(str(e).split()) or type(e).__name__
    if isinstance(e, FileNotFoundError) and " " not in text:  # fsspec's message is the path
        text = f"no such object or prefix {text}"
    if isinstance(e, PermissionError):
        text += "; check the credentials (for S3: AWS_ACCESS_KEY_ID / AWS_PROFILE)"
    elif "connect" in text.lower() and "endpoint" in text.lower():
        text += "; is the endpoint (AWS_ENDPOINT_URL) reachable?"
    return text


def _glob(path: str) -> bool:
    return any(c in path for c in "*?[")
