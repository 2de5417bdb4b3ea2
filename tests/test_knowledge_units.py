"""Granularity in the knowledge base: fine units stored, searched, mapped to their chunks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragbound.artifacts import sha256_text
from ragbound.corpus import Document
from ragbound.corpus.units import UnitParams, unit_params
from ragbound.detect import Guard
from ragbound.errors import IncompatibleArtifactError
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from tests.texts import TOPICS

# Two long documents: each is several chunks of 25 words, each chunk several sentences.
DOCS = [
    Document(id=topic, text=" ".join(sentences * 2), source=f"{topic}.txt")
    for topic, sentences in TOPICS.items()
]
QUESTIONS = [
    "Why do beekeepers use smoke?",
    "How many eggs can a queen bee lay?",
    "What is the gauge of a railway?",
    "When did the Shinkansen first run?",
    "How do electric trains get power?",
]


def build(embedder: str, granularity: str = "chunk,sentence,window") -> KnowledgeBase:
    chunking = {"chunk_words": 25, "overlap": 10}
    from ragbound.corpus import ChunkingParams

    return KnowledgeBase.from_documents(
        DOCS,
        embedder=embedder,
        chunking=ChunkingParams(**chunking),
        units=unit_params(granularity, 2),
    )


@pytest.fixture(scope="module")
def minilm_units_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("units") / "kb"
    build("minilm").save(out)
    return out


def test_manifest_round_trip_keeps_units_and_fingerprint(minilm_units_dir: Path):
    kb = KnowledgeBase.load(minilm_units_dir)
    manifest = json.loads((minilm_units_dir / "manifest.json").read_text())
    assert manifest["units"] == {
        "granularity": ["chunk", "sentence", "window"],
        "window_sentences": 2,
    }
    assert sum(s["n_units"] for s in manifest["segments"]) > len(kb)
    again = build("minilm")
    assert kb.fingerprint == again.fingerprint
    assert kb.granularity == ("chunk", "sentence", "window")
    n_rows, n_bytes = kb.index_size()
    assert n_bytes == n_rows * 384 * 4
    assert kb.at_granularity("chunk").index_size() == (len(kb), kb.vectors.nbytes)


def test_units_change_the_fingerprint_but_chunks_only_keeps_the_old_one():
    chunks_only = build("bm25", "chunk")
    assert chunks_only.manifest.units == UnitParams()
    m = chunks_only.manifest
    before_units = sha256_text(m.embedder.identity(), m.chunking.model_dump_json(), m.corpus_hash)
    assert chunks_only.fingerprint == before_units[:16]
    assert chunks_only.fingerprint != build("bm25", "sentence").fingerprint
    assert build("bm25", "sentence").fingerprint != build("bm25", "window").fingerprint


def test_each_unit_points_to_the_chunk_that_holds_its_text():
    kb = build("bm25")
    view = kb.at_granularity("sentence")
    hits = view.search(QUESTIONS, k=2)
    for row in range(len(QUESTIONS)):
        rows = hits.indices[row].tolist()
        assert len(set(rows)) == 2  # distinct chunks
    # the best sentence for a question is inside the best chunk returned
    top = kb.chunk_at(view.search(["waggle dance on the comb"], k=1).indices[0, 0])
    assert "waggle dance" in top.text


def test_sentence_search_scores_at_least_the_chunk_similarity_for_its_chunk(
    minilm_units_dir: Path,
):
    kb = KnowledgeBase.load(minilm_units_dir)
    both = kb.at_granularity("chunk,sentence").search(QUESTIONS, k=3)
    chunks = kb.at_granularity("chunk").search(QUESTIONS, k=3)
    # the union's best is never below the chunk-only best (max over a superset)
    assert (both.similarities[:, 0] >= chunks.similarities[:, 0] - 1e-6).all()


def test_a_granularity_not_indexed_is_refused():
    kb = build("bm25", "sentence")
    assert kb.at_granularity("chunk").granularity == ("chunk",)
    with pytest.raises(IncompatibleArtifactError, match="does not index window"):
        kb.at_granularity("window")


def test_a_view_is_kept_until_the_contents_change(tmp_path: Path):
    units = unit_params("chunk,sentence", 3)
    kb = KnowledgeBase.from_documents(DOCS[:1], embedder="bm25", units=units)
    view = kb.at_granularity("sentence")
    assert view is not kb
    view.search(["queen bee eggs"], k=1)
    assert kb.at_granularity("sentence") is view  # its search index is built once
    kb.add_documents(DOCS[1:])
    fresh = kb.at_granularity("sentence")
    assert fresh is not view and len(fresh) == len(kb) > len(view)
    top = fresh.search(["pantograph overhead wires"], k=1).indices[0, 0]
    assert fresh.chunk_at(top).doc_id == "trains"
    kb.save(tmp_path / "kb")
    saved = kb.at_granularity("sentence")
    assert saved is not fresh and saved.path == kb.path == tmp_path / "kb"


def test_add_appends_units_and_they_survive_save_and_load(tmp_path: Path):
    kb = KnowledgeBase.from_documents(DOCS[:1], embedder="bm25", units=unit_params("sentence", 3))
    kb.save(tmp_path / "kb")
    kb = KnowledgeBase.load(tmp_path / "kb")
    kb.add_documents(DOCS[1:])
    kb.save()
    loaded = KnowledgeBase.load(tmp_path / "kb")
    assert loaded.index_size() == kb.index_size()
    top = loaded.search(["pantograph overhead wires"], k=1).indices[0, 0]
    assert loaded.chunk_at(top).doc_id == "trains"


def test_restricted_to_keeps_only_those_documents_units():
    kb = build("bm25")
    bees = kb.restricted_to({"bees"})
    assert {c.doc_id for c in bees.chunks} == {"bees"}
    assert bees.granularity == kb.granularity
    hits = bees.search(["railway gauge"], k=len(bees))
    assert {bees.chunk_at(r).doc_id for r in hits.indices[0]} == {"bees"}


def test_restricted_to_searches_a_loaded_dense_knowledge_base(minilm_units_dir: Path):
    kb = KnowledgeBase.load(minilm_units_dir)
    bees = kb.restricted_to({"bees"})
    assert len(bees) == sum(c.doc_id == "bees" for c in kb.chunks)
    for granularity in ("chunk", "sentence", "chunk,sentence,window"):
        view = bees.at_granularity(granularity)
        hits = view.search(["How many eggs can a queen bee lay?"], k=len(bees))
        assert {bees.chunk_at(r).doc_id for r in hits.indices[0]} == {"bees"}
        whole = kb.at_granularity(granularity).search(["How many eggs can a queen bee lay?"], k=1)
        # the best chunk is a bee chunk in both, with the same similarity
        np.testing.assert_allclose(hits.similarities[0, 0], whole.similarities[0, 0], rtol=1e-6)


def test_guard_records_granularity_and_shows_chunks_as_evidence(minilm_units_dir: Path):
    kb = KnowledgeBase.load(minilm_units_dir)
    guard = Guard.calibrate(kb, QUESTIONS * 4, granularity="sentence", k=3)
    assert guard.calibration.manifest.granularity == ("sentence",)
    assert guard.calibration.manifest.search.parameters["granularity"] == "sentence"
    guard.save()
    loaded = Guard.load(minilm_units_dir)
    assert loaded.kb.granularity == ("sentence",)
    verdict = loaded.check("How many eggs can a queen bee lay?", evidence=3)
    chunk_texts = {c.id: c.text for c in kb.chunks}
    assert len({n.chunk_id for n in verdict.neighbours}) == 3
    for neighbour in verdict.neighbours:
        assert chunk_texts[neighbour.chunk_id].startswith(neighbour.text)
    decision = Gate.load(minilm_units_dir, context_k=2).decide("How many eggs can a queen lay?")
    assert all(n.text in chunk_texts.values() for n in decision.neighbours)
    sims = loaded.kb.search(["How many eggs can a queen bee lay?"], k=3).similarities
    np.testing.assert_allclose(verdict.neighbours[0].similarity, sims[0, 0], atol=1e-6)


def test_guard_refuses_another_granularity_unless_forced(minilm_units_dir: Path):
    kb = KnowledgeBase.load(minilm_units_dir)
    guard = Guard.calibrate(kb, QUESTIONS * 4, granularity="chunk", k=3)
    with pytest.raises(IncompatibleArtifactError, match="made searching chunk units"):
        Guard(kb, guard.calibration, granularity="sentence")
    forced = Guard(kb, guard.calibration, granularity="sentence", force=True)
    assert forced.kb.granularity == ("sentence",)
    # a knowledge base viewed at another granularity is searched at the calibration's
    assert Guard(kb.at_granularity("window"), guard.calibration).kb.granularity == ("chunk",)
