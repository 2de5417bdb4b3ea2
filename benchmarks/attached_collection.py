"""The collection both attached parts measure: the PubMedQA chunks of ragbound's own exact
knowledge base embedded by ``openai:minilm`` (infinity-emb serving the bundled MiniLM on
loopback) into a Chroma collection on a ``chroma run`` server on loopback, added the way an
application adds them, and attached (``KnowledgeBase.attach``).

benchmarks/attached.py (quality and LangChain latency) and benchmarks/attached_tripwires.py
(the tripwires in the collection) both use it; neither imports the other's set-up.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from benchmarks import datasets
from benchmarks.timing import timed
from ragbound.knowledge import KnowledgeBase

COLLECTION = "pubmedqa"
SPEC = "openai:minilm"
BASE_URL_ENV = "RAGBOUND_EMBED_BASE_URL"


def missing_reason() -> str | None:
    """Why the part cannot run here (chromadb or infinity-emb absent), or None."""
    from tests.support.chroma_server import chroma_binary
    from tests.support.infinity_server import missing_reason as infinity_missing

    if importlib.util.find_spec("chromadb") is None:
        return "chromadb is not installed: pip install 'ragbound[chroma]'"
    if chroma_binary() is None:
        return "the chroma executable is missing beside this Python: pip install 'ragbound[chroma]'"
    return infinity_missing()


def local_kb(corpus: Path) -> tuple[KnowledgeBase, float]:
    """ragbound's own exact knowledge base of ``corpus`` (local MiniLM) and its build time."""
    return timed(
        lambda: KnowledgeBase.build([corpus], embedder="minilm", id_field=datasets.CORPUS_IDS)
    )


@contextmanager
def attached_collection(local: KnowledgeBase) -> Iterator[tuple]:
    """infinity-emb and ``chroma run`` on loopback, ``local``'s chunks embedded through the
    endpoint into a new collection, attached: ``(server, embedder, kb, fill measures)``
    while the block runs (both servers stopped and their data removed after)."""
    from ragbound.embedders import load_dense_embedder
    from tests.support.chroma_server import running_chroma

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        with _serving(tmp), running_chroma(tmp) as server:
            embedder = load_dense_embedder(SPEC)
            filled = fill(server, embedder, local)
            kb = KnowledgeBase.attach(
                server.url(COLLECTION), tmp / "kb", embedder=SPEC, doc_field="doc_id"
            )
            yield server, embedder, kb, filled


def fill(server, embedder, local: KnowledgeBase) -> dict:
    """Embed ``local``'s chunks with ``embedder`` (the endpoint) and add them to a new
    collection as an application would; the embedding throughput and agreement."""
    from tests.support.chroma_server import fill_collection

    texts = [chunk.text for chunk in local.chunks]
    vectors, embed_s = timed(lambda: np.asarray(embedder.encode(texts), dtype=np.float32))
    fill_collection(
        server,
        COLLECTION,
        texts,
        vectors,
        ids=[chunk.id for chunk in local.chunks],
        space="cosine",
        metadatas=[{"doc_id": chunk.doc_id} for chunk in local.chunks],
    )
    return {
        "endpoint_embed_s": embed_s,
        "endpoint_chunks_per_s": len(texts) / embed_s,
        "endpoint_vs_local_min_cosine": float(np.min(np.sum(vectors * local.vectors, axis=1))),
    }


@contextmanager
def _serving(tmp: Path) -> Iterator[str]:
    """infinity serving MiniLM as ``minilm``, with ``$RAGBOUND_EMBED_BASE_URL`` pointing at
    it while the block runs (restored after)."""
    from tests.support.infinity_server import infinity_executable, running_infinity

    executable = infinity_executable()
    assert executable is not None  # missing_reason() said so
    before = os.environ.get(BASE_URL_ENV)
    with running_infinity(executable, tmp / "infinity.log", served=("minilm",)) as base_url:
        os.environ[BASE_URL_ENV] = base_url
        try:
            yield base_url
        finally:
            if before is None:
                os.environ.pop(BASE_URL_ENV, None)
            else:
                os.environ[BASE_URL_ENV] = before
