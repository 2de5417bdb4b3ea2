"""The answerability test: do the chunks retrieved for a question hold what it asks about?

It reads the chunks the relevance test already retrieved (no second search or embedding).
Statistic ``coverage`` (LLM-free): 1 minus the largest share of the question's content-word
weight (each word's BM25 IDF among the chunks) found in one sentence of the :data:`DEPTH`
nearest chunks, higher = more likely unanswerable. The calibration questions' scores make a
conformal null, and the two tests share one alpha
(:func:`ragbound.stats.answerability.shared_alpha`); docs/answerability.md has the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field

from ragbound.corpus.chunker import split_sentences
from ragbound.corpus.function_words import english_function_words
from ragbound.detect.combined import CorpusWords, corpus_words, sentences_of
from ragbound.detect.judge import AnswerabilityJudge
from ragbound.detect.names import ANSWERABILITY_STATISTICS, COVERAGE, JUDGE
from ragbound.errors import InputError
from ragbound.knowledge.protocol import Knowledge
from ragbound.stats import EmpiricalNull
from ragbound.stats.answerability import calibration_p_values, shared_alpha
from ragbound.stats.combined import group_overlaps
from ragbound.stores import Hits
from ragbound.stores.lexical import word_tokens

# nearest chunks read: the gate's default context (what an LLM would be given)
DEPTH = 5
# missing words named in a verdict's evidence
MISSING_SHOWN = 5


class AnswerabilityEvidence(BaseModel):
    """What the answerability test read: the best sentence, its share of the question, and
    the question's words no retrieved chunk holds."""

    sentence: str = Field(description="the retrieved sentence holding most of the question")
    chunk_id: str | None = Field(description="its chunk (None: nothing was retrieved)")
    coverage: float = Field(description="share of the question's word weight it holds, 0-1")
    missing: list[str] = Field(
        description="the question's weightiest words no retrieved chunk holds, rarest first"
    )
    answer_probability: float | None = Field(
        None, description="the LLM judge's probability that the chunks answer it (None: no judge)"
    )


class AnswerabilityVerdict(BaseModel):
    """The answerability test for one question.

    ``score`` is the statistic (higher = more likely unanswerable); ``p_value`` its right
    tail among the calibration questions' scores; ``unanswerable`` = p_value <= ``alpha``,
    the level this test runs at (its share of the gate's alpha).
    """

    statistic: str
    score: float
    p_value: float
    unanswerable: bool = Field(description="p_value <= alpha")
    alpha: float = Field(description="this test's level: its share of the gate's alpha")
    n_calibration: int
    evidence: AnswerabilityEvidence


class AnswerabilityModel(BaseModel):
    """A calibrated answerability test, saved in the calibration's manifest (plain JSON)."""

    statistic: str = COVERAGE
    depth: int = DEPTH
    null: list[float] = Field(description="the calibration questions' scores")
    llm: str | None = Field(
        None, description="the judge's model spec (local, openai:MODEL); None: no judge"
    )
    model_id: str | None = Field(None, description="the judge's model identity at calibration")

    def empirical_null(self) -> EmpiricalNull:
        """The null the p-values are read from."""
        return EmpiricalNull(np.asarray(self.null))

    def level(self, alpha: float, relevance_null: np.ndarray) -> float:
        """The level both tests run at for a gate at ``alpha`` (see
        :func:`~ragbound.stats.answerability.shared_alpha`); ``relevance_null`` holds the
        relevance test's calibration scores, in the same question order as ``null``."""
        relevance = np.asarray(relevance_null, dtype=np.float64)
        if relevance.shape != (len(self.null),):
            raise ValueError(
                f"the two nulls differ in size ({len(self.null)} and {relevance.size})"
            )
        p = np.column_stack(
            [calibration_p_values(relevance), calibration_p_values(np.asarray(self.null))]
        )
        return shared_alpha(p, alpha)


@dataclass(frozen=True)
class Coverage:
    """One question's coverage score (higher = less of it found) and its evidence."""

    score: float
    evidence: AnswerabilityEvidence


def coverage(kb: Knowledge, texts: Sequence[str], hits: Hits, depth: int = DEPTH) -> list[Coverage]:
    """The ``coverage`` statistic of each text against the first ``depth`` chunks of its row
    of ``hits`` (a search of ``kb``), with its evidence."""
    corpus = corpus_words(kb)
    words = question_words(texts)
    return [_coverage(kb, corpus, words[i], hits.indices[i, :depth]) for i in range(len(texts))]


