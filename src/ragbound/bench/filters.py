"""Diversity filters for QA pairs (KnowOrNot section 3.1 and appendix A.2).

The text of a pair is ``question + " " + answer``. Two filters, each with a threshold:

- **keyword**: keeps pairs whose TF-IDF *uniqueness* (one minus the cosine to the most
  similar other pair; 0 for a near-copy, 1 for no shared content word) is at least
  ``min + threshold x (max - min)`` over the pool. Both members of a near-duplicate couple
  score low, so both may go: this filter removes redundant clusters.
- **semantic**: greedy in input order over embeddings: a pair is kept only if its cosine
  distance to every pair kept so far is at least ``threshold``. Input order (the paper's
  walk) lets the author choose which member of a near-duplicate group survives.
- **both**: keyword, then semantic on the survivors.

Every dropped pair is a :class:`FilterDrop` with its score and cut-off.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, cast

import numpy as np

from ragbound.artifacts import sha256_text, utc_now
from ragbound.bench.context import unit_rows
from ragbound.bench.models import FilterDrop, FilteredSet, Provenance, QAPair, QASet
from ragbound.corpus.function_words import english_function_words
from ragbound.embedders import DenseEmbedder, canonical_spec, load_dense_embedder
from ragbound.errors import InputError
from ragbound.stats.diversity import greedy_min_distance, range_cutoff, uniqueness_scores
from ragbound.stores.lexical import word_tokens

FilterMethod = Literal["none", "keyword", "semantic", "both"]
FILTER_METHODS: tuple[str, ...] = ("none", "keyword", "semantic", "both")
DEFAULT_THRESHOLD = 0.3
TFIDF_SETTINGS: dict[str, Any] = {
    "tokens": "BM25's: lower-case, 2+ word characters",
    "stop_words": "ragbound English function words",
    "idf": "ln((1 + n) / (1 + df)) + 1",
    "norm": "l2",
}


def pair_text(pair: QAPair) -> str:
    """What the filters compare: the question, a space, the answer."""
    return f"{pair.question} {pair.answer}"


def tfidf_similarity(texts: Sequence[str]) -> np.ndarray:
    """Cosine similarity (n, n) of the texts' TF-IDF vectors, fitted on ``texts`` themselves.

    A text's words are its lower-cased tokens of two or more word characters (BM25's), English
    function words left out; a word's weight in a text is its count times the smoothed IDF
    ``ln((1 + n) / (1 + df)) + 1`` (df: the texts holding it), each text's vector scaled to
    length 1. Texts made only of function words have a zero vector: similarity 0 to
    everything.
    """
    function_words = english_function_words()
    tokens = [[w for w in words if w not in function_words] for words in word_tokens(texts)]
    n = len(texts)
    similarity = np.zeros((n, n))
    word, text, weight = _tfidf_entries(tokens)
    starts = np.concatenate([[0], np.cumsum(np.bincount(word))])
    for w in np.flatnonzero(np.diff(starts) > 1).tolist():  # a word of one text adds nothing
        span = slice(starts[w], starts[w + 1])
        similarity[np.ix_(text[span], text[span])] += np.outer(weight[span], weight[span])
    np.fill_diagonal(similarity, np.bincount(text, minlength=n) > 0)
    return similarity


def _tfidf_entries(tokens: list[list[str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The non-zero TF-IDF entries (word number, text number, weight), sorted by word; each
    text's weights have length 1."""
    n = len(tokens)
    vocabulary = {word: i for i, word in enumerate(sorted({w for ws in tokens for w in ws}))}
    text_of = np.repeat(np.arange(n), [len(ws) for ws in tokens])
    word_of = np.array([vocabulary[w] for ws in tokens for w in ws], dtype=np.int64)
    pairs, counts = np.unique(word_of * n + text_of, return_counts=True)
    word, text = pairs // n, pairs % n
    held_by = np.bincount(word, minlength=len(vocabulary))
    weight = counts * (np.log((1 + n) / (1 + held_by[word])) + 1.0)
    weight /= np.sqrt(np.bincount(text, weight**2, minlength=n))[text]
    return word, text, weight


def keyword_filter(
    pairs: Sequence[QAPair], threshold: float
) -> tuple[list[QAPair], list[FilterDrop]]:
    """Keep pairs whose TF-IDF uniqueness is at least ``min + threshold x range``."""
    if len(pairs) < 2:
        return list(pairs), []
    scores = uniqueness_scores(tfidf_similarity([pair_text(pair) for pair in pairs]))
    cutoff = range_cutoff(scores, threshold)
    kept: list[QAPair] = []
    drops: list[FilterDrop] = []
    for pair, score in zip(pairs, scores, strict=True):
        if score >= cutoff:
            kept.append(pair)
            continue
        drops.append(
            FilterDrop(
                id=pair.id,
                filter="keyword",
                reason=(
                    f"TF-IDF uniqueness {score:.3f} is below the cut-off {cutoff:.3f} "
                    f"(min {scores.min():.3f} + {threshold} x range {np.ptp(scores):.3f})"
                ),
                score=float(score),
                cutoff=float(cutoff),
            )
        )
    return kept, drops


