"""Knowledge sets and the leave-one-out context of each question (no model calls here).

A knowledge set is the pairs of one QA or filtered set file. Each pair is shown to the target
model as a numbered fact (``Fact 3:`` then ``Question: ...`` / ``Answer: ...``); a question
never sees its own pair, nor a pair from the same source fact. Search strategies rank the other
pairs by the cosine between a query vector and the pairs' embeddings.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from ragbound.artifacts import file_sha256, read_json
from ragbound.bench.models import (
    FILTERED_FORMAT,
    QA_FORMAT,
    ContextItem,
    FilteredSet,
    QAPair,
    QASet,
)
from ragbound.errors import InputError
from ragbound.llm import ParseError, parse_json_object
from ragbound.stats.clusters import kmeans
from ragbound.stores import ExactStore, search_excluding

HYDE_ANSWERS = 3
NO_CONTEXT = "(no facts given)"
MAX_CLUSTER_SHOWN = 12  # questions of a cluster shown to the question writer
_LIST_MARKER = re.compile(r"^\s*(?:[-*•]|\(?\d+[.):]|answer\s*\d+\s*[:.)-])\s*", re.IGNORECASE)

# --- knowledge sets -------------------------------------------------------------------------


@dataclass(frozen=True)
class KnowledgeSet:
    """One knowledge base: the pairs of a QA or filtered set file, and the file's SHA-256."""

    name: str
    path: Path
    sha256: str
    format: str
    pairs: list[QAPair]


def read_knowledge(path: Path) -> KnowledgeSet:
    """A QA set (``pairs``) or filtered set (``kept``) from its JSON file."""
    path = Path(path)
    raw = read_json(path, "knowledge set")
    formats = {QA_FORMAT: QASet, FILTERED_FORMAT: FilteredSet}
    fmt = raw.get("format") if isinstance(raw, dict) else None
    if fmt not in formats:
        raise InputError(
            f"{path}: format {fmt!r} is not a QA set or filtered set ({', '.join(formats)})"
        )
    try:
        loaded = formats[fmt].model_validate(raw)
    except ValidationError as exc:
        raise InputError(f"{path}: not a valid {fmt} file: {exc}") from None
    pairs = loaded.pairs if isinstance(loaded, QASet) else loaded.kept
    if not pairs:
        raise InputError(f"{path}: the set {loaded.name!r} holds no QA pairs")
    ids = [pair.id for pair in pairs]
    if len(set(ids)) != len(ids):
        raise InputError(f"{path}: QA pair ids repeat; each pair needs its own id")
    digest = file_sha256(path)
    return KnowledgeSet(name=loaded.name, path=path, sha256=digest, format=fmt, pairs=pairs)


def pair_text(pair: QAPair) -> str:
    """How a pair is embedded and shown as a fact."""
    return f"Question: {pair.question}\nAnswer: {pair.answer}"


def render_context(items: Sequence[ContextItem]) -> str:
    """The numbered facts as the target model sees them (``Fact 3:`` then the pair)."""
    if not items:
        return NO_CONTEXT
    return "\n\n".join(f"Fact {item.number}:\n{item.text}" for item in items)


# --- what each question may see -------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """A question to ask, its expected answer (None when synthetic), and the pairs it must not
    see (indices into its set: itself and any pair from the same source fact)."""

    qa_id: str
    question: str
    expected_answer: str | None
    excluded: frozenset[int]


def leave_one_out_probes(pairs: Sequence[QAPair]) -> list[Probe]:
    """One probe per pair; each excludes the pair and every pair sharing its source fact."""
    probes = []
    for pair in pairs:
        excluded = frozenset(
            j
            for j, other in enumerate(pairs)
            if other.id == pair.id or (pair.fact_id is not None and other.fact_id == pair.fact_id)
        )
        probes.append(Probe(pair.id, pair.question, pair.answer, excluded))
    return probes


def sample_probes(probes: list[Probe], limit: int | None, seed: int) -> list[Probe]:
    """A seeded sample of ``limit`` probes, in their original order (all when no limit).

    The sample is a prefix of one seeded permutation, so a larger limit keeps every question
    of a smaller one.
    """
    if limit is None or limit >= len(probes):
        return probes
    chosen = np.random.default_rng(seed).permutation(len(probes))[:limit]
    return [probes[i] for i in sorted(chosen.tolist())]


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (zero rows stay zero), as float64."""
    array = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(array, axis=-1, keepdims=True)
    return array / np.where(norms > 0, norms, 1.0)


