"""The million-chunk benchmark's knowledge base: real vectors first, then noisy unit copies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.million import NOISE, K, build_graph, measure_checks, million_rows, synthesise
from ragbound.knowledge import KnowledgeBase
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE


def test_a_synthesised_knowledge_base_extends_the_real_one(minilm_kb_dir: Path, tmp_path: Path):
    base = KnowledgeBase.load(minilm_kb_dir)
    report = synthesise(base, 3 * len(base) + 2, "float16", tmp_path / "big")
    big = KnowledgeBase.load(tmp_path / "big")
    assert len(big) == report["n_chunks"] == 32 and big.manifest.vector_dtype == "float16"
    vectors, real = big.vectors.astype(np.float32), np.asarray(base.vectors)
    np.testing.assert_allclose(vectors[: len(base)], real, atol=1e-3)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=2e-3)
    copies = vectors[len(base) :]
    sources = np.arange(len(base), len(big)) % len(base)
    cosines = np.sum(copies * real[sources], axis=1)
    assert (cosines > 1 - 20 * NOISE).all() and (cosines < 0.999).all()
    assert [c.text for c in big.chunks[len(base) :]] == [base.chunks[s].text for s in sources]
    assert len({c.id for c in big.chunks}) == len(big)


def test_exact_then_hnsw_checks_on_a_small_synthesised_knowledge_base(
    minilm_kb_dir: Path, tmp_path: Path
):
    pytest.importorskip("faiss", reason="faiss-cpu is not installed (the hnsw extra)")
    base = KnowledgeBase.load(minilm_kb_dir)
    kb_dir, rows = tmp_path / "big", tmp_path / "exact.npz"
    build = synthesise(base, 80, "float16", kb_dir)
    calibration, checks = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE, IN_KNOWLEDGE[:2] + OUT_OF_KNOWLEDGE[:2]
    exact = measure_checks(kb_dir, calibration, checks, rows)
    assert exact["search"]["exact"] and np.load(rows)["rows"].shape == (len(calibration), K)
    graph = build_graph(kb_dir)
    assert graph["graph_mb"] > 0 and graph["params"]["precision"] == "float16"
    hnsw = measure_checks(kb_dir, calibration, checks, rows, rescore=0)
    rescored = measure_checks(kb_dir, calibration, checks, rows, rescore=4)
    wide = measure_checks(kb_dir, calibration, checks, rows, rescore=0, ef_search=80)
    assert wide["search"]["parameters"]["ef_search"] == 80 and wide["recall"] == 1.0  # 80 rows
    assert not hnsw["search"]["exact"] and hnsw["search"]["parameters"]["rescore"] == 0
    assert 0.5 < hnsw["recall"] <= rescored["recall"] <= 1.0
    assert 0 <= hnsw["recall_1"] <= 1 and abs(rescored["sim_gap_mean"]) < 1e-3
    assert hnsw["top1_gap_max"] >= rescored["top1_gap_max"] - 1e-4
    scale = {"float32": {"build": build, "exact": exact}}
    searches = {"hnsw": hnsw, "hnsw_rescore": rescored, "hnsw_wide": wide}
    scale["float16"] = {**scale["float32"], "graph": graph, **searches}
    header, table = million_rows({"scale": scale})
    labels = [r[0] for r in table]
    assert header == ["measure", "float32", "float16", "target"]
    assert any(label.startswith("HNSW ef_search 64, rescore 4: recall@32") for label in labels)
    assert any(label.startswith("HNSW ef_search 80: recall@32") for label in labels)
    graph_row = next(r for r in table if r[0].startswith("  graph file"))
    assert graph_row[1] == "-" and graph_row[2] != "-"