def semantic_filter(
    pairs: Sequence[QAPair], threshold: float, embedder: DenseEmbedder, *, progress: bool = False
) -> tuple[list[QAPair], list[FilterDrop]]:
    """Greedy in input order: keep a pair at cosine distance >= ``threshold`` from all kept."""
    if not pairs:
        return [], []
    # cosine even for an unnormalised embedder
    unit = unit_rows(embedder.encode([pair_text(pair) for pair in pairs], progress=progress))
    selection = greedy_min_distance(unit @ unit.T, threshold)
    kept: list[QAPair] = []
    drops: list[FilterDrop] = []
    for index, pair in enumerate(pairs):
        if selection.kept[index]:
            kept.append(pair)
            continue
        near = pairs[int(selection.nearest[index])]
        distance = float(selection.distance[index])
        drops.append(
            FilterDrop(
                id=pair.id,
                filter="semantic",
                reason=f"cosine distance {distance:.3f} to kept pair {near.id} < {threshold}",
                score=distance,
                cutoff=float(threshold),
                near_id=near.id,
            )
        )
    return kept, drops


def input_hash(qa_set: QASet) -> str:
    """Hash of what the filters read: every pair's id, question and answer, in order."""
    return sha256_text(*(part for p in qa_set.pairs for part in (p.id, p.question, p.answer)))


def _check_threshold(value: float, name: str, high: float) -> float:
    number = float(value)
    if not 0.0 <= number <= high:  # also rejects NaN
        raise InputError(f"{name} must be in [0, {high:g}], got {value!r}")
    return number


def filter_pairs(
    qa_set: QASet,
    method: str = "both",
    keyword_threshold: float = DEFAULT_THRESHOLD,
    semantic_threshold: float = DEFAULT_THRESHOLD,
    embedder: str | DenseEmbedder = "minilm",
    *,
    progress: bool = False,
) -> FilteredSet:
    """The diverse subset of ``qa_set`` under ``method`` (none, keyword, semantic, both).

    ``keyword_threshold`` is a fraction of the uniqueness range, in [0, 1];
    ``semantic_threshold`` a cosine distance, in [0, 2] (the paper's 0.3 by default; it used
    0.4 for the redundant CPF FAQ). ``embedder`` is a spec (``minilm``, ``mpnet``, a local
    folder) or a loaded dense embedder; it is loaded only for the semantic filter.
    """
    if method not in FILTER_METHODS:
        raise InputError(f"unknown filter method {method!r}; valid: {', '.join(FILTER_METHODS)}")
    if not qa_set.pairs:
        raise InputError(f"QA set {qa_set.name!r} has no pairs to filter")
    use_keyword, use_semantic = method in ("keyword", "both"), method in ("semantic", "both")
    keyword_t = _check_threshold(keyword_threshold, "keyword threshold", 1.0)
    semantic_t = _check_threshold(semantic_threshold, "semantic threshold", 2.0)
    kept, drops = list(qa_set.pairs), []
    if use_keyword:
        kept, drops = keyword_filter(kept, keyword_t)
    embedder_name = None
    if use_semantic:
        if isinstance(embedder, str):  # recorded as the spec, else as the model's own name
            embedder_name = canonical_spec(embedder)
            embedder = load_dense_embedder(embedder)
        else:
            embedder_name = embedder.info.name
        kept, semantic_drops = semantic_filter(kept, semantic_t, embedder, progress=progress)
        drops += semantic_drops
    params = {
        "method": method,
        "keyword_threshold": keyword_t if use_keyword else None,
        "semantic_threshold": semantic_t if use_semantic else None,
        "embedder": embedder_name,
        "tfidf": TFIDF_SETTINGS if use_keyword else None,
    }
    digest = input_hash(qa_set)
    return FilteredSet(
        name=qa_set.name,
        method=cast(FilterMethod, method),  # checked against FILTER_METHODS above
        keyword_threshold=params["keyword_threshold"],
        semantic_threshold=params["semantic_threshold"],
        embedder=embedder_name,
        input_hash=digest,
        kept=kept,
        dropped=drops,
        provenance=Provenance(
            created_at=utc_now(), source_hash=digest, model=embedder_name, params=params
        ),
    )
