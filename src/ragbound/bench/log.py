"""Append-only JSONL logs: one record per finished item, flushed and fsynced as it lands."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel, ValidationError

from ragbound.errors import ArtifactError

RecordT = TypeVar("RecordT", bound=BaseModel)


class JsonlLog(Generic[RecordT]):
    """Records of type ``model`` appended to ``path``, one JSON object per line.

    A crash can only tear the last line: reading drops a final line without its newline
    (it is rewritten by the rerun). A bad line anywhere else is an ArtifactError.
    """

    def __init__(self, path: Path, model: type[RecordT]) -> None:
        self.path = Path(path)
        self.model = model

    def read(self) -> list[RecordT]:
        """Every complete record, in the order written."""
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        complete, torn = lines[:-1], lines[-1]
        if torn.strip():  # an interrupted write: drop it
            with self.path.open("r+b") as handle:
                handle.truncate(len(data) - len(torn))
        return [self._parse(line, n) for n, line in enumerate(complete, 1) if line.strip()]

    def _parse(self, line: bytes, number: int) -> RecordT:
        try:
            return self.model.model_validate(json.loads(line))
        except (json.JSONDecodeError, UnicodeDecodeError, ValidationError) as exc:
            raise ArtifactError(f"{self.path}:{number} is corrupt: {exc}") from exc

    def append(self, records: Iterable[RecordT]) -> None:
        """Append records, each line flushed and fsynced before the next."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("ab") as handle:
            for record in records:
                handle.write(record.model_dump_json().encode() + b"\n")
                handle.flush()
                os.fsync(handle.fileno())
