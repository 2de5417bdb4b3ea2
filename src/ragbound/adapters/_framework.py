"""Knowledge over a framework's own search (no framework imported here): what the adapters on
the user's own LangChain vector store, LlamaIndex retriever and Haystack retriever share.

``closeness`` says how a score becomes a similarity (higher = closer): ``"cosine"`` (the
cosine itself: every statistic), ``"similarity"`` (higher = closer), ``"distance"`` (lower =
closer; negated) or ``"relevance"`` (in [0, 1], higher = closer). The last three give the
order only: the rank statistics (:data:`RANK_STATISTICS`) alone are allowed. ``combined``
needs the whole corpus, which these searches do not list: always refused.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from itertools import pairwise
from typing import Any, Literal

import numpy as np

from ragbound.artifacts import sha256_text
from ragbound.corpus import Chunk
from ragbound.corpus import Document as RagboundDocument
from ragbound.corpus.chunker import make_chunk
from ragbound.embedders.base import Similarity
from ragbound.errors import InputError
from ragbound.knowledge.protocol import Searching
from ragbound.knowledge.query import QueryEmbedder
from ragbound.knowledge.retriever import ChunkOnly
from ragbound.knowledge.tripwire_flags import is_tripwire
from ragbound.results import Neighbour
from ragbound.stats.names import STATISTICS
from ragbound.stores import Hits, SearchInfo

Closeness = Literal["cosine", "similarity", "distance", "relevance"]
CLOSENESS_KINDS: tuple[Closeness, ...] = ("cosine", "similarity", "distance", "relevance")
RANK_STATISTICS: tuple[str, ...] = ("mss", "knn", "fisher", "simes")
"""Statistics whose p-values depend only on the order of scores (any increasing transform)."""
UNKNOWN_SIZE = sys.maxsize
ORDER_TOLERANCE = 1e-6

Found = tuple[str | None, str, float, Any]
"""One search result: the document's id (None: none), its text, its score, the original."""
MET_LIMIT = 4096  # tripwire results kept per thread until read


def metadata_of(original: Any) -> dict[str, Any] | None:
    """A framework result's metadata: LangChain's and LlamaIndex's ``metadata``, Haystack's
    ``meta``."""
    for name in ("metadata", "meta"):
        value = getattr(original, name, None)
        if isinstance(value, dict):
            return value
    return None


def _key(query: Any) -> bytes | str:
    return query if isinstance(query, str) else np.asarray(query, np.float32).tobytes()


class Rows:
    """Row numbers of the documents searches returned, in the order first seen (thread-safe):
    keyed by id, or by a SHA-256 of the text when the framework gives none."""

    def __init__(self, source: str):
        self._source = source
        self._lock = threading.Lock()
        self._rows: dict[str, int] = {}
        self.chunks: list[Chunk] = []
        self.by_chunk_id: dict[str, Any] = {}

    def row_of(self, key: str | None, text: str, original: Any) -> int:
        key = key or sha256_text(text)[:16]
        with self._lock:
            row = self._rows.get(key)
            if row is None:
                row = self._rows[key] = len(self.chunks)
                chunk = make_chunk(
                    RagboundDocument(id=key, text=text, source=self._source), 0, text
                )
                self.chunks.append(chunk)
                self.by_chunk_id[chunk.id] = original
            return row


def model_name(component: Any, *attributes: str) -> str:
    """``Class:model`` for an embedding component, the model being the first of its
    ``attributes`` set (a string); the class name alone when none is."""
    model = next((value for name in attributes if (value := getattr(component, name, None))), None)
    kind = type(component).__name__
    return f"{kind}:{model}" if isinstance(model, str) else kind


def embedder_name(embedder: Any) -> str:
    """A ragbound embedder's ``name`` (its class name when it has none)."""
    return str(getattr(embedder, "name", "") or type(embedder).__name__)


