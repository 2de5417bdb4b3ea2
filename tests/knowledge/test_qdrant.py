"""An attached Qdrant collection (qdrant-client's embedded mode on a temp folder) answers as
ragbound's own exact knowledge base over the same vectors, for each distance; and each way an
attach can go wrong is one clear error. A Qdrant server is not on PyPI: the server path shares
everything but the client (only "unreachable" is tested for it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("qdrant_client", reason="qdrant-client is not installed (the qdrant extra)")

from ragbound.detect import Guard
from ragbound.errors import InputError
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from ragbound.knowledge.qdrant import release
from tests.cli.runner import run
from tests.qdrantfill import fill
from tests.serve.server import (
    ChildServer,
    check_all,
    free_port,
    prepare_served,
    serve_refused,
    served_kb,
)
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE

QUERIES = IN_KNOWLEDGE[:4] + OUT_OF_KNOWLEDGE[:3]
DISTANCES = ("Cosine", "Dot", "Euclid")


@pytest.fixture(scope="module")
def local(minilm_kb_dir: Path) -> KnowledgeBase:
    return KnowledgeBase.load(minilm_kb_dir)


def _fill(local: KnowledgeBase, folder: Path, vectors: np.ndarray | None = None, **kw) -> str:
    vectors = np.asarray(local.vectors if vectors is None else vectors, dtype=np.float32)
    return fill(folder, list(local.chunks), vectors, **kw)


@pytest.mark.parametrize("distance", DISTANCES)
def test_the_same_rows_and_similarities_as_the_local_exact_search(
    distance: str, local: KnowledgeBase, tmp_path: Path
):
    url = _fill(local, tmp_path / "q", distance=distance, uuid_ids=distance == "Dot")
    KnowledgeBase.attach(url, tmp_path / "kb")
    kb = KnowledgeBase.load(tmp_path / "kb")
    assert [c.text for c in kb.chunks] == [c.text for c in local.chunks]
    got, want = kb.search(QUERIES, 4), local.search(QUERIES, 4)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_allclose(got.similarities, want.similarities, atol=1e-5)
    info = kb.describe()
    assert info.exact and info.backend == "qdrant" and info.parameters["distance"] == distance
    assert info.similarity == ("dot" if distance == "Dot" else "cosine")


@pytest.mark.parametrize("distance", DISTANCES)
@pytest.mark.filterwarnings("ignore:.*calibration queries cannot flag")
def test_calibrated_p_values_equal_the_local_ones(
    distance: str, local: KnowledgeBase, tmp_path: Path
):
    url = _fill(local, tmp_path / "q", distance=distance)
    kb = KnowledgeBase.attach(url, tmp_path / "kb")
    # held-out checks: a calibration query's own statistic would tie with its null value
    checked = OUT_OF_KNOWLEDGE + IN_KNOWLEDGE[9:]
    ours = Guard.calibrate(kb, IN_KNOWLEDGE[:9], k=3).check_many(checked)
    theirs = Guard.calibrate(local, IN_KNOWLEDGE[:9], k=3).check_many(checked)
    assert [v.p_value for v in ours] == pytest.approx([v.p_value for v in theirs], abs=1e-9)


def test_where_filter_doc_field_and_named_vector(local: KnowledgeBase, tmp_path: Path):
    url = _fill(local, tmp_path / "q", text_field="text", vector_name="dense")
    kb = KnowledgeBase.attach(
        url, tmp_path / "kb", text_field="text", doc_field="source", where=["topic=bees"]
    )
    assert len(kb) == 5 and all("bees" in c.doc_id for c in kb.chunks)
    hit = kb.search(["Who lives in a honey bee colony?"], 1)
    assert "colonies" in kb.chunk_at(hit.indices[0, 0]).text
    assert kb.manifest.backing.location.vector_name == "dense"  # the only one, chosen


def test_cli_attach_prints_the_backing(monkeypatch, capsys, local: KnowledgeBase, tmp_path: Path):
    url = _fill(local, tmp_path / "q", distance="Euclid")
    code, out, err = run(monkeypatch, capsys, "attach", url, "--out", str(tmp_path / "kb"))
    assert code == 0, err
    assert "Qdrant collection 'docs'" in out and "10 chunks" in out
    code, out, err = run(
        monkeypatch, capsys, "attach", url, "--out", str(tmp_path / "kb2"), "--json",
        "--where", "n=3",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(out)
    assert report["n_chunks"] == 1 and report["backing"]["kind"] == "qdrant-attached"
    assert report["backing"]["location"]["distance"] == "Euclid"
    assert report["search"]["parameters"]["mode"] == "embedded (brute force)"
    code, _, err = run(
        monkeypatch, capsys, "attach", url, "--out", str(tmp_path / "kb3"), "--table", "t"
    )
    assert code != 0 and "--table: not an option of qdrant+path stores" in err


def _empty(folder: Path, distance: str = "Cosine", size: int = 384) -> str:
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(folder))
    client.create_collection(
        "docs", vectors_config=models.VectorParams(size=size, distance=models.Distance(distance))
    )
    client.close()
    return f"qdrant+path://{folder}?collection=docs"


def test_each_attach_error_is_one_clear_line(local: KnowledgeBase, tmp_path: Path):
    url = _fill(local, tmp_path / "q")
    vectors = np.asarray(local.vectors, dtype=np.float32)
    cases = {
        "no Qdrant folder": (f"qdrant+path://{tmp_path}/none?collection=docs", {}),
        "collections: docs": (url.replace("=docs", "=other"), {}),
        "keys found: n, page_content, source, topic": (url, {"text_field": "body"}),
        "matches --where topic='cars'": (url, {"where": ["topic=cars"]}),
        "is empty": (_empty(tmp_path / "empty"), {}),
        "Manhattan distance": (_empty(tmp_path / "manhattan", "Manhattan"), {}),
        "385-dimensional vectors": (
            _fill(local, tmp_path / "wide", np.hstack([vectors, vectors[:, :1]])),
            {},
        ),
        "scores by cosine but its vectors are not unit length": (
            _fill(local, tmp_path / "long", 2 * vectors, distance="Euclid"),
            {},
        ),
        "cannot reach the Qdrant server at 127.0.0.1:1": ("qdrant://127.0.0.1:1/docs", {}),
        "must be qdrant://HOST:PORT/COLLECTION": ("qdrant://127.0.0.1:1/", {}),
        "--search hnsw applies to a server": (url, {"search": "hnsw"}),
    }
    for i, (message, (target, options)) in enumerate(cases.items()):
        with pytest.raises(InputError, match=message.replace("(", r"\(")) as caught:
            KnowledgeBase.attach(target, tmp_path / f"kb{i}", **options)
        assert "\n" not in str(caught.value)


def test_several_named_vectors_need_a_name(tmp_path: Path):
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(tmp_path / "q"))
    params = models.VectorParams(size=384, distance=models.Distance.COSINE)
    client.create_collection("docs", vectors_config={"a": params, "b": params})
    client.close()
    url = f"qdrant+path://{tmp_path / 'q'}?collection=docs"
    with pytest.raises(InputError, match=r"several named vectors \(a, b\)"):
        KnowledgeBase.attach(url, tmp_path / "kb")
    with pytest.raises(InputError, match="no vector named 'c'"):
        KnowledgeBase.attach(url, tmp_path / "kb", vector_name="c")


def test_a_folder_another_client_holds_is_refused(local: KnowledgeBase, tmp_path: Path):
    from qdrant_client import QdrantClient

    url = _fill(local, tmp_path / "q")
    holder = QdrantClient(path=str(tmp_path / "q"))
    try:
        with pytest.raises(InputError, match="held by another process"):
            KnowledgeBase.attach(url, tmp_path / "kb")
    finally:
        holder.close()


def test_urls_and_what_a_server_search_records(tmp_path: Path, monkeypatch):
    from ragbound.knowledge.qdrant import QdrantLocation, parse_url, search_info

    assert parse_url("qdrant://db.example/docs") == {
        "host": "db.example", "port": 6333, "collection": "docs"
    }  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert parse_url("qdrant+path:store?collection=a b") == {
        "folder": str(tmp_path / "store"), "collection": "a b"
    }  # fmt: skip
    for bad in ("qdrant://h:1/a/b", "qdrant://u:pw@h/docs", "qdrant+path://h/f?collection=c"):
        with pytest.raises(InputError):
            parse_url(bad)
    hnsw = QdrantLocation(host="h", port=1, collection="c", search="hnsw", hnsw_ef=64, m=16)
    info = search_info(hnsw)
    assert not info.exact and info.parameters["hnsw_ef"] == 64 and info.parameters["m"] == 16
    assert search_info(hnsw.model_copy(update={"search": "exact"})).exact


def test_serve_decides_on_a_folder_and_holds_it(
    monkeypatch, capsys, local: KnowledgeBase, minilm_kb_dir: Path, tmp_path: Path
):
    """``ragbound serve`` on an embedded folder decides as the local knowledge base; while it
    runs it holds the folder, so another ragbound process on it is refused in one line."""
    url = _fill(local, tmp_path / "q")
    calibration = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE[:10]  # MORE_IN_KNOWLEDGE[12] held out
    kb_dir = prepare_served(KnowledgeBase.attach(url, tmp_path / "kb").path, calibration)
    release(tmp_path / "q")  # this process's client: let the service open the folder
    ours = Gate.load(served_kb(minilm_kb_dir, tmp_path / "local", calibration))
    queries = [MORE_IN_KNOWLEDGE[12], OUT_OF_KNOWLEDGE[0]]
    server = ChildServer(str(kb_dir)).ready()
    try:
        replies = check_all(server.url, queries)
        code, _, err = run(monkeypatch, capsys, "decide", str(kb_dir), queries[0])
        second = serve_refused(str(kb_dir), "--port", str(free_port()))
    finally:
        assert server.stop() == 0
    assert [r["action"] for r in replies] == [d.action for d in ours.decide_many(queries)]
    assert [r["action"] for r in replies] == ["answer", "abstain"]
    local_p = [d.test.p_value for d in ours.decide_many(queries)]
    assert [r["test"]["p_value"] for r in replies] == pytest.approx(local_p, abs=1e-9)
    for refused_code, refused_err in ((code, err), (second.returncode, second.stderr)):
        assert refused_code == 2, refused_err
        assert refused_err.count("\n") == 1 and "is held by another process" in refused_err
        assert "ragbound serve" in refused_err and "/v1/tripwires" in refused_err
    try:  # the service gone, the folder is free again
        code, out, err = run(monkeypatch, capsys, "decide", str(kb_dir), queries[0], "--json")
        assert code == 0, err
        assert json.loads(out)["test"]["p_value"] == pytest.approx(local_p[0], abs=1e-9)
    finally:
        release(tmp_path / "q")
