"""Load documents from .txt, .md, .jsonl, .json and .csv files and folders of them.

Document ids and sources depend only on paths relative to the folder argument (or on the file
name of a file passed directly), never on where the corpus lives on disk, so the same corpus
gives the same ids on every machine.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ragbound.corpus._files import (
    csv_rows,
    field_list,
    json_kind,
    jsonl_lines,
    parse_json,
    read_utf8,
)
from ragbound.corpus.models import Document
from ragbound.errors import InputError, where

SUPPORTED_EXTENSIONS: frozenset[str] = frozenset({".txt", ".md", ".jsonl", ".json", ".csv"})
"""File extensions the loader reads (compared case-insensitively)."""


class LoadReport(BaseModel):
    """What a load read and what it left out.

    ``files`` lists the files read, in load order. ``skipped_empty`` gives the location
    (``file``, ``file:line`` or ``file[index]``) of every record whose text was empty or
    whitespace only. ``skipped_files`` lists files inside folders whose extension is not
    supported, and hidden files and folders are not listed at all.
    """

    model_config = ConfigDict(frozen=True)

    files: list[str] = Field(default_factory=list)
    n_documents: int = 0
    skipped_empty: list[str] = Field(default_factory=list)
    skipped_files: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class _FileRef:
    """A file to load: where it is, its stable source name and its name in messages."""

    path: Path
    source: str
    display: str


@dataclass(frozen=True)
class _Raw:
    """A record before it becomes a Document: its location, id, text and metadata."""

    location: str
    id: str
    text: str
    metadata: dict[str, Any]


def load_documents(
    paths: Sequence[str | Path] | str | Path,
    *,
    text_field: str = "text",
    id_field: str | None = None,
) -> list[Document]:
    """Load the documents of files and folders; see :func:`load_documents_with_report`.

    >>> docs = load_documents(["corpus/"])  # doctest: +SKIP
    """
    documents, _ = load_documents_with_report(paths, text_field=text_field, id_field=id_field)
    return documents


def load_documents_with_report(
    paths: Sequence[str | Path] | str | Path,
    *,
    text_field: str = "text",
    id_field: str | None = None,
) -> tuple[list[Document], LoadReport]:
    """Load documents and report what was skipped.

    Each path is a file or a folder. Folders are walked recursively in order of relative
    path; hidden files and folders and files with unsupported extensions are skipped. A
    ``.txt``/``.md`` file is one document whose id is its source. A ``.jsonl`` line, an element
    of a ``.json`` list or a ``.csv`` row is one record: its text is ``text_field``, its id
    ``id_field`` (as a string) or ``"{source}:{line}"`` (``"{source}:{index}"`` for .json), and
    its other fields become the metadata. Empty texts are skipped and listed in the report.

    Raises InputError for a missing path, an unsupported file named directly, a file that is
    not UTF-8 or not valid JSON/CSV, a record without a string text field, duplicate document
    ids, and a corpus that yields no documents.
    """
    path_list = _as_path_list(paths)
    refs, skipped_files = _collect_files(path_list)
    documents: list[Document] = []
    seen: dict[str, str] = {}
    skipped_empty: list[str] = []
    for ref in refs:
        for raw in _read_records(ref, text_field, id_field):
            if not raw.text.strip():
                skipped_empty.append(raw.location)
                continue
            if raw.id in seen:
                raise InputError(
                    f"duplicate document id {raw.id!r}: at {seen[raw.id]} and at {raw.location}"
                )
            seen[raw.id] = raw.location
            documents.append(
                Document(id=raw.id, text=raw.text, source=ref.source, metadata=raw.metadata)
            )
    if not documents:
        raise InputError(_no_documents_message(path_list, skipped_empty, skipped_files))
    report = LoadReport(
        files=[ref.display for ref in refs],
        n_documents=len(documents),
        skipped_empty=skipped_empty,
        skipped_files=skipped_files,
    )
    return documents, report


def _as_path_list(paths: Sequence[str | Path] | str | Path) -> list[Path]:
    """Accept one path or a sequence of paths; refuse an empty sequence."""
    if isinstance(paths, str | Path):
        return [Path(paths)]
    path_list = [Path(path) for path in paths]
    if not path_list:
        raise InputError("no corpus paths given; pass at least one file or folder")
    return path_list


def _no_documents_message(paths: list[Path], empty: list[str], unsupported: list[str]) -> str:
    """Explain why a load found nothing."""
    message = f"no documents found in {', '.join(str(path) for path in paths)}"
    notes = []
    if empty:
        notes.append(f"{len(empty)} empty record(s) skipped")
    if unsupported:
        notes.append(f"{len(unsupported)} file(s) with unsupported extensions skipped")
    notes.append(f"supported extensions: {', '.join(sorted(SUPPORTED_EXTENSIONS))}")
    return f"{message} ({'; '.join(notes)})"


def _collect_files(paths: list[Path]) -> tuple[list[_FileRef], list[str]]:
    """Expand the path arguments into the files to read, and the unsupported files skipped."""
    refs: list[_FileRef] = []
    skipped: list[str] = []
    seen: dict[Path, str] = {}
    for path in paths:
        if path.is_dir():
            found, unsupported = _walk_folder(path)
            skipped.extend(unsupported)
        elif path.is_file():
            found = [_direct_file(path)]
        else:
            raise InputError(f"{path}: no such file or folder")
        for ref in found:
            real = ref.path.resolve()
            if real in seen:
                raise InputError(f"{ref.display}: the same file is also included as {seen[real]}")
            seen[real] = ref.display
            refs.append(ref)
    return refs, skipped


def _direct_file(path: Path) -> _FileRef:
    """A file named directly: its source is its file name; its extension must be supported."""
    if path.suffix.lower() not in SUPPORTED_EXTENSIONS:
        raise InputError(
            f"{path}: unsupported file type {path.suffix or '(no extension)'!r}; "
            f"supported: {', '.join(sorted(SUPPORTED_EXTENSIONS))}"
        )
    return _FileRef(path=path, source=path.name, display=str(path))


def _walk_folder(folder: Path) -> tuple[list[_FileRef], list[str]]:
    """Find the supported files under a folder, sorted by relative POSIX path."""
    found: list[_FileRef] = []
    skipped: list[str] = []
    for relative in sorted(_visible_files(folder)):
        path = folder / relative
        if Path(relative).suffix.lower() in SUPPORTED_EXTENSIONS:
            found.append(_FileRef(path=path, source=relative, display=str(path)))
        else:
            skipped.append(str(path))
    return found, skipped


def _visible_files(folder: Path) -> Iterator[str]:
    """Yield the relative POSIX paths of the non-hidden files under a folder, recursively."""
    for root, dirs, files in os.walk(folder):
        dirs[:] = [name for name in dirs if not name.startswith(".")]
        relative_root = Path(root).relative_to(folder)
        for name in files:
            if not name.startswith("."):
                yield (relative_root / name).as_posix()


def _read_records(ref: _FileRef, text_field: str, id_field: str | None) -> Iterator[_Raw]:
    """Read one file into raw records according to its extension."""
    text = read_utf8(ref.path, ref.display)
    suffix = ref.path.suffix.lower()
    if suffix == ".jsonl":
        yield from _read_jsonl(ref, text, text_field, id_field)
    elif suffix == ".json":
        yield from _read_json(ref, text, text_field, id_field)
    elif suffix == ".csv":
        yield from _read_csv(ref, text, text_field, id_field)
    else:
        yield _Raw(location=ref.display, id=ref.source, text=text, metadata={})


def _read_jsonl(ref: _FileRef, text: str, text_field: str, id_field: str | None) -> Iterator[_Raw]:
    """One record per non-blank line; each line must be a JSON object."""
    for line, content in jsonl_lines(text):
        record = parse_json(content, ref.display, line)
        location = where(ref.display, line)
        if not isinstance(record, dict):
            raise InputError(f"{location}: expected a JSON object, got {json_kind(record)}")
        yield _to_raw(record, location, f"{ref.source}:{line}", text_field, id_field)


def _read_json(ref: _FileRef, text: str, text_field: str, id_field: str | None) -> Iterator[_Raw]:
    """A JSON list of record objects; the default id uses the 0-based list index."""
    records = parse_json(text, ref.display)
    if not isinstance(records, list):
        raise InputError(
            f"{ref.display}: expected a JSON list of records (objects), got {json_kind(records)}"
        )
    for index, record in enumerate(records):
        location = f"{ref.display}[{index}]"
        if not isinstance(record, dict):
            raise InputError(f"{location}: expected a JSON object, got {json_kind(record)}")
        yield _to_raw(record, location, f"{ref.source}:{index}", text_field, id_field)


def _read_csv(ref: _FileRef, text: str, text_field: str, id_field: str | None) -> Iterator[_Raw]:
    """One record per row under a header; the default id uses the row's starting line."""
    header, rows = csv_rows(text, ref.display)
    for field in (text_field, id_field):
        if field is not None and field not in header:
            raise InputError(
                f"{ref.display}: no column {field!r}; columns are: {field_list(header)}"
            )
    for line, row in rows:
        location = where(ref.display, line)
        yield _to_raw(row, location, f"{ref.source}:{line}", text_field, id_field)


