"""Chunks kept compactly: a read-only ``Sequence[Chunk]`` that builds a ``Chunk`` only when asked.

A million pydantic chunks (about 2 KB each with their text) would be most of the memory a
check process needs; instead each segment's chunk file stays on disk, checked once when opened,
kept open (a writer removing it later changes nothing here) and read by byte offset: 16 bytes
a chunk. :class:`ChunkSequence` puts chunk files and lists one after the other and behaves like
a list of the same chunks. Segment files are append-only (:mod:`ragbound.knowledge`), so rows
read later are the rows checked when the file was opened.
"""

from __future__ import annotations

import json
import os
from abc import abstractmethod
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any, overload

import numpy as np
from pydantic import ValidationError

from ragbound.corpus.models import Chunk
from ragbound.errors import ArtifactError

_READ_BYTES = 1 << 22  # bytes read at a time when scanning or iterating a chunk file


class _OpenFile:
    """A read-only file descriptor closed when the last reader lets it go."""

    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_RDONLY)

    def read(self, start: int, stop: int) -> bytes:
        return os.pread(self.fd, stop - start, start)

    def __del__(self) -> None:
        fd, self.fd = getattr(self, "fd", -1), -1  # -1: the open itself failed
        if fd >= 0:
            os.close(fd)


class _Rows(Sequence[Chunk]):
    """Indexing shared by the lazy sequences: ``seq[i]`` reads one chunk (``_chunk``), a
    slice with step 1 is a window sharing the storage (``_window``), other slices a list."""

    @overload
    def __getitem__(self, index: int) -> Chunk: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Chunk]: ...
    def __getitem__(self, index: int | slice) -> Chunk | Sequence[Chunk]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            return self._window(start, max(start, stop))
        return self._chunk(_row(index, len(self)))

    @abstractmethod
    def _chunk(self, row: int) -> Chunk:
        """Row ``row`` (in range) read and parsed."""

    @abstractmethod
    def _window(self, start: int, stop: int) -> Sequence[Chunk]:
        """Rows [start, stop) sharing this sequence's storage."""


