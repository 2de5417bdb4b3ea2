"""Load documents from .txt, .md, .jsonl, .json, .csv and .tsv files and folders of them.

Document ids and sources depend only on paths relative to the folder argument (or on the file
name of a file passed directly), never on where the corpus lives on disk, so the same corpus
gives the same ids on every machine.
"""

from __future__ import annotations

import errno
import os
import stat
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ragbound.corpus.models import Document
from ragbound.errors import InputError
from ragbound.records import FORMAT_BY_SUFFIX, Record, read_records, read_text

WHOLE_FILE_EXTENSIONS: frozenset[str] = frozenset({".txt", ".md"})
"""Extensions of files that are one document each (compared case-insensitively)."""

SUPPORTED_EXTENSIONS: frozenset[str] = WHOLE_FILE_EXTENSIONS | frozenset(FORMAT_BY_SUFFIX)
"""File extensions the loader reads: whole-file documents and record files."""

RECORD_ID_FIELD = "id"
"""The field that is a record's document id when no ``id_field`` is named (if it has one)."""

LINE_IDS = "@line"
"""The ``id_field`` that gives every record the id ``source:line`` (``source:index`` in a
JSON document), whatever its fields: the default before a record's ``id`` became its id."""

SPECIAL_SHOWN = 5
"""Entries named in the warning about skipped non-regular files before ``and N more``."""

_DEFAULT_ID_HINT = (
    "a record's 'id' field (or its key in a JSON object keyed by id) is its document id by "
    "default: name a unique field with --id-field, or give --id-field @line for file-and-line ids"
)


class LoadReport(BaseModel):
    """What a load read and what it left out: ``files`` read, in load order; the locations of
    the records with a blank text (``skipped_empty``); the files inside folders with an
    unsupported extension (``skipped_files``; hidden ones are not listed); and, as
    ``PATH (WHAT)``, the entries that are not regular files, never opened (``skipped_special``).
    """

    model_config = ConfigDict(frozen=True)

    files: list[str] = Field(default_factory=list)
    n_documents: int = 0
    skipped_empty: list[str] = Field(default_factory=list)
    skipped_files: list[str] = Field(default_factory=list)
    skipped_special: list[str] = Field(default_factory=list)


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
    """Load the documents of files and folders; see :func:`load_documents_with_report`."""
    documents, _ = load_documents_with_report(paths, text_field=text_field, id_field=id_field)
    return documents


