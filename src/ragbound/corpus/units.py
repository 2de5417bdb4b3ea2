"""Granularity: finer search units (sentences, short sentence windows) that point to their chunk.

A knowledge base always holds chunks, the evidence a reader sees. It may also index finer units
cut from each chunk: its sentences, or windows of a few consecutive sentences. A search then
scores each chunk by its best-matching unit (the maximum similarity over the units searched),
so a question about one sentence of a long chunk is not diluted by the rest of the chunk,
while the neighbours shown stay whole chunks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ragbound.corpus.chunker import split_sentences
from ragbound.corpus.models import Chunk
from ragbound.errors import InputError

Granularity = Literal["chunk", "sentence", "window"]
# canonical order: a granularity list is stored and shown in this order
GRANULARITIES: tuple[Granularity, ...] = get_args(Granularity)
FINE_GRANULARITIES: tuple[Granularity, ...] = ("sentence", "window")
DEFAULT_WINDOW_SENTENCES = 3


def parse_granularity(value: str | Iterable[str]) -> tuple[Granularity, ...]:
    """Units to search, from ``"chunk,sentence"`` or a list: canonical order, no repeats
    (``"window, chunk"`` gives ``('chunk', 'window')``); InputError for an unknown unit."""
    names = value.split(",") if isinstance(value, str) else list(value)
    wanted = {name.strip() for name in names if name.strip()}
    unknown = sorted(wanted - set(GRANULARITIES))
    if unknown or not wanted:
        what = f"unknown unit {unknown[0]!r}" if unknown else "no unit given"
        raise InputError(
            f"granularity: {what}; use {', '.join(GRANULARITIES)} or a comma-separated list of them"
        )
    return tuple(name for name in GRANULARITIES if name in wanted)


def granularity_label(granularity: Sequence[str]) -> str:
    """``chunk,sentence``: how a granularity is written in options, messages and tables."""
    return ",".join(granularity)


class UnitParams(BaseModel):
    """What a knowledge base indexes besides its chunks, as recorded in its manifest.

    ``granularity`` is the default search: the units a search scores chunks by, unless a
    calibration chose others. Chunks are always stored and embedded (they are the evidence);
    the fine units listed are indexed too. ``window_sentences`` is the size of a window unit.
    """

    model_config = ConfigDict(frozen=True)

    granularity: tuple[Granularity, ...] = ("chunk",)
    window_sentences: int = Field(default=DEFAULT_WINDOW_SENTENCES, ge=2)

    @field_validator("granularity", mode="before")
    @classmethod
    def _canonical(cls, value: object) -> tuple[Granularity, ...]:
        if isinstance(value, str | list | tuple):
            try:
                return parse_granularity(value)
            except InputError as exc:
                raise ValueError(str(exc)) from exc
        raise ValueError(f"granularity must be a list of units, got {value!r}")

    @property
    def indexed(self) -> tuple[Granularity, ...]:
        """Every unit a search may use: chunks, and the fine units listed."""
        return tuple(g for g in GRANULARITIES if g == "chunk" or g in self.granularity)

    @property
    def fine(self) -> tuple[Granularity, ...]:
        """The fine units stored beside the chunks."""
        return tuple(g for g in self.granularity if g in FINE_GRANULARITIES)


def unit_params(granularity: str | Iterable[str], window_sentences: int) -> UnitParams:
    """Build UnitParams from user values; a bad one is an InputError naming the option."""
    if isinstance(window_sentences, bool) or not isinstance(window_sentences, int):
        raise InputError(f"window_sentences must be an integer, got {window_sentences!r}")
    if window_sentences < 2:
        raise InputError(f"window_sentences must be at least 2, got {window_sentences}")
    units = parse_granularity(granularity)
    # the window size means nothing without windows: keep it out of the manifest's identity
    size = window_sentences if "window" in units else DEFAULT_WINDOW_SENTENCES
    return UnitParams(granularity=units, window_sentences=size)


class Unit(BaseModel):
    """A fine search unit: its text, its kind, and the row of the chunk it was cut from."""

    model_config = ConfigDict(frozen=True)

    chunk: int
    granularity: Granularity
    text: str


def sentence_windows(sentences: Sequence[str], size: int) -> list[str]:
    """Every run of ``size`` consecutive sentences (step 1); fewer sentences make one window.

    >>> sentence_windows(["A.", "B.", "C."], 2)
    ['A. B.', 'B. C.']
    >>> sentence_windows(["A."], 3)
    ['A.']
    """
    if not sentences:
        return []
    last_start = max(0, len(sentences) - size)
    return [" ".join(sentences[i : i + size]) for i in range(last_start + 1)]


def split_units(chunks: Sequence[Chunk], params: UnitParams, *, first_row: int = 0) -> list[Unit]:
    """The fine units of ``chunks`` (rows numbered from ``first_row``), in chunk order.

    A unit text already cut from an earlier chunk of the same document (the sentences that
    overlapping chunks repeat) is kept once, pointing to the first chunk that holds it,
    unless that would leave a chunk without a unit of its kind.
    """
    units: list[Unit] = []
    if not params.fine:  # chunks only: no chunk is split into sentences again
        return units
    seen: set[tuple[str, str, str]] = set()
    for row, chunk in enumerate(chunks, start=first_row):
        sentences = split_sentences(chunk.text)
        texts: dict[Granularity, list[str]] = {
            "sentence": sentences,
            "window": sentence_windows(sentences, params.window_sentences),
        }
        for granularity in params.fine:
            before = len(units)
            for text in texts[granularity]:
                if (chunk.doc_id, granularity, text) not in seen:
                    seen.add((chunk.doc_id, granularity, text))
                    units.append(Unit(chunk=row, granularity=granularity, text=text))
            if len(units) == before:  # every chunk keeps a unit of each kind, to be reachable
                units.append(Unit(chunk=row, granularity=granularity, text=texts[granularity][0]))
    return units