def check_guard_on(guard: Any, kind: type, k: object, returned: str) -> None:
    """InputError unless ``guard`` was calibrated on ``kind`` and ``k`` (the ``returned``
    items on ``answer``) is a positive integer."""
    if not isinstance(guard.kb, kind):
        raise InputError(f"the guard must be calibrated on a {kind.__name__}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"k must be a positive integer ({returned} returned), got {k!r}")


def check_order(similarities: list[float], closeness: Closeness) -> None:
    """Searches list nearest first: similarities must not grow down the list."""
    if any(b > a + ORDER_TOLERANCE for a, b in pairwise(similarities)):
        other = "similarity" if closeness == "distance" else "distance"
        raise InputError(
            f"the store's scores run the wrong way for closeness={closeness!r} (nearest first, "
            f"got {similarities[:4]}): declare closeness={other!r}"
        )


class FrameworkSearch:
    """A :class:`~ragbound.stores.Retriever` over a framework's one-query search; subclasses
    give ``backend``, ``query_kind`` and ``_search_one(query, k) -> list[Found]``."""

    backend = "framework"
    query_kind: Literal["vector", "text"] = "text"

    def __init__(
        self,
        *,
        closeness: Closeness,
        similarity: Similarity = "cosine",
        size: int | None = None,
        exact: bool = False,
    ):
        if closeness not in CLOSENESS_KINDS:
            raise InputError(
                f"closeness must be one of {', '.join(CLOSENESS_KINDS)}, got {closeness!r}"
            )
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise InputError(f"size must be a positive integer (documents), got {size!r}")
        self.closeness: Closeness = closeness
        self._similarity: Similarity = similarity
        self._size = size
        self._exact = exact
        self.rows = Rows(self.backend)
        self._dimension = 0
        self.calls = 0
        self._local = threading.local()
        # results searched beyond k, so that this many tripwires in the top need no second
        # search (set when tripwires are declared: the rule's k; 0: none declared, and the
        # tripwires a search meets are only left out, not kept for the rule)
        self.tripwire_margin = 0

    @property
    def dimension(self) -> int:
        """The query vectors' length (0 before the first vector search, or for texts)."""
        return self._dimension

    @property
    def similarity(self) -> Similarity:
        return self._similarity

    @property
    def exact_scores(self) -> bool:
        """True when the scores are the similarity itself (not only its order)."""
        return self.closeness == "cosine"

    def __len__(self) -> int:
        return UNKNOWN_SIZE if self._size is None else self._size

    def describe(self) -> SearchInfo:
        return SearchInfo(
            backend=self.backend,
            exact=self._exact,
            similarity=self._similarity,
            # the key a calibration recorded before the rename: keep it, or every saved
            # calibration on a framework store would be refused as another search
            parameters={"scores": self.closeness},
        )

    def search(self, queries: Any, k: int) -> Hits:
        """Top-k rows of each query, one framework call per query (another, deeper, only when
        tripwire documents took places in the top k); InputError when it returns fewer than
        ``k`` documents that are not tripwires. The tripwires a search met are kept for
        :meth:`flagged` (per thread)."""
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
            raise InputError(f"k must be a positive integer, got {k!r}")
        if self.query_kind == "vector":
            queries = np.asarray(queries, dtype=np.float32)
            self._dimension = int(queries.shape[1])
        sims, rows = [], []
        for query in queries:
            knowledge, tripwires = self._search_knowledge(query, int(k))
            if len(knowledge) < k:
                raise InputError(
                    f"the store returned {len(knowledge)} documents for k={k}"
                    + (f" besides {len(tripwires)} tripwires" if tripwires else "")
                    + ": it holds fewer than k (or returns fewer, or a filter dropped them); "
                    "use a smaller k, or let the retriever return more"
                )
            if self.tripwire_margin:  # tripwires declared: the rule reads what this met
                self._met()[_key(query)] = tripwires
            sims.append([similarity for similarity, _ in knowledge[:k]])
            rows.append([self.rows.row_of(*found[:2], found[3]) for _, found in knowledge[:k]])
        return Hits(
            np.array(sims, dtype=np.float32).reshape(-1, k),
            np.array(rows, dtype=np.int64).reshape(-1, k),
        )

    def flagged(self, query: Any) -> list[tuple[float, Found]] | None:
        """The tripwire documents (similarity, result) the latest search of ``query`` in this
        thread met above its k-th document, nearest first (None: not searched); forgotten
        once read."""
        return self._met().pop(_key(query), None)

    def _search_knowledge(
        self, query: Any, k: int
    ) -> tuple[list[tuple[float, Found]], list[tuple[float, Found]]]:
        """(similarity, result) of the documents and of the tripwires, nearest first."""
        depth = k + self.tripwire_margin
        while True:
            self.calls += 1
            found = self._search_one(query, depth)
            scored = [(self.flipped(float(result[2])), result) for result in found]
            check_order([similarity for similarity, _ in scored], self.closeness)
            flags = [is_tripwire(metadata_of(result[3])) for result in found]
            knowledge = [pair for pair, flag in zip(scored, flags, strict=True) if not flag]
            if len(knowledge) >= k or len(found) < depth:
                bound = knowledge[k - 1][0] if len(knowledge) >= k else -np.inf
                tripwires = [
                    pair
                    for pair, flag in zip(scored, flags, strict=True)
                    if flag and pair[0] >= bound
                ]
                return knowledge, tripwires
            depth *= 2  # tripwires took places in the top k: search deeper once more

    def _met(self) -> dict[bytes | str, list[tuple[float, Found]]]:
        met = getattr(self._local, "met", None)
        if met is None or len(met) > MET_LIMIT:  # a caller that never reads them
            met = self._local.met = {}
        return met

    def flipped(self, value: float) -> float:
        """A score as a similarity (higher = closer), or back: ``distance`` negates, the
        other modes keep the value."""
        return -value if self.closeness == "distance" else value

    def _search_one(self, query: Any, k: int) -> list[Found]:
        raise NotImplementedError


class FrameworkKnowledge(ChunkOnly, Searching):
    """:class:`~ragbound.knowledge.protocol.Knowledge` over a :class:`FrameworkSearch`.

    ``embedder`` embeds queries for a vector search (None for a text one); ``name`` names
    the embedding model in the fingerprint; ``version`` tags the store's contents. The
    fingerprint covers the name, the search's description (backend, score mode, similarity)
    and ``version``: not the documents, which the framework does not list.
    """

    path = None
    rows_are = "a framework store's rows are its documents"

    def __init__(
        self, search: FrameworkSearch, embedder: QueryEmbedder | None, *, name: str, version: str
    ):
        if not name.strip():
            raise InputError("name the embedding model: it enters the knowledge's fingerprint")
        self._search = search
        self._embedder = embedder
        self._name = name
        self._version = version
        # read once per decision: its parts are fixed at construction, so hash them once
        self._fingerprint = sha256_text(name, search.describe().summary(), version)

    @property
    def store(self) -> FrameworkSearch:  # type: ignore[override]
        return self._search

    @property
    def chunks(self) -> Sequence[Chunk]:  # type: ignore[override]
        """The documents searches have returned so far, in the order first seen."""
        return self._search.rows.chunks

    def __len__(self) -> int:
        return len(self._search)

    @property
    def statistics(self) -> tuple[str, ...]:
        """The statistics this search's scores support (see the module's notes)."""
        return STATISTICS if self._search.exact_scores else RANK_STATISTICS

    @property
    def statistics_reason(self) -> str:
        corpus = "the framework's store does not list its documents, which combined needs"
        if self._search.exact_scores:
            return corpus
        return (
            f"closeness={self._search.closeness!r} give the order of similarities, not their "
            f"values (and {corpus})"
        )

    @property
    def embedder_name(self) -> str:
        return self._name

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def corpus_hash(self) -> str:
        """The ``version`` tag's hash: the store's documents are not enumerated."""
        return sha256_text(self._search.backend, self._version)

    def query_embedder(self) -> QueryEmbedder | None:
        return self._embedder

    def original(self, chunk_id: str) -> Any:
        """The framework's own result (document, node) behind a decision neighbour's id."""
        return self._search.rows.by_chunk_id[chunk_id]

    def rescored(self, neighbours: Sequence[Neighbour]) -> list[tuple[Any, float]]:
        """The framework's results behind a decision's neighbours, nearest first, each with
        the score (in the framework's units) this search gave it: the result kept is the one
        the first search returned, scored for that search's query."""
        flipped = self._search.flipped
        return [(self.original(n.chunk_id), flipped(n.similarity)) for n in neighbours]
