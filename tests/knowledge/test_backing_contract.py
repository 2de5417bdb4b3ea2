"""One contract over every knowledge-base backing: the door a new backing comes in by.

Each backing in ``ragbound.knowledge.BACKINGS`` has a case here that makes a real knowledge
base with it (PostgreSQL and Chroma on real servers, Qdrant and LanceDB embedded). Every case is checked the same way: save and
load, the fingerprint (the same as the same chunks kept locally), search at each granularity
its capabilities allow, ``describe()`` equal to the search actually made, add, float16, and
what it lacks refused before any work with one InputError.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from ragbound.corpus.units import GRANULARITIES, UnitParams
from ragbound.errors import IncompatibleArtifactError, InputError
from ragbound.knowledge import BACKINGS, KnowledgeBase
from ragbound.knowledge.registry import imported
from ragbound.stores.hnsw import HnswParams
from tests.support.chroma_server import ChromaServer, fill_collection
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE

QUERIES = IN_KNOWLEDGE[:3] + OUT_OF_KNOWLEDGE[:2]
ALL_UNITS = UnitParams(granularity=GRANULARITIES)


@dataclass
class Made:
    """A saved knowledge base made with one backing, and what it was made from."""

    folder: Path
    corpus: Path
    embedder: str


def _local(embedder: str, hnsw: HnswParams | None = None) -> Callable[..., Made]:
    def make(corpus: Path, out: Path, units: UnitParams, **_: object) -> Made:
        KnowledgeBase.index([corpus], out, embedder=embedder, hnsw=hnsw, units=units)
        return Made(out, corpus, embedder)

    return make


def _owned(corpus: Path, out: Path, units: UnitParams, pg_dsn: str, **_: object) -> Made:
    store = f"{pg_dsn}&table=contract_{secrets.token_hex(3)}"
    KnowledgeBase.index([corpus], out, store=store, units=units)
    return Made(out, corpus, "minilm")


def _corpus_vectors(corpus: Path) -> tuple[list[Path], list[str], np.ndarray]:
    """The corpus files, their texts and MiniLM vectors (as another application made them)."""
    from ragbound.embedders import load_dense_embedder

    files = sorted(corpus.rglob("*.txt"))
    texts = [f.read_text(encoding="utf-8").strip() for f in files]
    return files, texts, load_dense_embedder("minilm").encode(texts)


def _attached(corpus: Path, out: Path, units: UnitParams, pg_dsn: str, **_: object) -> Made:
    """Another application's table filled with MiniLM vectors of the corpus files."""
    import psycopg
    from pgvector.psycopg import register_vector

    files, texts, vectors = _corpus_vectors(corpus)
    table = f"app_{secrets.token_hex(3)}"
    with psycopg.connect(pg_dsn, autocommit=True) as connection:
        connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(connection)
        connection.execute(f"CREATE TABLE {table} (id text PRIMARY KEY, body text, v vector)")
        with connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {table} VALUES (%s, %s, %s)",
                [
                    (f.stem + f.parent.name, t, v)
                    for f, t, v in zip(files, texts, vectors, strict=True)
                ],
            )
    KnowledgeBase.attach(pg_dsn, out, table=table, text_column="body", vector_column="v")
    return Made(out, corpus, "minilm")


def _chroma(corpus: Path, out: Path, units: UnitParams, chroma: ChromaServer, **_: object) -> Made:
    """Another application's Chroma collection of the corpus files' MiniLM vectors."""
    files, texts, vectors = _corpus_vectors(corpus)
    name = f"app_{secrets.token_hex(3)}"
    ids = [f.stem + f.parent.name for f in files]
    fill_collection(chroma, name, texts, vectors, ids=ids, space="cosine")
    KnowledgeBase.attach(chroma.url(name), out)
    return Made(out, corpus, "minilm")


def _qdrant(corpus: Path, out: Path, units: UnitParams, **_: object) -> Made:
    """Another application's Qdrant collection (embedded mode) of the corpus files."""
    pytest.importorskip("qdrant_client", reason="qdrant-client is not installed (qdrant extra)")
    from tests.qdrantfill import fill

    local = KnowledgeBase.build([corpus])
    url = fill(out.parent / "qdrant", list(local.chunks), np.asarray(local.vectors))
    KnowledgeBase.attach(url, out)
    return Made(out, corpus, "minilm")


