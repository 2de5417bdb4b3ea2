"""An attached Chroma collection on a real server (``chroma run``): the same rows,
similarities and p-values as ragbound's own exact knowledge base over the same vectors, in
each distance space; the CLI; and each refusal as one clear error."""

from __future__ import annotations

import contextlib
import json
import secrets
from pathlib import Path

import numpy as np
import pytest

from ragbound.detect import Guard
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.knowledge.attached import Access, Found, Rows, check_sample
from ragbound.knowledge.chroma import ChromaLocation
from tests.cli.runner import run
from tests.serve.server import free_port
from tests.support.chroma_server import ChromaServer, fill_collection
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE

QUERIES = IN_KNOWLEDGE + OUT_OF_KNOWLEDGE
SPACES = ("l2", "cosine", "ip")


@pytest.fixture(scope="module")
def local(minilm_kb_dir: Path) -> KnowledgeBase:
    """ragbound's own exact knowledge base: the vectors the collections are filled with."""
    return KnowledgeBase.load(minilm_kb_dir)


def _collection(chroma: ChromaServer, local: KnowledgeBase, space: str = "cosine", **kw) -> str:
    """A new collection of the local knowledge base's chunks (ids = document ids)."""
    name = f"app_{secrets.token_hex(3)}"
    options = {
        "ids": [c.doc_id for c in local.chunks],
        "space": space,
        "metadatas": [
            {"topic": Path(c.doc_id).parts[0], "n": i} for i, c in enumerate(local.chunks)
        ],
    }
    vectors = kw.pop("vectors", local.vectors)
    fill_collection(chroma, name, [c.text for c in local.chunks], vectors, **options | kw)
    return name


def _texts(kb: KnowledgeBase, indices: np.ndarray) -> list[list[str]]:
    return [[kb.chunk_at(int(i)).text for i in row] for row in indices]


@pytest.mark.parametrize("space", SPACES)
def test_same_rows_and_similarities_as_the_exact_knowledge_base(
    chroma: ChromaServer, local: KnowledgeBase, space: str, tmp_path: Path
):
    kb = KnowledgeBase.attach(chroma.url(_collection(chroma, local, space)), tmp_path / "kb")
    assert kb.backing.kind == "chroma-attached" and len(kb) == len(local)
    info = kb.describe()
    assert info.backend == "chroma" and not info.exact
    assert info.parameters["space"] == space and {"ef_search", "m"} <= set(info.parameters)
    ours, theirs = local.search(QUERIES, 4), kb.search(QUERIES, 4)
    assert _texts(kb, theirs.indices) == _texts(local, ours.indices)
    np.testing.assert_allclose(theirs.similarities, ours.similarities, atol=1e-5)
    loaded = KnowledgeBase.load(tmp_path / "kb")
    assert loaded.fingerprint == kb.fingerprint
    np.testing.assert_array_equal(loaded.search(QUERIES, 4).indices, theirs.indices)


def test_calibrated_p_values_match_the_local_knowledge_base(
    chroma: ChromaServer, local: KnowledgeBase, tmp_path: Path
):
    kb = KnowledgeBase.attach(chroma.url(_collection(chroma, local, "l2")), tmp_path / "kb")
    calibration = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE[:10]
    checked = MORE_IN_KNOWLEDGE[10:] + OUT_OF_KNOWLEDGE
    ours = Guard.calibrate(local, calibration, k=4, alpha=0.1)
    guard = Guard.calibrate(kb, calibration, k=4, alpha=0.1)
    assert guard.calibration.manifest.search == kb.describe()
    np.testing.assert_allclose(
        guard.calibration.similarities, ours.calibration.similarities, atol=1e-5
    )
    mine, yours = ours.check_many(checked), guard.check_many(checked)
    assert [v.p_value for v in yours] == pytest.approx([v.p_value for v in mine], abs=1e-9)
    guard.save()
    assert Guard.load(tmp_path / "kb").check_many(checked)[0].p_value == yours[0].p_value


