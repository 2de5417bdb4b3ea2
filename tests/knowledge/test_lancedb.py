"""An attached LanceDB table (embedded, in a temp folder) answers as ragbound's own exact
knowledge base over the same vectors, in LangChain's, LlamaIndex's and a plain layout; each way
an attach can go wrong is one clear error; rows the application adds or flags are seen."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lancedb", reason="lancedb is not installed (the lancedb extra)")

from ragbound.detect import Guard
from ragbound.errors import ArtifactError, InputError
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from ragbound.knowledge.lancedb import LanceAccess, LanceLocation, parse_url
from ragbound.knowledge.tripwire_flags import TRIPWIRE_FLAG
from ragbound.tripwires import LiveTripwires
from tests.cli.runner import run
from tests.lancefill import fill, rows, table
from tests.serve.server import ChildServer, check_all, prepare_served, served_kb
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE

QUERIES = IN_KNOWLEDGE[:4] + OUT_OF_KNOWLEDGE[:3]


@pytest.fixture(scope="module")
def local(minilm_kb_dir: Path) -> KnowledgeBase:
    return KnowledgeBase.load(minilm_kb_dir)


@pytest.fixture(scope="module")
def url(local: KnowledgeBase, tmp_path_factory: pytest.TempPathFactory) -> str:
    """One LangChain-layout table, never written to by the tests that share it."""
    return _fill(local, tmp_path_factory.mktemp("lance"))


def _fill(local: KnowledgeBase, folder: Path, vectors: np.ndarray | None = None, **kw) -> str:
    vectors = np.asarray(local.vectors if vectors is None else vectors, np.float32)
    return fill(folder, list(local.chunks), vectors, **kw)


@pytest.mark.parametrize("layout", ["langchain", "llamaindex", "plain"])
def test_the_same_rows_and_similarities_as_the_local_exact_search(
    layout: str, local: KnowledgeBase, tmp_path: Path
):
    options = {"text_field": "body", "id_column": "key"} if layout == "plain" else {}
    KnowledgeBase.attach(_fill(local, tmp_path / "l", layout=layout), tmp_path / "kb", **options)
    kb = KnowledgeBase.load(tmp_path / "kb")
    assert sorted(c.text for c in kb.chunks) == sorted(c.text for c in local.chunks)
    got, want = kb.search(QUERIES, 4), local.search(QUERIES, 4)
    texts = [[kb.chunk_at(int(i)).text for i in row] for row in got.indices]
    assert texts == [[local.chunk_at(int(i)).text for i in row] for row in want.indices]
    np.testing.assert_allclose(got.similarities, want.similarities, atol=1e-5)
    info = kb.describe()
    assert info.exact and info.backend == "lancedb" and info.parameters["distance"] == "cosine"
    if layout == "llamaindex":  # its node JSON and ids are bookkeeping, not the chunk's metadata
        assert kb.chunks[0].metadata == {
            "source": "bees/0.txt",
            "topic": "bees",
            "n": 0,
            "id": "row-00",
        }


def test_an_ann_index_is_bypassed_and_recorded(local: KnowledgeBase, tmp_path: Path):
    from lancedb.index import IvfFlat

    url = _fill(local, tmp_path / "l")
    table(url).create_index("vector", config=IvfFlat(distance_type="cosine", num_partitions=1))
    kb = KnowledgeBase.attach(url, tmp_path / "kb")
    assert kb.describe().exact and kb.describe().parameters["ann_index"] == "IvfFlat (bypassed)"
    np.testing.assert_allclose(
        kb.search(QUERIES, 4).similarities, local.search(QUERIES, 4).similarities, atol=1e-5
    )


def test_lancedb_distances_convert_exactly(local: KnowledgeBase, tmp_path: Path):
    """On the real engine: cosine distance is 1 - cosine, dot distance 1 - dot (vectors
    scaled, so the two differ)."""
    scaled = np.asarray(local.vectors, np.float64) * np.linspace(0.5, 2.0, len(local))[:, None]
    url = _fill(local, tmp_path / "l", scaled)
    query = scaled[:2] + 0.1
    for metric, want in (
        ("cosine", (query / np.linalg.norm(query, axis=1, keepdims=True)) @ (scaled / np.linalg.norm(scaled, axis=1, keepdims=True)).T),
        ("dot", query @ scaled.T),
    ):  # fmt: skip
        access = LanceAccess(LanceLocation(**parse_url(url), vector_column="vector", metric=metric))
        found = access.query(query.astype(np.float32), len(local))
        for row, hits in enumerate(found):
            got = access.similarities(np.array([hit.score for hit in hits]))
            n = [int(hit.key.removeprefix("row-")) for hit in hits]
            np.testing.assert_allclose(got, want[row, n], atol=1e-5)
            assert list(got) == sorted(got, reverse=True)


@pytest.mark.filterwarnings("ignore:.*calibration queries cannot flag")
def test_calibrated_p_values_equal_the_local_ones(local: KnowledgeBase, url: str, tmp_path: Path):
    kb = KnowledgeBase.attach(url, tmp_path / "kb")
    checked = OUT_OF_KNOWLEDGE + IN_KNOWLEDGE[9:]
    ours = Guard.calibrate(kb, IN_KNOWLEDGE[:9], k=3).check_many(checked)
    theirs = Guard.calibrate(local, IN_KNOWLEDGE[:9], k=3).check_many(checked)
    assert [v.p_value for v in ours] == pytest.approx([v.p_value for v in theirs], abs=1e-9)


def test_where_filters_and_doc_field(local: KnowledgeBase, tmp_path: Path):
    url = _fill(local, tmp_path / "l", layout="plain")
    kb = KnowledgeBase.attach(
        url, tmp_path / "kb", text_field="body", id_column="key", doc_field="source",
        where=["topic=bees"],
    )  # fmt: skip
    assert len(kb) == 5 and all("bees" in c.doc_id for c in kb.chunks)
    hit = kb.search(["Who lives in a honey bee colony?"], 1)
    assert "colonies" in kb.chunk_at(hit.indices[0, 0]).text
    one = KnowledgeBase.attach(
        url, tmp_path / "kb2", text_field="body", id_column="key", where=["n=3"]
    )
    assert len(one) == 1 and one.manifest.backing.location.where == {"n": 3}  # typed as stored


def test_cli_attach_prints_the_backing(monkeypatch, capsys, url: str, tmp_path: Path):
    code, out, err = run(monkeypatch, capsys, "attach", url, "--out", str(tmp_path / "kb"))
    assert code == 0, err
    assert "LanceDB table 'docs'" in out and "10 chunks" in out
    code, out, err = run(
        monkeypatch, capsys, "attach", url, "--out", str(tmp_path / "kb2"), "--json",
        "--where", "metadata.topic=trains",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(out)
    assert report["n_chunks"] == 5 and report["backing"]["kind"] == "lancedb-attached"
    assert report["search"]["parameters"]["method"] == "flat (every row scored)"
    code, _, err = run(
        monkeypatch, capsys, "attach", url, "--out", str(tmp_path / "k3"), "--table", "t"
    )
    assert code != 0 and "--table: not an option of lancedb stores" in err


def test_each_attach_error_is_one_clear_line(local: KnowledgeBase, url: str, tmp_path: Path):
    vectors = np.asarray(local.vectors, np.float32)
    empty = tmp_path / "empty"
    import lancedb

    lancedb.connect(str(empty)).create_table(
        "docs", data=rows(local.chunks[:1], vectors[:1])
    ).delete("true")
    cases = {
        "no LanceDB folder": (f"lancedb://{tmp_path}/none?table=docs", {}),
        "no LanceDB table 'other'": (url.replace("=docs", "=other"), {}),
        "must be lancedb:///ABSOLUTE/FOLDER?table=NAME": ("lancedb://host/f?table=docs", {}),
        "is empty": (f"lancedb://{empty}?table=docs", {}),
        "385-dimensional vectors": (
            _fill(local, tmp_path / "wide", np.hstack([vectors, vectors[:, :1]])),
            {},
        ),
        "do not match the embedder": (_fill(local, tmp_path / "shuffled", vectors[::-1]), {}),
        "has no column 'key': name the column identifying a row": (url, {"id_column": "key"}),
        "has no rows matching metadata.topic='cars'": (url, {"where": ["metadata.topic=cars"]}),
        'has no rows matching metadata.topic="it\'s"': (url, {"where": ["metadata.topic=it's"]}),
        "has no column 'colour' (--where)": (url, {"where": ["colour=red"]}),
        "column 'metadata.n' holds int64": (url, {"where": ["metadata.n=three"]}),
        "records have no text": (url, {"text_field": "metadata.topic.x"}),
        "has no vector column 'v'": (url, {"vector_column": "v"}),
    }
    for i, (message, (target, options)) in enumerate(cases.items()):
        with pytest.raises(InputError, match=re.escape(message)) as caught:
            KnowledgeBase.attach(target, tmp_path / f"kb{i}", **options)
        assert "\n" not in str(caught.value)


def test_rows_added_after_attach_are_read_on_the_next_load(local: KnowledgeBase, tmp_path: Path):
    url = _fill(local, tmp_path / "l")
    kb = KnowledgeBase.attach(url, tmp_path / "kb")
    text = "Barn owls swallow mice whole at night."
    vector = KnowledgeBase.load(tmp_path / "kb").query_embedder().encode([text])[0]
    table(url).add(
        [
            {
                "id": "row-99",
                "vector": vector.tolist(),
                "text": text,
                "metadata": {"source": "owl", "topic": "owls", "n": 99},
            }
        ]
    )
    with pytest.raises(ArtifactError, match="added after this knowledge base was loaded"):
        kb.search([text], 1)
    again = KnowledgeBase.load(tmp_path / "kb")
    assert len(again) == 11 and again.fingerprint != kb.fingerprint
    assert again.chunk_at(again.search([text], 1).indices[0, 0]).text == text


def test_a_row_the_application_flags_is_a_tripwire_not_knowledge(
    local: KnowledgeBase, tmp_path: Path
):
    """LangChain's LanceDB store keeps a document's metadata in the ``metadata`` struct: a
    ``ragbound_tripwire`` field there flags the row."""
    made = rows(local.chunks, local.vectors)
    for row in made:
        row["metadata"][TRIPWIRE_FLAG] = None
    text = OUT_OF_KNOWLEDGE[0]
    flagged = {
        **made[0],
        "id": "app-1",
        "text": text,
        "metadata": {**made[0]["metadata"], TRIPWIRE_FLAG: "harm"},
    }
    import lancedb

    lancedb.connect(str(tmp_path / "l")).create_table("docs", data=[*made, flagged])
    kb = KnowledgeBase.attach(f"lancedb://{tmp_path / 'l'}?table=docs", tmp_path / "kb")
    assert len(kb) == len(local) and text not in {c.text for c in kb.chunks}
    store = LiveTripwires.open(kb)
    assert [(t.id, t.topic, t.text) for t in store.tripwires] == [("app-1", "harm", text)]


def test_check_and_serve_decide_as_the_local_knowledge_base(
    monkeypatch, capsys, minilm_kb_dir: Path, url: str, tmp_path: Path
):
    calibration = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE[:10]  # MORE_IN_KNOWLEDGE[12] held out
    kb_dir = prepare_served(KnowledgeBase.attach(url, tmp_path / "kb").path, calibration)
    ours = Gate.load(served_kb(minilm_kb_dir, tmp_path / "local", calibration))
    queries = [MORE_IN_KNOWLEDGE[12], OUT_OF_KNOWLEDGE[0]]
    local_p = [d.test.p_value for d in ours.decide_many(queries)]
    code, out, err = run(monkeypatch, capsys, "decide", str(kb_dir), queries[0], "--json")
    assert code == 0, err
    assert json.loads(out)["test"]["p_value"] == pytest.approx(local_p[0], abs=1e-9)
    server = ChildServer(str(kb_dir)).ready()  # the service searches the table from its threads
    try:
        replies = check_all(server.url, queries)
    finally:
        assert server.stop() == 0
    assert [r["action"] for r in replies] == ["answer", "abstain"]
    assert [r["test"]["p_value"] for r in replies] == pytest.approx(local_p, abs=1e-9)
