"""Which chunks make one document, found from the chunks themselves.

``ragbound synth`` shows the LLM a sampled chunk with its neighbours from the same document;
with one record per paragraph and no document field, the context would shrink to a paragraph
and the questions drift to details. The first grouping that works, in this order:

1. ``document``: the document ids, when documents hold several chunks or are whole files;
2. ``metadata``: a metadata field whose equal values come in consecutive runs (a paper id);
3. ``id-prefix``: a per-record id whose consecutive values share a prefix before a numbered
   suffix (``12345-p3``, ``report_2.chunk7``);
4. ``source``: the source file, when the corpus has several files of several chunks;
5. ``adjacent`` (fallback): the chunks next to the sampled one in knowledge-base order.

A grouping works when at least half the chunks share their group with another chunk, there
are at least two groups, and nearly every group is one consecutive run.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

from ragbound.corpus import Chunk

StructureKind = Literal["document", "metadata", "id-prefix", "source", "adjacent", "chunk"]

# At least this share of chunks must be in a group of two or more.
MIN_GROUPED_SHARE = 0.5
# Runs (maximal stretches of consecutive equal keys) per group, at most: 1.0 is perfectly
# consecutive; a little slack lets a few out-of-order records through.
MAX_RUNS_PER_GROUP = 1.1
# A metadata field is an id (a prefix candidate) when this share of its values are distinct.
MIN_DISTINCT_SHARE = 0.9
# A numbered suffix after a separator, optionally named: "-3", "_p3", ".chunk7", ":para 2".
_NUMBERED_SUFFIX = re.compile(
    r"^(?P<prefix>.*?[^-_.:#/ ])[-_.:#/ ]+(?:p|para|paragraph|c|chunk|part|s|sec|section)?\s*\d+$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class DocumentStructure:
    """A grouping of the chunks into documents: one key per chunk row (equal keys: one document).

    ``kind`` says how it was found and ``detail`` names the field used, if any.
    """

    kind: StructureKind
    keys: tuple[Hashable, ...]
    detail: str = ""

    @property
    def label(self) -> str:
        """``kind`` with its field, e.g. ``metadata:pmid`` (recorded in provenance)."""
        return f"{self.kind}:{self.detail}" if self.detail else self.kind

    def describe(self) -> str:
        """One line for users: how documents were found, and how many."""
        groups = len(set(self.keys))
        how = {
            "document": "the document ids",
            "metadata": f"the metadata field {self.detail!r}",
            "id-prefix": f"the shared prefix of the ids in {self.detail!r}",
            "source": "the source files",
            "adjacent": "none found: the chunks next to each sampled chunk",
            "chunk": "none: each chunk alone",
        }[self.kind]
        if self.kind in ("adjacent", "chunk"):
            return f"synth context: {how}"
        return f"synth context: documents from {how} ({groups} documents, {len(self.keys)} chunks)"


def infer_structure(chunks: Sequence[Chunk]) -> DocumentStructure:
    """The first grouping that works (see the module docstring), else ``adjacent``."""
    doc_ids = [c.doc_id for c in chunks]
    # a document that is a whole file (text, markdown) is a real document even when short
    if _works(doc_ids) or all(c.doc_id == c.source for c in chunks):
        return DocumentStructure("document", tuple(doc_ids))
    found = _metadata_grouping(chunks) or _id_prefix_grouping(chunks)
    if found is not None:
        return found
    sources = [c.source for c in chunks]
    if _works(sources):
        return DocumentStructure("source", tuple(sources))
    return DocumentStructure("adjacent", (0,) * len(chunks))


def field_structure(chunks: Sequence[Chunk], field: str) -> DocumentStructure:
    """Documents named by a metadata field (a chunk without it is its own document)."""
    return DocumentStructure(
        "metadata",
        tuple(_hashable(c.metadata.get(field), ("ungrouped", row)) for row, c in enumerate(chunks)),
        field,
    )


def _works(keys: Sequence[Hashable]) -> bool:
    """True when ``keys`` group the chunks usefully: see the module docstring."""
    sizes = Counter(keys)
    if len(sizes) < 2:  # also fewer than two chunks
        return False
    grouped = sum(size for size in sizes.values() if size > 1)
    if grouped < MIN_GROUPED_SHARE * len(keys):
        return False
    runs = 1 + sum(a != b for a, b in pairwise(keys))
    return runs <= MAX_RUNS_PER_GROUP * len(sizes)


def _hashable(value: object, default: Hashable) -> Hashable:
    """A metadata value usable as a group key (strings, numbers), else ``default``."""
    if isinstance(value, str | int | float | bool) and value != "":
        return value
    return default


def _metadata_grouping(chunks: Sequence[Chunk]) -> DocumentStructure | None:
    """The metadata field that groups the chunks finest among those that work."""
    best: DocumentStructure | None = None
    for name in _metadata_fields(chunks):
        candidate = field_structure(chunks, name)
        if _works(candidate.keys) and (
            best is None or len(set(candidate.keys)) > len(set(best.keys))
        ):
            best = candidate
    return best


def _id_prefix_grouping(chunks: Sequence[Chunk]) -> DocumentStructure | None:
    """Group by the prefix of a per-record id (the document id, or an id-like metadata field)."""
    candidates: list[tuple[str, list[str]]] = [("doc_id", [c.doc_id for c in chunks])]
    for name in _metadata_fields(chunks):
        values = [c.metadata.get(name) for c in chunks]
        if all(isinstance(v, str) for v in values):
            strings = [str(v) for v in values]
            if len(set(strings)) >= MIN_DISTINCT_SHARE * len(strings):
                candidates.append((name, strings))
    for name, ids in candidates:
        prefixes = [id_prefix(value) for value in ids]
        if any(p is None for p in prefixes):
            continue
        # the loader's default ids ("file.jsonl:7") share only their file name: that is the
        # source grouping, tried later and reported as such
        if all(p == c.source for p, c in zip(prefixes, chunks, strict=True)):
            continue
        if _works(prefixes):
            return DocumentStructure("id-prefix", tuple(prefixes), name)
    return None


def id_prefix(value: str) -> str | None:
    """The part of an id before its numbered suffix (``"12345-p3"`` -> ``"12345"``), or None."""
    match = _NUMBERED_SUFFIX.match(value.strip())
    return match.group("prefix") if match else None


def _metadata_fields(chunks: Sequence[Chunk]) -> list[str]:
    """Metadata field names, in first-seen order."""
    names: dict[str, None] = {}
    for chunk in chunks:
        names.update(dict.fromkeys(chunk.metadata))
    return list(names)
