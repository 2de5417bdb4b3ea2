"""The tripwire rows of an attached LanceDB table (see :mod:`ragbound.tripwires.collection`):
rows whose ``ragbound_tripwire`` column (or ``metadata`` field) holds a topic. Writing the
first one adds the nullable text columns ``ragbound_tripwire`` and ``ragbound_tripwire_id``,
``_severity``, ``_note``, ``_source`` (LanceDB's schema evolution: the application's rows get
nulls, its other columns are null in a tripwire row); rows are deleted by key."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ragbound.errors import InputError
from ragbound.knowledge.lancedb import (
    LanceLocation,
    field_type,
    lance_errors,
    literal,
    open_table,
    quoted,
    record_of,
    scan,
    sql_filter,
    string_fields,
)
from ragbound.knowledge.tripwire_records import TRIPWIRE_FLAG, StoredRecords

KEY_PREFIX = "ragbound-tripwire-"  # the key of a tripwire row written by ragbound
COLUMNS = (TRIPWIRE_FLAG, *(f"{TRIPWIRE_FLAG}_{f}" for f in ("id", "severity", "note", "source")))


class LanceTripwires:
    """Tripwire rows of one LanceDB table, in its folder."""

    def __init__(self, location: LanceLocation):
        self.location = location

    def describe(self) -> str:
        return self.location.describe()

    def key_of(self, tripwire_id: str) -> str:
        return KEY_PREFIX + tripwire_id

    def read(self, vectors: bool = True) -> StoredRecords:
        """Every flagged row (any ``where`` aside), with its stored vector (none, an empty
        array, when not ``vectors``)."""
        vector = str(self.location.vector_column)
        with lance_errors(self.location):
            table = open_table(self.location)
            where = sql_filter(self.location, table.schema, flagged=True)
            names = [n for n in table.schema.names if vectors or n != vector]
            rows = scan(table, where, names) if where else []
        records = [record_of(row, self.location) for row in rows]
        flags = [{k: v for k, v in m.items() if k.startswith(TRIPWIRE_FLAG)} for _, _, m in records]
        return StoredRecords(
            keys=[key for key, _, _ in records],
            texts=[text or "" for _, text, _ in records],
            metadatas=[
                f or dict(m.get("metadata") or {})
                for f, (_, _, m) in zip(flags, records, strict=True)
            ],
            vectors=np.asarray([row[vector] for row in rows], np.float32)
            if vectors and rows
            else np.empty((0, 0), np.float32),
        )

    def write(self, records: StoredRecords) -> None:
        """Add the rows (key, text, vector and flag columns; the flag columns first, when the
        table has none)."""
        location = self.location
        text = str(location.text_field)
        with lance_errors(location):
            table = open_table(location)
            if len(string_fields(table.schema, location.id_column, text)) < 2 or "." in text:
                raise InputError(
                    f"{location.describe()} cannot hold tripwires: its {location.id_column!r} "
                    f"and {text!r} must be text columns"
                )
            missing = [c for c in COLUMNS if field_type(table.schema, c) is None]
            if missing:
                table.add_columns({c: "CAST(NULL AS STRING)" for c in missing})
            table.add(
                [
                    {
                        location.id_column: key,
                        text: body,
                        str(location.vector_column): np.asarray(vector, np.float32).tolist(),
                        **metadata,
                    }
                    for key, body, metadata, vector in zip(*records, strict=True)
                ]
            )

    def delete(self, keys: Sequence[str]) -> None:
        values = ", ".join(literal(key) for key in keys)
        with lance_errors(self.location):
            open_table(self.location).delete(f"{quoted(self.location.id_column)} IN ({values})")
