"""Typed errors. Every message says what was wrong and where (file, line, field)."""

from __future__ import annotations


class RagboundError(Exception):
    """Base class for every error ragbound raises on purpose.

    The CLI prints the message of these errors without a traceback.
    """


class InputError(RagboundError, ValueError):
    """Bad user input: a file, a record, a query or a parameter that cannot be used."""


class NotFittedError(RagboundError, RuntimeError):
    """A detector or guard was used before `fit` (or before a calibration was made)."""


class ArtifactError(RagboundError):
    """An artifact directory is missing, corrupt or of an unknown format."""


class IncompatibleArtifactError(ArtifactError):
    """An artifact was made against another knowledge base (manifest hash mismatch)."""


def where(path: object, line: int | None = None, field: str | None = None) -> str:
    """Format a location for an error message: ``file.jsonl:12 (field 'text')``."""
    text = str(path)
    if line is not None:
        text += f":{line}"
    if field is not None:
        text += f" (field {field!r})"
    return text