def test_where_and_doc_field(chroma: ChromaServer, local: KnowledgeBase, tmp_path: Path):
    name = _collection(chroma, local)
    kb = KnowledgeBase.attach(chroma.url(name), tmp_path / "kb", where=["topic=bees"])
    assert len(kb) == 5 and {c.doc_id.split("/")[0] for c in kb.chunks} == {"bees"}
    assert all(i < 5 for i in kb.search(QUERIES, 5).indices.ravel())
    numbered = KnowledgeBase.attach(
        chroma.url(name), tmp_path / "n", where=["n=3"], doc_field="topic"
    )  # a number stored as int matches its text
    assert len(numbered) == 1 and numbered.chunks[0].doc_id == "bees"
    record = json.loads((tmp_path / "n" / "manifest.json").read_text())["backing"]["location"]
    assert record["where"] == {"n": 3} and record["doc_field"] == "topic"


def test_cli_attach_prints_the_backing(
    chroma: ChromaServer, local: KnowledgeBase, tmp_path: Path, monkeypatch, capsys
):
    url = chroma.url(_collection(chroma, local, "ip"))
    code, out, err = run(monkeypatch, capsys, "attach", url, "--out", str(tmp_path / "kb"))
    assert code == 0, err
    assert "attached" in out and "Chroma collection" in out and "chroma" in out
    code, out, err = run(monkeypatch, capsys, "attach", url, "--out", str(tmp_path / "j"), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["backing"]["kind"] == "chroma-attached" and "store" not in report
    assert report["backing"]["location"]["space"] == "ip"
    assert report["search"]["backend"] == "chroma" and report["n_chunks"] == len(local)


def _refused(url: str, out: Path, match: str, **options) -> None:
    with pytest.raises(InputError, match=match):
        KnowledgeBase.attach(url, out, **options)
    assert not (out / "manifest.json").exists()


def test_each_refusal_is_one_clear_error(
    chroma: ChromaServer, local: KnowledgeBase, tmp_path: Path
):
    out = tmp_path / "kb"
    _refused(f"chroma://127.0.0.1:{free_port()}/c", out, "cannot reach the Chroma server at")
    name = _collection(chroma, local)
    _refused(chroma.url("nosuch"), out, r"'nosuch' .* does not exist \(collections there: .*app_")
    bare = _collection(chroma, local, documents=False)
    _refused(chroma.url(bare), out, "10 of 10 records have no text")
    short = _collection(chroma, local, vectors=local.vectors[:, :16])
    _refused(chroma.url(short), out, "holds 16-dimensional vectors but the embedder")
    _refused(chroma.url(name), out, "no records with metadata topic='ships'", where=["topic=ships"])
    both = ["topic=bees", "n=7"]  # each matches some record, together none
    _refused(chroma.url(name), out, "no records matching n=7 and topic='bees'", where=both)
    chroma.client().create_collection(empty := f"empty_{secrets.token_hex(3)}")
    _refused(chroma.url(empty), out, "is empty")


@pytest.mark.parametrize(
    ("space", "match"),
    [
        ("l2", "scores by cosine but its vectors are not unit length"),
        ("cosine", "scores by cosine but its vectors are not unit length"),
        ("ip", "scores by cosine but its vectors are not unit length"),
    ],
)
def test_vectors_that_are_not_unit_length_are_refused(
    chroma: ChromaServer, local: KnowledgeBase, tmp_path: Path, space: str, match: str
):
    name = _collection(chroma, local, space, vectors=local.vectors * 2.0)
    _refused(chroma.url(name), tmp_path / "kb", match)


class _Misreporting(Access):
    """A labelled test double of a store whose scores are not what its distance says (no user
    runs one): the conversion check's case, which no real server gives."""

    name = "misreporting"

    def __init__(self, vectors: np.ndarray):
        super().__init__(ChromaLocation(host="h", port=1, collection="c", space="cosine"))
        self.stored = {f"r{i}": v for i, v in enumerate(vectors)}

    def errors(self):
        return contextlib.nullcontext()

    def vectors(self, keys):
        return np.array([self.stored[key] for key in keys])

    def query(self, vectors, depth):
        return [[Found(key, 0.5) for key in list(self.stored)[:depth]] for _ in vectors]

    def similarities(self, scores):
        return 1.0 - scores


def test_scores_that_do_not_give_the_similarity_are_refused(local: KnowledgeBase):
    from ragbound.embedders import load_dense_embedder

    access = _Misreporting(local.vectors)
    rows = Rows()
    for i, chunk in enumerate(local.chunks):
        rows.add(f"r{i}", chunk.text, {})
    with pytest.raises(InputError, match="converted to similarities, differ from the cosine"):
        check_sample(access, rows, load_dense_embedder("minilm"), 8)
