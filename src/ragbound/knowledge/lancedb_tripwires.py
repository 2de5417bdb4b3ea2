"""The tripwire rows of an attached LanceDB table (see :mod:`ragbound.tripwires.collection`):
rows whose ``ragbound_tripwire`` column (or ``metadata`` field) holds a topic. Writing the
first one adds the nullable text columns ``ragbound_tripwire`` and ``ragbound_tripwire_id``,
``_severity``, ``_note``, ``_source`` (LanceDB's schema evolution: the application's rows get
nulls there, a tripwire row nulls in its other columns); rows are deleted by key."""

from __future__ import annotations

from collections.abc import Sequence

from ragbound.errors import InputError
from ragbound.knowledge import lancedb as lance
from ragbound.knowledge.tripwire_flags import TRIPWIRE_FLAG, StoredRecords, StoreTripwires, stacked

COLUMNS = (TRIPWIRE_FLAG, *(f"{TRIPWIRE_FLAG}_{f}" for f in ("id", "severity", "note", "source")))


class LanceTripwires(StoreTripwires):
    """Tripwire rows of one LanceDB table, in its folder."""

    location: lance.LanceLocation

    def read(self, vectors: bool = True) -> StoredRecords:
        """Every flagged row (any ``where`` aside), with its stored vector (none, an empty
        array, when not ``vectors``)."""
        vector = str(self.location.vector_column)
        with lance.lance_errors(self.location):
            table = lance.open_table(self.location)
            where = lance.sql_filter(self.location, table.schema, flagged=True)
            names = [n for n in table.schema.names if vectors or n != vector]
            rows = lance.scan(table, where, names) if where else []
        keys, texts, metadatas = [], [], []
        for key, text, metadata in (lance.record_of(row, self.location) for row in rows):
            keys.append(key)
            texts.append(text or "")
            flags = {k: v for k, v in metadata.items() if k.startswith(TRIPWIRE_FLAG)}
            metadatas.append(flags or dict(metadata.get("metadata") or {}))  # LangChain's struct
        return StoredRecords(
            keys, texts, metadatas, stacked([row[vector] for row in rows] if vectors else [])
        )

    def write(self, records: StoredRecords) -> None:
        """Add the rows: key, text, vector and flag columns (those first, when missing)."""
        location, text = self.location, str(self.location.text_field)
        with lance.lance_errors(location):
            table = lance.open_table(location)
            if len(lance.string_fields(table.schema, location.id_column, text)) < 2 or "." in text:
                raise InputError(
                    f"{location.describe()} cannot hold tripwires: its {location.id_column!r} "
                    f"and {text!r} must be text columns"
                )
            missing = [c for c in COLUMNS if lance.field_type(table.schema, c) is None]
            if missing:
                table.add_columns({c: "CAST(NULL AS STRING)" for c in missing})
            vector = str(location.vector_column)
            table.add(
                [
                    {location.id_column: key, text: body, vector: list(map(float, v)), **metadata}
                    for key, body, metadata, v in zip(*records, strict=True)
                ]
            )

    def delete(self, keys: Sequence[str]) -> None:
        values = ", ".join(lance.literal(key) for key in keys)
        with lance.lance_errors(self.location):
            where = f"{lance.quoted(self.location.id_column)} IN ({values})"
            lance.open_table(self.location).delete(where)