def all_context(pairs: Sequence[QAPair], excluded: frozenset[int]) -> list[ContextItem]:
    """Every pair not excluded, in set order, numbered from 1."""
    kept = [pair for j, pair in enumerate(pairs) if j not in excluded]
    return [
        ContextItem(number=n, qa_id=pair.id, text=pair_text(pair)) for n, pair in enumerate(kept, 1)
    ]


def top_k_context(
    pairs: Sequence[QAPair],
    pair_vectors: np.ndarray,
    query: np.ndarray,
    excluded: frozenset[int],
    k: int,
) -> list[ContextItem]:
    """The ``k`` pairs (not excluded) of highest cosine to ``query``, best first, numbered
    from 1; ties keep set order; fewer when fewer are left. ``pair_vectors`` rows must be unit
    length; cosines are float64, as the contexts recorded so far."""
    index = ExactStore(pair_vectors, similarity="cosine", precision="float64")
    left = len(index) - len({j for j in excluded if 0 <= j < len(index)})
    if min(k, left) < 1:
        return []
    hits = search_excluding(index, unit_rows(query).reshape(1, -1), min(k, left), [excluded])
    return [
        ContextItem(number=n, qa_id=pairs[j].id, text=pair_text(pairs[j]), similarity=float(sim))
        for n, (j, sim) in enumerate(
            zip(hits.indices[0].tolist(), hits.similarities[0], strict=True), 1
        )
    ]


# --- model replies that are lists -----------------------------------------------------------


def parse_text_list(reply: str, key: str) -> list[str]:
    """The strings of ``{"<key>": [...]}`` in ``reply``; failing that, its numbered or bulleted
    lines (or, with none, its non-empty lines), markers stripped."""
    try:
        found = parse_json_object(reply).get(key)
    except ParseError:
        found = None
    if isinstance(found, list):
        return [item.strip() for item in found if isinstance(item, str) and item.strip()]
    lines = [line for line in reply.splitlines() if line.strip() and not line.startswith("```")]
    marked = [line for line in lines if _LIST_MARKER.match(line)]
    return [_LIST_MARKER.sub("", line).strip() for line in (marked or lines) if line.strip()]


def parse_hypothetical_answers(reply: str) -> list[str]:
    """Exactly three hypothetical answers (the first three given); fewer is a ParseError."""
    answers = parse_text_list(reply, "answers")
    if len(answers) < HYDE_ANSWERS:
        raise ParseError(
            f"expected {HYDE_ANSWERS} hypothetical answers, read {len(answers)}", reply
        )
    return answers[:HYDE_ANSWERS]


def parse_questions(reply: str) -> list[str]:
    """The new questions of a reply (at least one)."""
    questions = [q for q in parse_text_list(reply, "questions") if len(q.split()) >= 3]
    if not questions:
        raise ParseError("no questions could be read", reply)
    return questions


def normal_question(text: str) -> str:
    """``text`` case-folded with its whitespace collapsed (to spot repeated questions)."""
    return " ".join(text.casefold().split())


def unseen_questions(questions: Sequence[str], seen: set[str]) -> list[str]:
    """``questions`` without those in ``seen`` (normalised) or repeated among themselves."""
    fresh: dict[str, str] = {}
    for question in questions:
        key = normal_question(question)
        if key not in seen:
            fresh.setdefault(key, question)
    return list(fresh.values())


def question_clusters(
    pairs: Sequence[QAPair], question_vectors: np.ndarray, n_clusters: int, seed: int
) -> list[list[str]]:
    """The set's questions in ``n_clusters`` k-means clusters (at most one per question), each
    cut to the :data:`MAX_CLUSTER_SHOWN` nearest its centre."""
    n_clusters = max(1, min(n_clusters, len(pairs)))
    found = kmeans(question_vectors, n_clusters, seed=seed, restarts=10)
    clusters = []
    for label in range(n_clusters):
        members = np.flatnonzero(found.labels == label)
        distance = np.linalg.norm(question_vectors[members] - found.centres[label], axis=1)
        nearest = members[np.argsort(distance, kind="stable")][:MAX_CLUSTER_SHOWN]
        clusters.append([pairs[j].question for j in sorted(nearest.tolist())])
    return [cluster for cluster in clusters if cluster]
