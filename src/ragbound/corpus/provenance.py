"""Where calibration questions came from: real users, an LLM, or nobody said.

A calibration's p-values hold when new in-knowledge questions score like the questions that
made its null. Real questions give that by construction; questions an LLM wrote give it only
approximately (on some corpora they sit closer to the documents than users' questions, and
the false-positive rate moved from 0.05 to 0.29). So each question's origin is read from its
record where the file says so:

- ``synthetic``: the record carries ``source`` ``"llm:<model>"`` (what ``ragbound synth``
  writes) or ``"synthetic"``, or all of the provenance fields ``ragbound synth`` wrote before
  it wrote ``source`` (``chunk_id``, ``prompt_id``, ``prompt_version``, ``model``);
- ``real``: the record carries ``source`` ``"real"``;
- ``unknown``: anything else (a line of text, an object without those fields). Nothing here
  guesses that a bare question is a real one: ``calibrate --questions real`` says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from ragbound.corpus.origins import DECLARED_ORIGINS, DeclaredOrigin, QuestionOrigin
from ragbound.corpus.queries import MAX_QUERY_CHARS, load_query_records
from ragbound.errors import InputError

SYNTH_FIELDS = ("chunk_id", "prompt_id", "prompt_version", "model")
"""Fields every line of ``ragbound synth`` output carries (its SyntheticQuery)."""
LLM_SOURCE = "llm:"
"""How a ``source`` field names an LLM author: ``llm:<model>``."""


def record_origin(data: object) -> QuestionOrigin:
    """One record's origin, from its ``source`` field or synth's provenance fields."""
    if not isinstance(data, dict):
        return "unknown"
    source = data.get("source")
    if isinstance(source, str):
        said = source.strip().lower()
        if said.startswith(LLM_SOURCE) or said == "synthetic":
            return "synthetic"
        if said == "real":
            return "real"
    if all(name in data for name in SYNTH_FIELDS):
        return "synthetic"
    return "unknown"


def question_origins(
    path: str | Path, *, field: str | None = None, max_chars: int = MAX_QUERY_CHARS
) -> dict[str, QuestionOrigin]:
    """Each question of a query file with its origin (:func:`record_origin`), by its text.

    A question written twice with different origins counts as the less certain one: a
    synthetic copy makes it synthetic, else an unknown one makes it unknown.
    """
    origins: dict[str, QuestionOrigin] = {}
    for record, text in load_query_records(path, field=field, max_chars=max_chars):
        origins[text] = _weaker(origins.get(text), record_origin(record.data))
    return origins


def _weaker(known: QuestionOrigin | None, new: QuestionOrigin) -> QuestionOrigin:
    """Of two origins of one text, the one that claims less about it being real."""
    if known is None:
        return new
    for origin in ("synthetic", "unknown"):
        if origin in (known, new):
            return origin  # type: ignore[return-value]
    return "real"


def origins_of(
    questions: Iterable[str], declared: DeclaredOrigin | Mapping[str, QuestionOrigin] | None
) -> list[QuestionOrigin]:
    """The origin of each of ``questions``: all ``declared`` when it is ``"real"`` or
    ``"synthetic"``, looked up by text in a mapping (:func:`question_origins`; a question it
    lacks is unknown), else unknown. Another string is an InputError."""
    if declared is None:
        return ["unknown" for _ in questions]
    if isinstance(declared, str):
        if declared not in DECLARED_ORIGINS:
            raise InputError(
                f"questions must be one of {list(DECLARED_ORIGINS)} or a mapping of each "
                f"question to its origin, got {declared!r}"
            )
        return [declared for _ in questions]  # type: ignore[misc]
    return [declared.get(text, "unknown") for text in questions]