class ChunkFile(_Rows):
    """The rows of one JSONL chunk file (one chunk a line, blank lines skipped), read by offset.

    Open it with :meth:`open`, which checks every row (the errors name the file and line);
    ``chunk_file[i]`` reads and parses row ``i`` again. Slices give windows sharing the file.
    """

    def __init__(self, path: Path, handle: _OpenFile, starts: np.ndarray, stops: np.ndarray):
        self.path = path
        self._handle = handle
        self._starts, self._stops = starts, stops

    @classmethod
    def open(cls, path: Path, on_chunk: Callable[[Chunk], None] | None = None) -> ChunkFile:
        """Open ``path`` and check each row is a valid chunk; ``on_chunk`` sees each in order
        (e.g. to hash the ids). ArtifactError naming the file (and line) when it is not."""
        try:
            handle = _OpenFile(path)
        except FileNotFoundError as exc:
            raise ArtifactError(f"chunk file not found: {path}") from exc
        starts, stops = array("q"), array("q")
        for number, start, line in _lines(handle):
            if not line.strip():
                continue
            chunk = _parse(line, path, number)
            if on_chunk is not None:
                on_chunk(chunk)
            starts.append(start)
            stops.append(start + len(line))
        return cls(path, handle, np.frombuffer(starts, np.int64), np.frombuffer(stops, np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes this process holds for the rows (their offsets), whatever their text."""
        return int(self._starts.nbytes + self._stops.nbytes)

    def __len__(self) -> int:
        return len(self._starts)

    def _window(self, start: int, stop: int) -> ChunkFile:
        rows = slice(start, stop)
        return ChunkFile(self.path, self._handle, self._starts[rows], self._stops[rows])

    def _chunk(self, row: int) -> Chunk:
        line = self._handle.read(int(self._starts[row]), int(self._stops[row]))
        return Chunk.model_validate_json(line)

    def __iter__(self) -> Iterator[Chunk]:
        """Every row in order, reading about ``_READ_BYTES`` at a time."""
        first = 0
        while first < len(self):
            base = int(self._starts[first])
            limit = base + _READ_BYTES
            last = max(first + 1, int(np.searchsorted(self._stops, limit, side="right")))
            data = self._handle.read(base, int(self._stops[last - 1]))
            for start, stop in zip(self._starts[first:last], self._stops[first:last], strict=True):
                yield Chunk.model_validate_json(data[int(start) - base : int(stop) - base])
            first = last


def _lines(handle: _OpenFile) -> Iterator[tuple[int, int, bytes]]:
    """(line number from 1, byte offset, line without its newline) of a whole file."""
    offset, number, pending = 0, 0, b""
    while True:
        block = os.read(handle.fd, _READ_BYTES)
        if not block:
            break
        *whole, pending = (pending + block).split(b"\n")
        for line in whole:
            number += 1
            yield number, offset, line
            offset += len(line) + 1
    if pending:
        yield number + 1, offset, pending


def _parse(line: bytes, path: Path, number: int) -> Chunk:
    """One row as a Chunk; a row that is not one is an ArtifactError naming path and line."""
    try:
        return Chunk.model_validate_json(line)
    except ValidationError:
        pass  # find out why, for the message
    try:
        row: Any = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"chunk file {path} is corrupt: not UTF-8 ({exc.reason})") from exc
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"chunk file {path}:{number} is corrupt: {exc}") from exc
    if not isinstance(row, dict):
        raise ArtifactError(f"chunk file {path}:{number} is not a JSON object")
    try:
        return Chunk.model_validate(row)
    except ValidationError as exc:
        raise ArtifactError(f"chunk file {path}:{number} is invalid: {exc}") from exc


def _row(index: int, length: int) -> int:
    """``index`` (negative counts from the end) as a row, IndexError when out of range."""
    row = int(index) + length if int(index) < 0 else int(index)
    if not 0 <= row < length:
        raise IndexError(f"chunk index {index} out of range for {length} chunks")
    return row


class ChunkSequence(_Rows):
    """Read-only chunks from several parts one after the other (see the module doc)."""

    def __init__(self, parts: Iterable[Sequence[Chunk]]):
        self._parts: tuple[Sequence[Chunk], ...] = tuple(p for p in parts if len(p))
        self._ends = np.cumsum([len(p) for p in self._parts], dtype=np.int64)

    @property
    def parts(self) -> tuple[Sequence[Chunk], ...]:
        return self._parts

    @property
    def nbytes(self) -> int:
        """Bytes held for rows kept on disk (their offsets); in-memory parts count 0 here."""
        return sum(p.nbytes for p in self._parts if isinstance(p, ChunkFile | ChunkSequence))

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def _chunk(self, row: int) -> Chunk:
        part = int(np.searchsorted(self._ends, row, side="right"))
        return self._parts[part][row - self._first(part)]

    def _first(self, part: int) -> int:
        return int(self._ends[part - 1]) if part else 0

    def _window(self, start: int, stop: int) -> ChunkSequence:
        """Rows [start, stop) as a sequence sharing the parts (nothing copied)."""
        pieces = []
        for number, part in enumerate(self._parts):
            first = self._first(number)
            lo, hi = max(start - first, 0), min(stop - first, len(part))
            if lo < hi:
                pieces.append(part if (lo, hi) == (0, len(part)) else _slice(part, lo, hi))
        return ChunkSequence(pieces)

    def __iter__(self) -> Iterator[Chunk]:
        for part in self._parts:
            yield from part

    def __add__(self, other: Sequence[Chunk]) -> ChunkSequence:
        if not isinstance(other, Sequence):
            return NotImplemented
        return ChunkSequence([*self._parts, *_parts_of(other)])

    def __radd__(self, other: Sequence[Chunk]) -> ChunkSequence:
        if not isinstance(other, Sequence):
            return NotImplemented
        return ChunkSequence([*_parts_of(other), *self._parts])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # compared by content, like a list

    def __repr__(self) -> str:
        return f"ChunkSequence({len(self)} chunks in {len(self._parts)} parts)"


def _parts_of(chunks: Sequence[Chunk]) -> tuple[Sequence[Chunk], ...]:
    return chunks.parts if isinstance(chunks, ChunkSequence) else (chunks,)


def _slice(part: Sequence[Chunk], lo: int, hi: int) -> Sequence[Chunk]:
    """Rows [lo, hi) of a part: a window for chunk files, a (pointer) copy for lists, and for
    any other sequence a window that reads it row by row."""
    if isinstance(part, ChunkFile | list | tuple):
        return part[lo:hi]
    return _Window(part, lo, hi)


class _Window(_Rows):
    """Rows [lo, hi) of a sequence that cannot slice itself cheaply."""

    def __init__(self, base: Sequence[Chunk], lo: int, hi: int):
        self._base, self._lo, self._hi = base, lo, hi

    def __len__(self) -> int:
        return self._hi - self._lo

    def _chunk(self, row: int) -> Chunk:
        return self._base[self._lo + row]

    def _window(self, start: int, stop: int) -> _Window:
        return _Window(self._base, self._lo + start, self._lo + stop)

    def __iter__(self) -> Iterator[Chunk]:
        return islice(iter(self._base), self._lo, self._hi)