def load_documents_with_report(
    paths: Sequence[str | Path] | str | Path,
    *,
    text_field: str = "text",
    id_field: str | None = None,
) -> tuple[list[Document], LoadReport]:
    """Load documents and report what was skipped (the rules: docs/input-files.md).

    Folders are walked recursively in order of relative path; entries that are not regular
    files are never opened, one UserWarning names them. A ``.txt``/``.md`` file is one
    document whose id is its source; a record is one whose text is ``text_field``, its other
    fields the metadata, its id ``id_field``, else its key, else its ``id`` field, else
    ``"{source}:{line}"`` (``id_field=LINE_IDS``: always the last). InputError for anything
    unreadable, duplicate ids, and a corpus without documents.
    """
    path_list = _as_path_list(paths)
    refs, skipped_files, special = _collect_files(path_list)
    if special:
        warnings.warn(_special_message(special), UserWarning, stacklevel=2)
    documents: list[Document] = []
    seen: dict[str, str] = {}
    skipped_empty: list[str] = []
    for ref in refs:
        for raw in _read_records(ref, text_field, id_field):
            if not raw.text.strip():
                skipped_empty.append(raw.location)
                continue
            if raw.id in seen:
                hint = f"; {_DEFAULT_ID_HINT}" if id_field is None else ""
                raise InputError(
                    f"duplicate document id {raw.id!r}: at {seen[raw.id]} and at {raw.location}"
                    + hint
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
        skipped_special=special,
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


def _special_message(special: list[str]) -> str:
    """The warning naming the entries skipped because they are not regular files."""
    shown = ", ".join(special[:SPECIAL_SHOWN])
    more = len(special) - SPECIAL_SHOWN
    return (
        f"skipped {len(special)} corpus entr{'y' if len(special) == 1 else 'ies'} that "
        f"{'is' if len(special) == 1 else 'are'} not a regular file: {shown}"
        + (f" and {more} more" if more > 0 else "")
    )


def _collect_files(paths: list[Path]) -> tuple[list[_FileRef], list[str], list[str]]:
    """Expand the path arguments into the files to read, the unsupported files skipped and
    the entries skipped because they are not regular files (``PATH (WHAT)``)."""
    refs: list[_FileRef] = []
    skipped: list[str] = []
    special: list[str] = []
    seen: dict[Path, str] = {}
    for path in paths:
        if path.is_dir():
            found, unsupported, odd = _walk_folder(path)
            skipped.extend(unsupported)
            special.extend(odd)
        else:
            found = [_direct_file(path)]
        for ref in found:
            _check_name(ref)
            real = ref.path.resolve()
            if real in seen:
                raise InputError(f"{ref.display}: the same file is also included as {seen[real]}")
            seen[real] = ref.display
            refs.append(ref)
    return refs, skipped, special


def _check_name(ref: _FileRef) -> None:
    """InputError naming the file when its path is not UTF-8: its name is its documents'
    source and id and the path is kept in the manifest, all written to UTF-8 files."""
    try:
        ref.display.encode("utf-8")
    except UnicodeEncodeError as exc:
        byte = os.fsencode(ref.display[exc.start])[0]  # the byte the name has on disk
        shown = os.fsencode(ref.display).decode("utf-8", "backslashreplace")
        raise InputError(
            f"{shown}: the path is not UTF-8 (byte 0x{byte:02x}); a file's name is the source "
            "and id of its documents, kept in UTF-8 files: rename it"
        ) from None


def _direct_file(path: Path) -> _FileRef:
    """A file named directly: its source is its file name; it must be a regular file (never
    opened otherwise) with a supported extension."""
    kind = not_regular(path)
    if kind == "missing":
        raise InputError(f"{path}: no such file or folder")
    if kind is not None:
        raise InputError(f"{path}: not a regular file ({kind}); name a file or a folder")
    if path.suffix.lower() not in SUPPORTED_EXTENSIONS:
        raise InputError(
            f"{path}: unsupported file type {path.suffix or '(no extension)'!r}; "
            f"supported: {', '.join(sorted(SUPPORTED_EXTENSIONS))}"
        )
    return _FileRef(path=path, source=path.name, display=str(path))


def _walk_folder(folder: Path) -> tuple[list[_FileRef], list[str], list[str]]:
    """Find the supported files under a folder, sorted by relative POSIX path; also the
    unsupported files and the entries that are not regular files (``PATH (WHAT)``)."""
    found: list[_FileRef] = []
    skipped: list[str] = []
    special: list[str] = []
    for relative in sorted(_visible_files(folder)):
        path = folder / relative
        if (kind := not_regular(path)) is not None:
            special.append(f"{path} ({kind})")
        elif Path(relative).suffix.lower() not in SUPPORTED_EXTENSIONS:
            skipped.append(str(path))
        else:
            found.append(_FileRef(path=path, source=relative, display=str(path)))
    return found, skipped, special


def not_regular(path: Path) -> str | None:
    """None for a regular file (through symlinks); else what it is, found without opening
    it: ``missing``, ``a dangling symlink``, ``a symlink loop``, ``a folder``, ``a FIFO``,
    ``a socket``, ``a device`` or ``unreachable (REASON)``."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink loop"
        if exc.errno == errno.ENOENT:
            return "a dangling symlink" if path.is_symlink() else "missing"
        return f"unreachable ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a symlinked folder, not followed" if path.is_symlink() else "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"


def _visible_files(folder: Path) -> Iterator[str]:
    """Yield the relative POSIX paths of the non-hidden entries under a folder that are not
    folders, recursively; a symlinked folder is yielded, not followed. A folder that cannot
    be read is an InputError."""
    for root, dirs, files in os.walk(folder, onerror=_unreadable_folder):
        dirs[:] = [name for name in dirs if not name.startswith(".")]
        relative_root = Path(root).relative_to(folder)
        linked = [name for name in dirs if os.path.islink(os.path.join(root, name))]
        for name in [*files, *linked]:
            if not name.startswith("."):
                yield (relative_root / name).as_posix()


def _unreadable_folder(exc: OSError) -> None:
    """``os.walk``'s error handler: a folder of the corpus it cannot list is an error."""
    raise InputError(f"{exc.filename}: cannot read the folder ({exc.strerror or exc})") from exc


def _read_records(ref: _FileRef, text_field: str, id_field: str | None) -> Iterator[_Raw]:
    """Read one file: a whole-file document, or one record per JSONL line, JSON item or row."""
    if ref.path.suffix.lower() in WHOLE_FILE_EXTENSIONS:
        text = read_text(ref.path)
        yield _Raw(location=ref.display, id=ref.source, text=text, metadata={})
        return
    for record in read_records(ref.path):
        yield _to_raw(record, ref.source, text_field, id_field)


def _to_raw(record: Record, source: str, text_field: str, id_field: str | None) -> _Raw:
    """Check a record's text and id fields and split off the rest as metadata."""
    fields = record.object()
    text = record.string(text_field, allow_empty=True, strip=False)
    doc_id, used = _document_id(record, source, id_field)
    metadata = {key: value for key, value in fields.items() if key not in (text_field, used)}
    return _Raw(location=record.where(), id=doc_id, text=text, metadata=metadata)


def _document_id(record: Record, source: str, id_field: str | None) -> tuple[str, str | None]:
    """A record's document id (see :func:`load_documents_with_report`) and the field it
    came from (None: its key or its position)."""
    if id_field is not None and id_field != LINE_IDS:
        return record.id(id_field), id_field
    if id_field is None and record.key is not None:
        return record.key, None
    if id_field is None and _given(record.fields.get(RECORD_ID_FIELD)):
        try:
            return record.id(RECORD_ID_FIELD), RECORD_ID_FIELD
        except InputError as exc:
            raise InputError(f"{exc}; {_DEFAULT_ID_HINT}") from None
    position = record.index if record.format == "json" else record.line
    return f"{source}:{position}", None


def _given(value: object) -> bool:
    """Whether a record holds an id: null and empty (a blank CSV cell) are no id."""
    return value is not None and not (isinstance(value, str) and not value.strip())
