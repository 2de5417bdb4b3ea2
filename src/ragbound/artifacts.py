"""Plain-file artifacts: atomic writes, checked reads, fingerprints. Nothing is pickled."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, ValidationError

from ragbound.errors import ArtifactError

ModelT = TypeVar("ModelT", bound=BaseModel)


def utc_now() -> str:
    """ISO 8601 UTC timestamp to the second, as recorded in manifests."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def write_atomically(path: Path, write: Any) -> None:
    """Write through ``write(fileobj)`` (a binary file) to a temporary name beside ``path``,
    fsync, then rename: readers see the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    """Atomically write ``obj`` as pretty JSON."""
    data = (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
    write_atomically(path, lambda handle: handle.write(data))


def write_text(path: Path, text: str) -> None:
    """Atomically write ``text`` as UTF-8."""
    data = text.encode("utf-8")
    write_atomically(path, lambda handle: handle.write(data))


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Atomically write one compact JSON object per line."""

    def write(handle: Any) -> None:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False).encode() + b"\n")

    write_atomically(path, write)


def write_npy(path: Path, array: np.ndarray) -> None:
    """Atomically write a ``.npy`` file (no pickle)."""
    write_atomically(path, lambda handle: np.save(handle, array, allow_pickle=False))


def file_stamp(path: Path) -> tuple[int, int] | None:
    """The identity of a file replaced atomically (:func:`write_atomically`): its inode and
    modification time, both new at every commit; None when it is missing."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def read_json(path: Path, what: str) -> Any:
    """Read a JSON artifact; a missing or corrupt file is an ArtifactError naming it."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ArtifactError(f"{what} not found: {path}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{what} {path} is corrupt: {exc}") from exc


def read_manifest(path: Path, model: type[ModelT], fmt: str, what: str) -> ModelT:
    """Read a manifest JSON, check its ``format`` tag, validate it into ``model``."""
    raw: Any = read_json(path, what)
    if not isinstance(raw, dict) or raw.get("format") != fmt:
        found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise ArtifactError(f"{path}: format {found!r} is not {fmt!r}")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise ArtifactError(f"{path} is invalid: {exc}") from exc


def iter_jsonl(path: Path, what: str) -> Iterator[dict[str, Any]]:
    """Yield the objects of a JSONL artifact; a bad line is an ArtifactError with its number."""
    try:
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    yield _parse_line(line, path, number, what)
    except FileNotFoundError as exc:
        raise ArtifactError(f"{what} not found: {path}") from exc
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{what} {path} is corrupt: not UTF-8 ({exc.reason})") from exc


def _parse_line(line: str, path: Path, number: int, what: str) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{what} {path}:{number} is corrupt: {exc}") from exc
    if not isinstance(row, dict):
        raise ArtifactError(f"{what} {path}:{number} is not a JSON object")
    return row


def read_npy(path: Path, what: str, *, mmap: bool = False) -> np.ndarray:
    """Load a ``.npy`` artifact without pickle (memory-mapped read-only if ``mmap``);
    ArtifactError for a missing or corrupt file."""
    try:
        return np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)
    except FileNotFoundError as exc:
        raise ArtifactError(f"{what} not found: {path}") from exc
    except (ValueError, OSError, EOFError) as exc:
        raise ArtifactError(f"{what} {path} is corrupt: {exc}") from exc


def sha256_text(*parts: str) -> str:
    """Hex SHA-256 over parts joined by NUL (no part may be confused with a neighbour)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


# (resolved path, size, mtime in ns) -> hex SHA-256, so a large file is hashed once per change
_digests: dict[tuple[str, int, int], str] = {}
_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes, cached by (path, size, modification time): read again
    only when it changes (a change within the same nanosecond and size is not seen in-process)."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    cached = _digests.get(key)
    if cached is not None:
        return cached
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    _digests[key] = digest.hexdigest()
    return _digests[key]


def check_sha256(path: Path, expected: str | None, what: str) -> None:
    """ArtifactError naming ``path`` if its SHA-256 is not ``expected`` (None: not recorded):
    the file changed after the manifest committed it, and its numbers must not be used."""
    if expected is None:
        return
    try:
        actual = file_sha256(path)
    except FileNotFoundError as exc:
        raise ArtifactError(f"{what} not found: {path}") from exc
    if actual != expected:
        raise ArtifactError(
            f"{what} {path} is damaged: its SHA-256 is {actual[:12]}..., the manifest that "
            f"committed it says {expected[:12]}...; restore it or rebuild"
        )
