"""What the tests read of a knowledge base: many queries searched in batches, and a
reranker's rows of their hits."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ragbound.detect.rerank import RERANK_BATCH, CrossEncoderReranker, relevance_rows
from ragbound.knowledge.protocol import Knowledge
from ragbound.knowledge.query import SEARCH_BATCH, query_texts
from ragbound.stores import Hits


def search_in_batches(
    kb: Knowledge,
    queries: Sequence[str],
    k: int,
    *,
    batch: int = SEARCH_BATCH,
    progress: bool = False,
) -> Hits:
    """Search many queries in batches (bounded memory, a progress bar on a terminal)."""
    from ragbound.progress import progress_bar

    queries = query_texts(queries)  # numbered across the whole batch
    sims, idx = [], []
    with progress_bar(len(queries), "retrieving", progress) as advance:
        for start in range(0, len(queries), batch):
            part = kb.search(queries[start : start + batch], k)
            sims.append(part.similarities)
            idx.append(part.indices)
            advance(len(part.indices))
    return Hits(similarities=np.concatenate(sims), indices=np.concatenate(idx))


def rerank_hits(
    kb: Knowledge,
    reranker: CrossEncoderReranker,
    queries: Sequence[str],
    hits: Hits,
    k: int,
    *,
    batch: int = RERANK_BATCH,
    progress: bool = False,
) -> np.ndarray:
    """The reranker's relevance logits of each query's top-k chunks, rows sorted descending."""
    from ragbound.progress import progress_bar

    rows = []
    with progress_bar(len(queries), "reranking", progress) as advance:
        for start in range(0, len(queries), batch):
            part = list(queries[start : start + batch])
            passages = [
                [kb.chunk_at(int(j)).text for j in row[:k]]
                for row in hits.indices[start : start + batch]
            ]
            rows.append(relevance_rows(reranker, part, passages))
            advance(len(part))
    return np.concatenate(rows)
