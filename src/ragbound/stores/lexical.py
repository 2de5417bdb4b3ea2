"""BM25 (bm25s) over chunk texts: the paper's lexical retriever; BM25 score = similarity."""

from __future__ import annotations

from collections.abc import Sequence
from importlib import metadata

import numpy as np

from ragbound.embedders.base import EmbedderInfo
from ragbound.stores.base import Hits, check_k

BM25_K1 = 1.5
BM25_B = 0.75


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


class BM25Store:
    """A BM25 index over texts. Rebuilt from the texts on load (no pickled index on disk).

    Scores are BM25 relevance (>= 0, higher = closer), so every test statistic reads them
    exactly like cosine similarities.
    """

    def __init__(self, texts: Sequence[str]):
        import bm25s

        self._bm25s = bm25s
        tokens = bm25s.tokenize(list(texts), stopwords="en", show_progress=False)
        self.retriever = bm25s.BM25(k1=BM25_K1, b=BM25_B)
        self.retriever.index(tokens, show_progress=False)
        self.vocab: dict[str, int] = dict(tokens.vocab)
        self._size = len(texts)

    @property
    def size(self) -> int:
        return self._size

    def search(self, queries: Sequence[str], k: int) -> Hits:
        """Top-k BM25 scores per query; a query with no indexed word scores 0 everywhere."""
        from bm25s.tokenization import Tokenized

        check_k(k, self.size)
        token_lists = self._bm25s.tokenize(
            list(queries), stopwords="en", return_ids=False, show_progress=False
        )
        ids = [[self.vocab[t] for t in tokens if t in self.vocab] for tokens in token_lists]
        scores = np.zeros((len(ids), k), dtype=np.float32)
        indices = np.tile(np.arange(k, dtype=np.int64), (len(ids), 1))
        known = [i for i, row in enumerate(ids) if row]
        if known:
            query = Tokenized(ids=[ids[i] for i in known], vocab=self.vocab)
            idx, top = self.retriever.retrieve(query, k=k, show_progress=False, n_threads=1)
            indices[known] = idx
            scores[known] = top
        return Hits(similarities=scores, indices=indices)