def question_words(texts: Sequence[str]) -> list[set[str]]:
    """Each text's content words: BM25's tokens (lower-cased) without English function
    words. BM25's own stop list is short (33 words) and keeps "how", "which", "each": a
    corpus rarely holds them, so they would weigh as much as a missing name."""
    function_words = english_function_words()
    return [set(words) - function_words for words in word_tokens(list(texts))]


def _coverage(kb: Knowledge, corpus: CorpusWords, words: set[str], row: np.ndarray) -> Coverage:
    rows = [int(r) for r in row if r >= 0]
    if not rows or not words:  # nothing to find, or nothing asked: nothing holds it
        evidence = AnswerabilityEvidence(sentence="", chunk_id=None, coverage=0.0, missing=[])
        return Coverage(score=1.0 if words else 0.0, evidence=evidence)
    found = corpus.chunk_words(rows, lambda r: kb.chunk_at(r).text)
    ids, weights, total = corpus.query_terms(words)
    sentence_words, of, first = sentences_of(found)
    shares = group_overlaps(ids, weights, total, sentence_words, of, int(first[-1]))
    best = int(np.argmax(shares))
    chunk = int(np.searchsorted(first, best, side="right") - 1)
    held = np.concatenate([f.words for f in found])
    evidence = AnswerabilityEvidence(
        sentence=_sentence(kb.chunk_at(rows[chunk]).text, best - int(first[chunk])),
        chunk_id=kb.chunk_at(rows[chunk]).id,
        coverage=float(shares[best]),
        missing=_missing(corpus, words, held),
    )
    return Coverage(score=1.0 - float(shares[best]), evidence=evidence)


def _sentence(text: str, index: int) -> str:
    sentences = split_sentences(text) or [text]
    return sentences[min(index, len(sentences) - 1)]


def _missing(corpus: CorpusWords, words: set[str], held: np.ndarray) -> list[str]:
    vocab = corpus.index.vocab
    held_set = set(held.tolist())
    absent = [w for w in words if vocab.get(w) not in held_set]
    return sorted(absent, key=lambda w: (-corpus.weight(w), w))[:MISSING_SHOWN]


def calibrate_answerability(
    kb: Knowledge,
    queries: Sequence[str],
    hits: Hits,
    statistic: str = COVERAGE,
    *,
    judge: AnswerabilityJudge | None = None,
    llm: str | None = None,
    progress: bool = False,
) -> AnswerabilityModel:
    """The answerability test calibrated on in-knowledge ``queries`` (the relevance test's
    calibration questions, in its order) and their ``hits`` (a search of ``kb`` at least
    :data:`DEPTH` deep, or as deep as ``kb`` is). ``judge`` (statistic ``judge`` only) scores
    them; ``llm`` is its spec, recorded so that a gate loading the calibration makes it
    again."""
    check_answerability(statistic)
    depth = min(DEPTH, hits.indices.shape[1])
    if (statistic == JUDGE) != (judge is not None):
        raise InputError(f"the {JUDGE} statistic, and it alone, needs an LLM (llm=...)")
    found = scored(kb, queries, hits, depth, judge, progress=progress)
    return AnswerabilityModel(
        statistic=statistic,
        depth=depth,
        null=[c.score for c in found],
        llm=llm if judge is not None else None,
        model_id=judge.llm.model_id if judge is not None else None,
    )


def scored(
    kb: Knowledge,
    texts: Sequence[str],
    hits: Hits,
    depth: int,
    judge: AnswerabilityJudge | None = None,
    *,
    progress: bool = False,
) -> list[Coverage]:
    """Each text's score and evidence: :func:`coverage`'s, or with ``judge`` the judge's
    probability of NO, the coverage evidence kept beside it."""
    found = coverage(kb, texts, hits, depth)
    if judge is None:
        return found
    passages = [[kb.chunk_at(int(r)).text for r in row[:depth] if r >= 0] for row in hits.indices]
    no = judge.scores(texts, passages, progress=progress)
    return [
        Coverage(score=p, evidence=c.evidence.model_copy(update={"answer_probability": 1 - p}))
        for c, p in zip(found, no, strict=True)
    ]


def check_answerability(statistic: str) -> str:
    """``statistic`` if it names an answerability statistic, else an InputError."""
    if statistic not in ANSWERABILITY_STATISTICS:
        raise InputError(
            f"unknown answerability statistic {statistic!r}: expected one of "
            f"{', '.join(ANSWERABILITY_STATISTICS)} (or off)"
        )
    return statistic
