"""BM25 (bm25s) over chunk texts: the paper's lexical retriever; BM25 score = similarity."""

from __future__ import annotations

from collections.abc import Sequence
from importlib import metadata

import numpy as np

from ragbound.embedders.base import EmbedderInfo, Similarity
from ragbound.stores.base import Hits, QueryKind, SearchInfo, check_k, top_k_rows

BM25_K1 = 1.5
BM25_B = 0.75
# Queries are scored in blocks so a large batch never holds n_queries x n_chunks scores at once.
_BLOCK_QUERIES = 256


def bm25_info() -> EmbedderInfo:
    """Identity of the lexical retriever as recorded in a manifest."""
    version = metadata.version("bm25s")
    return EmbedderInfo(
        name="bm25",
        revision=f"bm25s-{version}-k1={BM25_K1}-b={BM25_B}-stopwords=en",
        dimension=0,
        similarity="bm25",
        kind="lexical",
    )


def word_tokens(texts: Sequence[str]) -> list[list[str]]:
    """Each text's words as BM25 reads them: lower-cased, English stop words removed."""
    import bm25s

    tokens = bm25s.tokenize(list(texts), stopwords="en", return_ids=False, show_progress=False)
    return [list(words) for words in tokens]


class BM25Store:
    """A BM25 index over texts. Rebuilt from the texts on load (no pickled index on disk).

    A :class:`~ragbound.stores.Retriever` over texts: ``search`` takes a list of query texts.
    Scores are BM25 relevance (>= 0, higher = closer), so every test statistic reads them
    exactly like cosine similarities. Top-k is taken from each query's full score row with
    the stores' shared :func:`~ragbound.stores.base.top_k_rows` (ties: lower row first).
    """

    query_kind: QueryKind = "text"
    dimension = 0
    similarity: Similarity = "bm25"

    def __init__(self, texts: Sequence[str]):
        import bm25s

        tokens = bm25s.tokenize(list(texts), stopwords="en", show_progress=False)
        self.retriever = bm25s.BM25(k1=BM25_K1, b=BM25_B)
        self.retriever.index(tokens, show_progress=False)
        self.vocab: dict[str, int] = dict(tokens.vocab)
        self._size = len(texts)
        # how many texts hold each word (by vocab id), for IDF weights read beside the index
        self.document_counts = np.zeros(len(self.vocab), dtype=np.int64)
        for ids in tokens.ids:
            self.document_counts[list(set(ids))] += 1

    def __len__(self) -> int:
        return self._size

    def document_frequencies(self) -> dict[str, int]:
        """How many of the indexed texts hold each word (as :func:`word_tokens` reads it);
        words no text holds (bm25s keeps an empty token in its vocabulary) are left out."""
        counts = self.document_counts[list(self.vocab.values())].tolist()
        return {word: n for word, n in zip(self.vocab, counts, strict=True) if n}

    def describe(self) -> SearchInfo:
        return SearchInfo(
            backend="bm25s",
            exact=True,
            similarity="bm25",
            parameters={"k1": BM25_K1, "b": BM25_B, "stopwords": "en"},
        )

    def search(self, queries: Sequence[str], k: int) -> Hits:
        """Top-k BM25 scores per query; a query with no indexed word scores 0 everywhere."""
        check_k(k, self._size)
        token_lists = word_tokens(queries)
        ids = [[self.vocab[t] for t in tokens if t in self.vocab] for tokens in token_lists]
        scores = np.empty((len(ids), k), dtype=np.float32)
        indices = np.empty((len(ids), k), dtype=np.int64)
        for start in range(0, len(ids), _BLOCK_QUERIES):
            block = ids[start : start + _BLOCK_QUERIES]
            full = np.zeros((len(block), self._size), dtype=np.float32)
            for row, query_ids in enumerate(block):
                if query_ids:
                    full[row] = self.retriever.get_scores_from_ids(query_ids)
            rows = slice(start, start + len(block))
            scores[rows], indices[rows] = top_k_rows(full, k)
        return Hits(similarities=scores, indices=indices)