def _lancedb(corpus: Path, out: Path, units: UnitParams, **_: object) -> Made:
    """Another application's LanceDB table (embedded, a folder) of the corpus files."""
    pytest.importorskip("lancedb", reason="lancedb is not installed (the lancedb extra)")
    from tests.lancefill import fill

    local = KnowledgeBase.build([corpus])
    url = fill(out.parent / "lance", list(local.chunks), np.asarray(local.vectors))
    KnowledgeBase.attach(url, out)
    return Made(out, corpus, "minilm")


MAKERS: dict[str, Callable[..., Made]] = {
    "exact": _local("minilm"),
    "bm25": _local("bm25"),
    "hnsw": _local("minilm", HnswParams(m=8, ef_search=16)),
    "postgres": _owned,
    "postgres-attached": _attached,
    "chroma-attached": _chroma,
    "qdrant-attached": _qdrant,
    "lancedb-attached": _lancedb,
}
NEEDS_POSTGRES = ("postgres", "postgres-attached")


def test_every_backing_has_a_case() -> None:
    """A backing joins the registry only with a case in this contract."""
    assert sorted(BACKINGS) == sorted(MAKERS)


def test_the_registry_imports_each_backing_of_its_kind() -> None:
    """Each dotted path resolves to the class of that kind, and so does the class of the
    tripwire records a backing's capabilities name."""
    for kind, backing in BACKINGS.items():
        assert backing.kind == kind
        records = backing.capabilities.tripwires
        assert records is None or imported(records).__name__ == records.rpartition(".")[2]


@pytest.fixture(params=sorted(MAKERS))
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def dsn(kind: str, request: pytest.FixtureRequest) -> str | None:
    return request.getfixturevalue("pg_dsn") if kind in NEEDS_POSTGRES else None


def _units(kind: str) -> UnitParams:
    """Every unit the backing stores (all of them, or chunks only)."""
    capabilities = BACKINGS[kind].capabilities
    return ALL_UNITS if capabilities.units == GRANULARITIES else UnitParams()


@pytest.fixture
def server(kind: str, request: pytest.FixtureRequest) -> ChromaServer | None:
    return request.getfixturevalue("chroma") if kind == "chroma-attached" else None


@pytest.fixture
def made(
    kind: str, dsn: str | None, server: ChromaServer | None, corpus_dir: Path, tmp_path: Path
) -> Made:
    return MAKERS[kind](corpus_dir, tmp_path / "kb", _units(kind), pg_dsn=dsn, chroma=server)


def test_save_load_keeps_the_backing_the_fingerprint_and_the_results(kind: str, made: Made):
    kb = KnowledgeBase.load(made.folder)
    manifest = json.loads((made.folder / "manifest.json").read_text())
    assert manifest["backing"]["kind"] == kind == kb.backing.kind
    assert "store" not in manifest and "hnsw" not in manifest
    again = KnowledgeBase.load(made.folder)
    assert again.fingerprint == kb.fingerprint
    first, second = kb.search(QUERIES, 3), again.search(QUERIES, 3)
    np.testing.assert_array_equal(first.indices, second.indices)
    np.testing.assert_allclose(first.similarities, second.similarities, atol=1e-6)
    # where the rows live is not part of the knowledge: the same chunks kept locally
    local = KnowledgeBase.from_documents(_documents(kb), embedder=made.embedder)
    if BACKINGS[kind].capabilities.index:
        local = KnowledgeBase.build([made.corpus], embedder=made.embedder, units=kb.manifest.units)
        assert local.fingerprint == kb.fingerprint
    if kb.backing.capabilities.approximate and not kb.describe().exact:
        return  # an approximate search may miss a neighbour
    exact = local.search(QUERIES, 3)
    np.testing.assert_allclose(first.similarities, exact.similarities, atol=1e-4)


def _documents(kb: KnowledgeBase):
    from ragbound.corpus import Document

    return [Document(id=c.doc_id, text=c.text, source=c.source) for c in kb.chunks]


def test_each_granularity_it_stores_searches_and_describes_itself(kind: str, made: Made):
    kb = KnowledgeBase.load(made.folder)
    capabilities = kb.backing.capabilities
    for unit in GRANULARITIES:
        if unit in capabilities.units:
            view = kb.at_granularity(unit)
            hits = view.search(QUERIES, 2)
            assert hits.indices.shape == (len(QUERIES), 2) and hits.indices.max() < len(kb)
            assert view.describe() == view.store.describe()  # the search actually made
            if unit != "chunk":
                assert view.describe().parameters["granularity"] == unit
        else:
            with pytest.raises(IncompatibleArtifactError):
                kb.at_granularity(unit)
    assert kb.describe() == kb.store.describe()