def _to_raw(
    record: dict[str, Any], location: str, default_id: str, text_field: str, id_field: str | None
) -> _Raw:
    """Check a record's text and id fields and split off the rest as metadata."""
    text = _field(record, location, text_field)
    if not isinstance(text, str):
        raise InputError(
            f"{location} (field {text_field!r}): expected a string, got {json_kind(text)}"
        )
    doc_id = default_id if id_field is None else _id_value(record, location, id_field)
    metadata = {key: value for key, value in record.items() if key not in (text_field, id_field)}
    return _Raw(location=location, id=doc_id, text=text, metadata=metadata)


def _field(record: dict[str, Any], location: str, field: str) -> Any:
    """Return a record's field, or raise InputError listing the fields the record has."""
    if field not in record:
        raise InputError(
            f"{location} (field {field!r}): missing; this record has fields: {field_list(record)}"
        )
    return record[field]


def _id_value(record: dict[str, Any], location: str, id_field: str) -> str:
    """Return a record's id as a string; ids must be non-empty strings or numbers."""
    value = _field(record, location, id_field)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InputError(
            f"{location} (field {id_field!r}): expected a string or number id, "
            f"got {json_kind(value)}"
        )
    doc_id = str(value)
    if not doc_id.strip():
        raise InputError(f"{location} (field {id_field!r}): the id is empty")
    return doc_id
