"""A calibration is valid for the search it was made with: check, evaluate, shift, score and
the gate refuse another search (exact vs HNSW, another ef_search) unless forced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbound.detect import Guard
from ragbound.detect.calibration import Calibration
from ragbound.errors import IncompatibleArtifactError
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from ragbound.stores import SearchInfo
from ragbound.stores.hnsw import HnswParams
from tests.cli.runner import run
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE

pytest.importorskip("faiss", reason="faiss-cpu is not installed (the hnsw extra)")

EXACT = SearchInfo(backend="exact", exact=True, similarity="cosine", parameters={"p": "f32"})
PGVECTOR_EXACT = SearchInfo(backend="pgvector", exact=True, similarity="cosine")
HNSW_10 = SearchInfo(
    backend="faiss-hnsw", exact=False, similarity="cosine", parameters={"ef_search": 10}
)


def _calibration(search: SearchInfo) -> Calibration:
    from ragbound.detect import DetectorConfig

    return Calibration.create(
        ["a", "b"], [[0.9], [0.8]], kb_fingerprint="f", config=DetectorConfig(k=1), search=search
    )


def test_exact_searches_are_interchangeable_approximate_ones_must_match():
    _calibration(EXACT).check_search(PGVECTOR_EXACT)
    _calibration(HNSW_10).check_search(HNSW_10)
    other_ef = HNSW_10.model_copy(update={"parameters": {"ef_search": 20}})
    for made, now in [(EXACT, HNSW_10), (HNSW_10, EXACT), (HNSW_10, other_ef)]:
        with pytest.raises(IncompatibleArtifactError) as caught:
            _calibration(made).check_search(now)
        message = str(caught.value)
        assert now.summary() in message and "--force" in message and "calibrate" in message
        _calibration(made).check_search(now, force=True)
    with pytest.raises(IncompatibleArtifactError, match=r"ef_search=10.*ef_search=20"):
        _calibration(HNSW_10).check_search(other_ef)


@pytest.fixture
def hnsw_kb(corpus_dir: Path, tmp_path: Path, monkeypatch, capsys) -> Path:
    """A MiniLM knowledge base searched with HNSW (ef_search 8), calibrated with it."""
    out, queries = tmp_path / "kb", tmp_path / "queries.txt"
    queries.write_text("\n".join(IN_KNOWLEDGE + MORE_IN_KNOWLEDGE) + "\n", encoding="utf-8")
    code, report, err = run(
        monkeypatch, capsys, "index", str(corpus_dir), "--out", str(out),
        "--search", "hnsw", "--ef-search", "8", "--m", "8", "--graph-precision", "float16",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    search = json.loads(report)["search"]
    assert search["backend"] == "faiss-hnsw" and search["exact"] is False
    assert search["parameters"] == {
        "m": 8, "ef_construction": 128, "ef_search": 8, "rescore": 0, "precision": "float16"
    }  # fmt: skip
    code, _, err = run(
        monkeypatch, capsys, "calibrate", str(out), "--queries", str(queries), "--k", "2"
    )
    assert code == 0, err
    recorded = json.loads((out / "calibration" / "manifest.json").read_text())["search"]
    assert recorded == search
    return out


def _search_with(kb_dir: Path, params: HnswParams | None) -> None:
    kb = KnowledgeBase.load(kb_dir)
    kb.use_hnsw(params)
    kb.save()


def test_every_command_refuses_another_search_unless_forced(hnsw_kb, tmp_path, monkeypatch, capsys):
    code, _, err = run(monkeypatch, capsys, "decide", str(hnsw_kb), OUT_OF_KNOWLEDGE[0], "--json")
    assert code == 0, err
    _search_with(hnsw_kb, HnswParams(ef_search=16, m=8, precision="float16"))
    log = tmp_path / "log.jsonl"
    log.write_text(
        "".join(json.dumps({"query": q}) + "\n" for q in IN_KNOWLEDGE + OUT_OF_KNOWLEDGE)
    )
    ik, ook = tmp_path / "ik.txt", tmp_path / "ook.txt"
    ik.write_text("Which insects live in a hive?\nWhat do worker bees do?\n")
    ook.write_text("\n".join(OUT_OF_KNOWLEDGE) + "\n")
    commands = [
        ["decide", str(hnsw_kb), OUT_OF_KNOWLEDGE[0]],
        ["evaluate", str(hnsw_kb), "--in-knowledge", str(ik), "--out-of-knowledge", str(ook),
         "--samples", "2", "--runs", "1"],
        ["shift", str(hnsw_kb), "--queries", str(ook)],
        ["test-log", str(hnsw_kb), str(log), "--out", str(tmp_path / "scores.jsonl")],
    ]  # fmt: skip
    for argv in commands:
        code, _, err = run(monkeypatch, capsys, *argv)
        assert code == 2, (argv, err)
        assert "ef_search=8" in err and "ef_search=16" in err and "--force" in err, err
        code, _, err = run(monkeypatch, capsys, *argv, "--force")
        assert code == 0, (argv, err)
    with pytest.raises(IncompatibleArtifactError, match="Calibrate again"):
        Gate.load(hnsw_kb)
    assert Gate.load(hnsw_kb, force=True).decide(OUT_OF_KNOWLEDGE[0]).query


def test_exact_and_hnsw_calibrations_do_not_mix(hnsw_kb):
    _search_with(hnsw_kb, None)  # the same knowledge, searched exactly now
    with pytest.raises(IncompatibleArtifactError, match="now searches with exact"):
        Guard.load(hnsw_kb)
    kb = KnowledgeBase.load(hnsw_kb)
    Guard.calibrate(kb, IN_KNOWLEDGE, k=2).save()  # an exact calibration ...
    _search_with(hnsw_kb, HnswParams(ef_search=8, m=8, precision="float16"))
    with pytest.raises(IncompatibleArtifactError, match="made with exact"):
        Guard.load(hnsw_kb)  # ... does not hold for HNSW
    assert Guard.load(hnsw_kb, force=True).check(IN_KNOWLEDGE[0]).p_value > 0