def test_what_it_lacks_is_refused_before_any_work(kind: str, dsn: str | None, tmp_path: Path):
    """A capability the backing lacks is one InputError, before the corpus is even read."""
    capabilities = BACKINGS[kind].capabilities
    missing = tmp_path / "no-such-corpus"
    store = None if dsn is None else f"{dsn}&table=never_{secrets.token_hex(3)}"
    embedder = "bm25" if "lexical" in capabilities.embedders else "minilm"
    hnsw = HnswParams() if kind == "hnsw" else None

    def index(**options: object) -> None:
        KnowledgeBase.index(
            [missing], tmp_path / "kb", store=store, hnsw=hnsw, embedder=embedder, **options
        )

    if not capabilities.index:
        with pytest.raises(InputError, match="cannot index"):
            KnowledgeBase.build([missing], backing=_attached_backing(kind, str(dsn)))
        return
    if capabilities.units != GRANULARITIES:
        with pytest.raises(InputError, match="cannot store sentence, window units"):
            index(units=ALL_UNITS)
    if capabilities.vector_dtypes and "float16" not in capabilities.vector_dtypes:
        with pytest.raises(InputError, match="not float16"):
            index(vector_dtype="float16")
    with pytest.raises(InputError, match="no such file or folder"):
        index()  # everything it can do: the first error is the missing corpus
    assert not (tmp_path / "kb" / "manifest.json").exists()


def _attached_backing(kind: str, dsn: str):
    from ragbound.knowledge.chroma import ChromaAttachedBacking, ChromaLocation
    from ragbound.knowledge.lancedb import LanceAttachedBacking, LanceLocation
    from ragbound.knowledge.postgres import PostgresAttachedBacking
    from ragbound.knowledge.postgres_tables import PostgresTable
    from ragbound.knowledge.qdrant import QdrantAttachedBacking, QdrantLocation

    if kind == "chroma-attached":
        return ChromaAttachedBacking(ChromaLocation(host="127.0.0.1", port=1, collection="c"))
    if kind == "qdrant-attached":
        return QdrantAttachedBacking(QdrantLocation(folder="/nowhere", collection="c"))
    if kind == "lancedb-attached":
        return LanceAttachedBacking(LanceLocation(folder="/nowhere", table="t"))
    return PostgresAttachedBacking(PostgresTable(dsn=dsn, table="t", owned=False))


def test_add_lands_or_is_refused(kind: str, made: Made, tmp_path: Path):
    more = tmp_path / "more"
    more.mkdir()
    (more / "owl.txt").write_text("Barn owls swallow mice whole at night.\n", encoding="utf-8")
    kb = KnowledgeBase.load(made.folder)
    if not kb.backing.capabilities.add:
        with pytest.raises(InputError, match="another application"):
            kb.add([more])
        return
    before = len(kb)
    assert kb.add([more]) == 1
    kb.save()
    loaded = KnowledgeBase.load(made.folder)
    assert len(loaded) == before + 1 and loaded.fingerprint == kb.fingerprint
    hits = loaded.search(["Which bird swallows mice whole?"], 1)
    assert loaded.chunk_at(hits.indices[0, 0]).source.endswith("owl.txt")


def test_float16_where_the_backing_stores_it(kind: str, corpus_dir: Path, tmp_path: Path):
    capabilities = BACKINGS[kind].capabilities
    if "float16" not in capabilities.vector_dtypes or kind == "bm25":
        pytest.skip(f"{kind} does not store float16 vectors (refusal: the test above)")
    hnsw = HnswParams(m=8, ef_search=64) if kind == "hnsw" else None
    half = KnowledgeBase.index(
        [corpus_dir], tmp_path / "kb", hnsw=hnsw, vector_dtype="float16", units=_units(kind)
    )
    loaded = KnowledgeBase.load(half.path)
    assert loaded.manifest.vector_dtype == "float16" and loaded.vectors.dtype == np.float16
    full = KnowledgeBase.build([corpus_dir], units=_units(kind))
    np.testing.assert_allclose(
        loaded.search(QUERIES, 3).similarities, full.search(QUERIES, 3).similarities, atol=2e-3
    )


def test_an_unknown_backing_is_named(minilm_kb_dir: Path, tmp_path: Path):
    folder = tmp_path / "kb"
    KnowledgeBase.load(minilm_kb_dir).save(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["backing"] = {"kind": "qdrant", "collection": "docs"}
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    from ragbound.errors import ArtifactError

    with pytest.raises(ArtifactError, match="unknown knowledge-base backing 'qdrant'"):
        KnowledgeBase.load(folder)
