"""The combined statistic: one learned score over retrieval features, with a conformal p-value.

The features (higher = closer), the leave-documents-out learning and what the p-value rests
on are in docs/online-test.md ("A learned score"). In short: the model is learned on one part
of the calibration queries only, so its scores of the other (conformal) part are an exact
conformal null; the masked examples shape the score, so a poor model costs power, never
validity. Every weight is <= 0 so a query farther on every feature never scores as more
in-knowledge.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, PrivateAttr

from ragbound.corpus.chunker import split_sentences
from ragbound.corpus.units import Granularity, granularity_label
from ragbound.detect.config import COMBINED
from ragbound.errors import InputError
from ragbound.knowledge.protocol import Knowledge
from ragbound.knowledge.query import Prepared
from ragbound.stats import EmpiricalNull
from ragbound.stats.combined import (
    LinearScore,
    bm25_idf,
    document_gap,
    similarity_features,
    stack_features,
    weighted_overlap,
)
from ragbound.stores import Hits
from ragbound.stores.lexical import BM25Store, word_tokens

# nearest chunks each feature row reads (fewer in a knowledge base of under 64 chunks)
DEPTH = 32
OVERLAP_DEPTH = 8
# the IDF-weighted word-overlap features, over the embedder's and BM25's candidates
OVERLAP = "hybrid_overlap"
SENTENCE_OVERLAP = "sentence_overlap"
# how far the nearest document stands out (all units together)
DOCUMENT_GAP = "document_gap"
# the similarity to the nearest learning query (dense knowledge bases)
QUERY_SIMILARITY = "query_similarity"
# documents of this many next-nearest chunks are masked beside the nearest one's: a corpus
# loaded one record per paragraph (no document field) keeps a question's other paragraphs
# otherwise, and the masked question is then not out of knowledge
MASK_NEIGHBOURS = 2
QUERY_BATCH = 256


def views(kb: Knowledge) -> tuple[tuple[Granularity, ...], ...]:
    """Granularities searched for features: each indexed unit, and all of them together."""
    indexed = kb.indexed
    single = tuple((g,) for g in indexed)
    return single if len(indexed) == 1 else (*single, indexed)


def _reused(kb: Knowledge, view: tuple[Granularity, ...], hits: Hits | None, k: int, n: int):
    """``hits`` (the caller's search of ``kb`` for the ``n`` queries) cut to ``k`` when they
    are what searching ``view`` at ``k`` returns: ``view`` is ``kb``'s own granularity, and
    the search is exact (its first k rows are a k-search's, ties by the lower row) or was
    exactly k deep (an approximate search's rows depend on k). None: search ``view``."""
    if hits is None or view != tuple(kb.granularity) or hits.indices.shape[0] != n:
        return None
    depth = hits.indices.shape[1]
    if depth == k or (depth > k and kb.store.describe().exact):
        return Hits(similarities=hits.similarities[:, :k], indices=hits.indices[:, :k])
    return None


def _search(kb: Knowledge, encoded: np.ndarray | list[str], k: int) -> Hits:
    parts = [
        kb.store.search(encoded[s : s + QUERY_BATCH], k)
        for s in range(0, len(encoded), QUERY_BATCH)
    ]
    return Hits(
        similarities=np.concatenate([p.similarities for p in parts]),
        indices=np.concatenate([p.indices for p in parts]),
    )


def masked_hits(
    kb: Knowledge, encoded: np.ndarray | list[str], k: int, masks: Sequence[np.ndarray]
) -> tuple[Hits, np.ndarray]:
    """Top-k chunks per query with the chunk rows ``masks[i]`` left out of query i's search.

    Fetches k plus the largest mask and drops masked rows (exact when the store is exact).
    Returns the hits of the queries that keep k chunks, and which queries those are (bool).
    """
    fetch = min(len(kb), k + max((len(m) for m in masks), default=0))
    hits = _search(kb, encoded, fetch)
    sims = np.zeros((len(masks), k))
    rows = np.zeros((len(masks), k), dtype=np.int64)
    kept = np.zeros(len(masks), dtype=bool)
    for i, mask in enumerate(masks):
        keep = ~np.isin(hits.indices[i], mask)
        if keep.sum() >= k:
            kept[i] = True
            sims[i] = hits.similarities[i][keep][:k]
            rows[i] = hits.indices[i][keep][:k]
    return Hits(similarities=sims[kept], indices=rows[kept]), kept


class QueryFeatures:
    """Feature rows of queries (full index), and of the same queries with their documents
    masked (leave-documents-out), plus the raw top-``depth`` rows of every view.

    ``references`` are the vectors of the queries the combined score learned from, read by
    the query-similarity feature (dense knowledge bases only). With ``masked`` the queries
    are the learning queries and their own references: each row leaves itself out, and a
    masked row also leaves out the references about its masked documents (a reference is
    about the document of its nearest chunk).

    ``prepared`` (the queries validated and embedded) and ``hits`` (their search of ``kb``
    at its own granularity) come from a caller that has them, the Gate: the queries are then
    not embedded again, and that view is not searched again when the hits are what its
    search would return (:func:`_reused`).
    """

    def __init__(
        self,
        kb: Knowledge,
        queries: Sequence[str],
        depth: int,
        *,
        masked: bool = False,
        references: np.ndarray | None = None,
        prepared: Prepared | None = None,
        hits: Hits | None = None,
    ):
        self.kb = kb
        self.depth = depth
        self.queries = list(queries)
        self.views = views(kb)
        if prepared is None:
            prepared = kb.prepare(self.queries)
        # what the store searches with: query vectors (dense) or the texts (BM25)
        encoded = list(prepared.texts) if prepared.vectors is None else prepared.vectors
        n = len(self.queries)
        self.hits = {
            v: _reused(kb, v, hits, depth, n) or _search(kb.at_granularity(v), encoded, depth)
            for v in self.views
        }
        self.lexical = lexical_candidates(kb, self.queries, OVERLAP_DEPTH)
        self.query_words = [set(w) for w in word_tokens(self.queries)]
        self._encoded = encoded
        self.references = None
        if isinstance(encoded, np.ndarray):
            self.references = encoded if masked else references
        everyone = np.arange(len(self.queries))
        own = [{i} for i in everyone] if masked else None
        self.features = self._features(self.hits, everyone, own, self.lexical)
        self.masked_hits: dict[tuple[Granularity, ...], Hits] = {}
        self.masked_rows = np.zeros(0, dtype=np.int64)
        self.groups: list[str] = []  # per chunk row, its group (masked queries only)
        self.masked_groups: list[set[str]] = []  # per query, the groups its masking left out
        if masked:
            self.groups = kb.groups()
            docs = self._masked_documents(self.hits[self.views[-1]])
            masks = self._rows_of(docs)
            found = {
                v: masked_hits(kb.at_granularity(v), encoded, depth, masks) for v in self.views
            }
            kept = np.logical_and.reduce([kept_v for _, kept_v in found.values()])
            # only rows every view could fill (a document covering most chunks leaves fewer)
            self.masked_hits = {
                v: Hits(similarities=h.similarities[kept[in_v]], indices=h.indices[kept[in_v]])
                for v, (h, in_v) in found.items()
            }
            self.masked_rows = np.flatnonzero(kept)
            about: dict[str, set[int]] = {}  # group -> the queries about it
            for j, row in enumerate(self.hits[self.views[-1]].indices[:, 0]):
                about.setdefault(self.groups[int(row)], set()).add(j)
            self.masked_groups = docs
            left_out = [{i}.union(*(about.get(d, ()) for d in docs[i])) for i in self.masked_rows]
            lexical = lexical_candidates(
                kb,
                [self.queries[i] for i in self.masked_rows],
                OVERLAP_DEPTH,
                [masks[i] for i in self.masked_rows],
            )
            self.masked_features = self._features(
                self.masked_hits, self.masked_rows, left_out, lexical
            )

    def _masked_documents(self, hits: Hits) -> list[set[str]]:
        """Per query, the groups left out (documents, unless the knowledge base names a
        group field): its nearest chunk's (and the next MASK_NEIGHBOURS chunks')."""
        return [
            {self.groups[int(r)] for r in top} for top in hits.indices[:, : 1 + MASK_NEIGHBOURS]
        ]

    def _rows_of(self, documents: list[set[str]]) -> list[np.ndarray]:
        """Per query, the chunk rows of its groups."""
        doc_rows: dict[str, list[int]] = {}
        for row, group in enumerate(self.groups):
            doc_rows.setdefault(group, []).append(row)
        return [
            np.array(sorted(r for d in docs for r in doc_rows[d]), dtype=np.int64)
            for docs in documents
        ]

    def _query_similarity(
        self, query_rows: np.ndarray, left_out: list[set[int]] | None
    ) -> np.ndarray:
        """Each query's similarity to its nearest reference query (those ``left_out`` of
        its row excepted; -1 when none is left)."""
        sims = np.asarray(self._encoded)[query_rows] @ np.asarray(self.references).T
        for i, skip in enumerate(left_out or ()):
            sims[i, sorted(skip)] = -np.inf
        return np.maximum(sims.max(axis=1), -1.0)

    def _overlap(
        self, query_rows: np.ndarray, chunk_rows: np.ndarray, lexical: list[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per query, the best IDF-weighted share of its words found in one candidate chunk,
        and in one sentence of a candidate chunk (a rare word matched counts for more). The
        candidates: its OVERLAP_DEPTH nearest chunks and its ``lexical`` ones."""
        corpus = corpus_words(self.kb)
        chunk_best = np.zeros(len(query_rows))
        sentence_best = np.zeros(len(query_rows))
        for i, (q, row, extra) in enumerate(zip(query_rows, chunk_rows, lexical, strict=True)):
            rows = sorted({int(c) for c in row[:OVERLAP_DEPTH]} | {int(c) for c in extra})
            found = corpus.chunk_words(rows, self._text)
            terms = corpus.query_terms(self.query_words[int(q)])
            words = np.concatenate([f.words for f in found])
            of = np.repeat(np.arange(len(found)), [len(f.words) for f in found])
            chunk_best[i] = weighted_overlap(*terms, words, of, len(found))
            sentences, of, first = sentences_of(found)
            sentence_best[i] = weighted_overlap(*terms, sentences, of, int(first[-1]))
        return chunk_best, sentence_best

    def _text(self, row: int) -> str:
        return self.kb.chunks[row].text

    def _document_gap(self, hits: Hits) -> np.ndarray:
        codes: dict[str, int] = {}
        documents = [
            [codes.setdefault(self.kb.chunks[int(r)].doc_id, len(codes)) for r in row]
            for row in hits.indices
        ]
        return document_gap(hits.similarities, np.array(documents, dtype=np.int64))

    def _features(
        self,
        hits: dict[tuple[Granularity, ...], Hits],
        query_rows: np.ndarray,
        left_out: list[set[int]] | None,
        lexical: list[np.ndarray],
    ) -> dict:
        features: dict[str, np.ndarray] = {}
        for v, h in hits.items():
            features |= similarity_features(granularity_label(v), h.similarities)
        everything = hits[self.views[-1]]
        features[DOCUMENT_GAP] = self._document_gap(everything)
        features[OVERLAP], features[SENTENCE_OVERLAP] = self._overlap(
            query_rows, everything.indices, lexical
        )
        if self.references is not None:
            features[QUERY_SIMILARITY] = self._query_similarity(query_rows, left_out)
        return features

    def names(self) -> tuple[str, ...]:
        return tuple(self.features)

    def matrix(self, *, masked: bool = False) -> np.ndarray:
        return stack_features(self.masked_features if masked else self.features, self.names())


@dataclass(frozen=True)
class ChunkWords:
    """One chunk's words as vocabulary ids of the corpus's BM25 index (unique, int32), and
    each of its sentences' (concatenated; ``sentence_of`` numbers each entry's sentence)."""

    words: np.ndarray
    sentence_words: np.ndarray
    sentence_of: np.ndarray
    n_sentences: int


def sentences_of(found: Sequence[ChunkWords]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sentences of the ``found`` chunks, numbered on: their words, each word's sentence,
    and each chunk's first sentence (one entry more: the number of sentences)."""
    first = np.cumsum([0] + [f.n_sentences for f in found])
    words = np.concatenate([f.sentence_words for f in found])
    of = np.concatenate([f.sentence_of + n for f, n in zip(found, first, strict=False)])
    return words, of, first


# Chunks whose words a corpus keeps between checks (least recently used out): about 1 KB
# each, 7 KB as sets of strings (benchmarks.run lexical-scale), so 20 MB at the bound.
# Tokenizing a check's candidate chunks and their sentences was 6 of its 18 ms (COVID-QA,
# query embedding cached).
TOKENIZED_CHUNKS = 20_000


class CorpusWords:
    """The chunks' BM25 index, each word's BM25 IDF among them (higher = rarer; a word no
    chunk holds weighs most), from one tokenization of the chunks; and the words of the
    chunks checks read, kept (up to :data:`TOKENIZED_CHUNKS`) as vocabulary ids."""

    def __init__(self, index: BM25Store, idf: dict[str, float], unseen: float):
        self.index = index
        self.idf = idf
        self.unseen = unseen
        self._chunks: OrderedDict[int, ChunkWords] = OrderedDict()
        self._lock = threading.Lock()  # the service's threads share one corpus

    def weight(self, word: str) -> float:
        return self.idf.get(word, self.unseen)

    def query_terms(self, words: set[str]) -> tuple[np.ndarray, np.ndarray, float]:
        """The ids (sorted) of the query words some chunk holds, their weights, and the
        weight of all the query's words."""
        known = sorted((self.index.vocab[w], self.idf[w]) for w in words if w in self.idf)
        ids = np.array([i for i, _ in known], dtype=np.int64)
        weights = np.array([w for _, w in known], dtype=np.float64)
        return ids, weights, float(sum(self.weight(w) for w in words))

    def chunk_words(self, rows: Sequence[int], texts: Callable[[int], str]) -> list[ChunkWords]:
        """The words of chunk ``rows`` (``texts(row)`` is a chunk's text), tokenized once."""
        with self._lock:
            found = {r: self._chunks[r] for r in rows if r in self._chunks}
            for row in found:
                self._chunks.move_to_end(row)
        missing = [r for r in dict.fromkeys(rows) if r not in found]
        if missing:
            made = dict(zip(missing, self._tokenize([texts(r) for r in missing]), strict=True))
            with self._lock:
                self._chunks.update(made)
                while len(self._chunks) > TOKENIZED_CHUNKS:
                    self._chunks.popitem(last=False)
            found |= made
        return [found[r] for r in rows]

    def _tokenize(self, texts: list[str]) -> list[ChunkWords]:
        sentences = [split_sentences(text) or [text] for text in texts]
        flat = word_tokens([s for group in sentences for s in group])
        out, start = [], 0
        for tokens, group in zip(word_tokens(texts), sentences, strict=True):
            each = [self._ids(words) for words in flat[start : start + len(group)]]
            start += len(group)
            out.append(
                ChunkWords(
                    words=self._ids(tokens),
                    sentence_words=np.concatenate(each),
                    sentence_of=np.repeat(np.arange(len(each)), [len(e) for e in each]),
                    n_sentences=len(each),
                )
            )
        return out

    def _ids(self, tokens: list[str]) -> np.ndarray:
        vocab = self.index.vocab
        return np.unique(np.array([vocab[t] for t in tokens if t in vocab], dtype=np.int32))


_CORPORA: dict[str, CorpusWords] = {}
# One build per corpus even when a service's threads ask at once; the lock is held while
# building, so a second thread waits for the index instead of building its own.
_CORPORA_LOCK = threading.Lock()


def corpus_words(kb: Knowledge) -> CorpusWords:
    """The knowledge base's :class:`CorpusWords`, built once per corpus (kept for the last
    few corpora a process used; safe to call from several threads)."""
    key = kb.corpus_hash
    found = _CORPORA.get(key)  # the per-check path: no lock once the index is built
    if found is not None:
        return found
    with _CORPORA_LOCK:
        found = _CORPORA.get(key)
        if found is None:
            found = index_words([chunk.text for chunk in kb.chunks])
            while len(_CORPORA) >= 4:
                del _CORPORA[next(iter(_CORPORA))]
            _CORPORA[key] = found
    return found


def index_words(texts: Sequence[str]) -> CorpusWords:
    """The :class:`CorpusWords` of chunk ``texts`` (one BM25 index, the IDF of each word)."""
    index = BM25Store(texts)
    counts = index.document_frequencies()
    n = len(index)
    table = dict(zip(counts, bm25_idf(list(counts.values()), n).tolist(), strict=True))
    return CorpusWords(index, table, float(bm25_idf([0], n)[0]))


def lexical_candidates(
    kb: Knowledge,
    queries: Sequence[str],
    depth: int,
    masks: Sequence[np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Per query, the chunk rows of its ``depth`` best BM25 matches among the knowledge
    base's chunks, rows ``masks[i]`` left out of query i's."""
    index = corpus_words(kb).index
    widest = max((len(m) for m in masks), default=0) if masks is not None else 0
    hits = index.search(list(queries), min(len(kb), depth + widest))
    if masks is None:
        return list(hits.indices[:, :depth])
    return [row[~np.isin(row, mask)][:depth] for row, mask in zip(hits.indices, masks, strict=True)]


def feature_depth(kb: Knowledge) -> int:
    """Chunks per feature row: :data:`DEPTH`, or half the chunks of a small knowledge base
    (so that a query's masked search still fills its row)."""
    return max(1, min(DEPTH, len(kb) // 2))


class CombinedModel(BaseModel):
    """The combined statistic as stored in the calibration manifest: plain JSON.

    ``null_scores`` are the conformal part's scores (full index), the empirical null;
    ``n_learning`` queries (a disjoint part, drawn with ``seed``) taught the weights, and
    are the ``reference_queries`` the query-similarity feature compares with (empty for a
    lexical knowledge base).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    names: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    null_scores: tuple[float, ...]
    depth: int
    n_learning: int
    n_learning_masked: int
    seed: int
    reference_queries: tuple[str, ...] = ()
    _reference_vectors: np.ndarray | None = PrivateAttr(default=None)

    def references(self, kb: Knowledge) -> np.ndarray | None:
        """The learning queries' vectors (embedded once), or None when the score reads no
        query similarity (a lexical knowledge base)."""
        if not self.reference_queries:
            return None
        if self._reference_vectors is None:
            self._reference_vectors = kb.embed(list(self.reference_queries))
        return self._reference_vectors

    def linear(self) -> LinearScore:
        return LinearScore(self.names, self.mean, self.scale, self.coef, self.intercept)

    def null(self) -> EmpiricalNull:
        return EmpiricalNull(np.asarray(self.null_scores))

    def scores(
        self,
        kb: Knowledge,
        queries: Sequence[str],
        *,
        prepared: Prepared | None = None,
        hits: Hits | None = None,
    ) -> tuple[np.ndarray, QueryFeatures]:
        """Scores (higher = more out of knowledge) of queries against the full index.

        ``prepared`` and ``hits``: the queries already embedded and searched (see
        :class:`QueryFeatures`); the scores are the same as without them."""
        found = QueryFeatures(
            kb,
            queries,
            self.depth,
            references=self.references(kb),
            prepared=prepared,
            hits=hits,
        )
        if found.names() != self.names:
            raise InputError(
                "the features this knowledge base gives are not the ones the combined "
                f"statistic was learned on ({', '.join(self.names)}): its granularities "
                "changed, or an older ragbound made the calibration; calibrate again"
            )
        return self.linear().score(found.matrix()), found


class Candidate(BaseModel):
    """One statistic ``calibrate --statistic auto`` compared, with its estimated power on
    the learning part's leave-documents-out queries: AUROC against the same queries with
    the full index, and the share of them flagged at alpha."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    statistic: str
    k: int
    granularity: str
    auroc: float
    flagged: float

    @property
    def label(self) -> str:
        if self.statistic == COMBINED:
            return COMBINED
        return f"{self.granularity} {self.statistic}" + ("" if self.k == 1 else f" k={self.k}")


class Selection(BaseModel):
    """What ``calibrate --statistic auto`` picked and why: every candidate, best AUROC first.

    ``proposed`` is the simplest candidate whose AUROC is within ``tolerance`` of the best's:
    one standard error of the best's AUROC (Hanley-McNeil). ``picked`` is ``proposed``, or
    the ``default`` (MSS) when ``kept_default_because`` says why not: the proxy could not
    simulate an uncovered topic, or ``proposed`` is not ahead of the default by more than
    its standard error (:func:`ragbound.detect.select.keep_default_because`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    picked: Candidate
    candidates: tuple[Candidate, ...]
    alpha: float
    n_learning: int
    n_learning_masked: int
    seed: int
    tolerance: float
    # what the one-standard-error rule proposed, and why the default was kept instead
    # (:func:`ragbound.detect.select.keep_default_because`; None: the proposal was taken)
    proposed: Candidate
    default: Candidate
    kept_default_because: str | None = None
    # groups the learning queries' masking left out, and the share of masked queries whose
    # nearest chunk stayed about as close (:class:`ragbound.detect.select.ProxyShape`)
    n_groups: int
    sibling_share: float | None = None

    def reason(self) -> str:
        """One line: what was picked, against what, and why."""
        if self.kept_default_because is not None:
            return f"kept {self.picked.label} (the default): {self.kept_default_because}"
        return (
            f"picked {self.picked.label}: AUROC {self.picked.auroc:.3f} against "
            f"{self.default.auroc:.3f} for the default {self.default.label}, over one "
            f"standard error ahead; {self.n_groups} groups left out"
        )


def learn(learning: QueryFeatures) -> LinearScore:
    """The combined score learned from a learning part's full-index and masked rows."""
    if len(learning.masked_rows) < 2:
        raise InputError(
            "the combined statistic needs documents to leave out: fewer than 2 calibration "
            "queries kept enough chunks once their document was masked (index more documents)"
        )
    return LinearScore.fit(learning.names(), learning.matrix(), learning.matrix(masked=True))


def combined_model(learning: QueryFeatures, conformal: QueryFeatures, seed: int) -> CombinedModel:
    """Learn on ``learning``; the null is the learned score of the ``conformal`` queries."""
    linear = learn(learning)
    return CombinedModel(
        names=linear.names,
        mean=linear.mean,
        scale=linear.scale,
        coef=linear.coef,
        intercept=linear.intercept,
        null_scores=tuple(linear.score(conformal.matrix()).tolist()),
        depth=learning.depth,
        n_learning=len(learning.queries),
        n_learning_masked=len(learning.masked_rows),
        seed=seed,
        reference_queries=tuple(learning.queries) if learning.references is not None else (),
    )
