"""The attached-Chroma benchmark part: its skip without infinity-emb, the target judged from
the differences, and its docs/benchmarks.md section."""

from __future__ import annotations

import pytest

from benchmarks import attached
from benchmarks.attached_collection import missing_reason
from benchmarks.run import SECTIONS, attached_part

OOK = ["MMLU-Med", "TruthfulQA"]


def _row(search: str, fpr: float, auroc: float) -> dict:
    row = {"search": search, "embedder": "minilm", "fpr": fpr, "fpr_splits": fpr}
    row |= {f"auroc_{name}": auroc for name in OOK}
    return row | {"check_p50_ms": 25.0, "embed_p50_ms": 24.0}


def _part(attached_auroc: float) -> dict:
    part = {"n_chunks": 3369, "k": 32, "alpha": 0.05, "statistic": "mss", "ook": OOK}
    part |= {"n_calibration": 500, "n_ik_test": 500, "omp_threads": "1"}
    part |= {"endpoint_chunks_per_s": 14.5, "endpoint_embed_s": 232.0}
    part |= {"endpoint_vs_local_min_cosine": 0.9999}
    part["rows"] = [_row("exact", 0.05, 0.9), _row("attached", 0.052, attached_auroc)]
    part["differences"] = attached.differences(part)
    return part


def test_without_infinity_the_part_is_skipped_with_the_reason(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("RAGBOUND_INFINITY", str(tmp_path / "absent" / "infinity_emb"))
    if missing_reason() is None:
        pytest.fail("a missing infinity_emb was not noticed")
    part = attached_part(tmp_path / "corpus.jsonl", ["q"], ["q2"], {"MMLU-Med": ["o"]})
    assert set(part) == {"skipped"} and (
        "infinity" in part["skipped"] or "chroma" in part["skipped"]
    )
    _, render = SECTIONS["attached"]
    assert render({"attached": part}) == []


def test_the_target_is_judged_on_fpr_and_every_auroc() -> None:
    assert _part(0.904)["differences"]["target_met"]
    missed = _part(0.8949)["differences"]
    assert not missed["target_met"] and missed["auroc_TruthfulQA"] == pytest.approx(-0.0051)


def test_the_section_renders_both_rows_the_differences_and_the_latency() -> None:
    part = _part(0.899)
    part["langchain"] = {"n": 360, "n_calibration": 500, "k": 4, "context_k": 4}
    part["langchain"] |= {"bare_p50_ms": 20.0, "bare_p99_ms": 30.0, "guarded_p50_ms": 20.4}
    part["langchain"] |= {"guarded_p99_ms": 31.0, "ratio_p50": 1.02, "extra_p50_ms": 0.4}
    title, render = SECTIONS["attached"]
    text = "\n".join(render({"attached": part}))
    assert "| attached - exact |  | +0.0020 | +0.0020 | -0.0010 | -0.0010 |  |" in text
    assert "within 0.005 of the exact knowledge base: **met**" in text
    assert "| `GatedVectorStoreRetriever` | 20.40 | 31.00 | 1.020 (target <= 1.05) |" in text
    assert "Chroma" in title and render({}) == []
    part["langchain"] = {"skipped": "langchain-chroma is not installed"}
    assert "skipped (langchain-chroma is not installed)" in "\n".join(render({"attached": part}))


def _tripwire_part(differing: list[dict]) -> dict:
    rates = {"own": 0.5, "chroma": 0.5, "differ": 0}
    part = {"seed": 0, "n_tripwires": 700, "n_topics": 60, "collection_add_s": 40.0}
    part |= {"endpoint_embed_s": 30.0, "collection_records": 4069, "read_back": 700}
    part |= {"knowledge_chunks": {"own": 3369, "chroma": 3369}, "n": {"XSTest safe": 250}}
    agreement = {"pattern_differs": 0, "max_abs_similarity_diff": 2e-7}
    agreement |= {"tripwire_max_abs_diff": 2e-7, "knowledge_max_abs_diff": 1e-7}
    part["agreement"] = {"XSTest safe": agreement | {"knowledge_lower_on_chroma": 0}}
    part["rules"] = {
        "paper": {"rule": "p", "floors": {"own": None, "chroma": None}, "differing": []},
        "default": {"rule": "d", "floors": {"own": 0.61, "chroma": 0.61}},
    }
    part["rules"]["paper"]["rates"] = {"XSTest safe": dict(rates)}
    part["rules"]["default"]["rates"] = {"XSTest safe": rates | {"differ": len(differing)}}
    part["rules"]["default"]["differing"] = differing
    return part


def test_the_tripwire_section_gives_both_rates_and_the_differing_verdicts() -> None:
    from benchmarks.attached_tripwires import attached_tripwires_markdown

    title, render = SECTIONS["attached-tripwires"]
    text = "\n".join(render({"attached_tripwires": _tripwire_part([])}))
    cells = "| XSTest safe (250) | 0.500 | 0.500 | 0 | 0.500 | 0.500 | 0 | 0 | 2.0e-07 | 2.0e-07 |"
    assert cells + " 1.0e-07 | 0 |" in text
    assert "no verdict differs: **met**" in text and "took 40.0 s" in text
    side = {"forbidden": True, "similarities": [0.7, 0.6], "tripwire_flags": [True, False]}
    differing = [{"set": "XSTest safe", "query": "q", "own": side, "chroma": side}]
    text = "\n".join(attached_tripwires_markdown({"attached_tripwires": _tripwire_part(differing)}))
    assert "**NOT met: 1 differ (listed below)**" in text
    assert "- default, XSTest safe: 'q': own forbidden (top-k T 0.700000, K 0.600000)" in text
    assert "Chroma" in title and render({"attached_tripwires": {"skipped": "x"}}) == []


def test_the_agreement_counts_flag_patterns_and_the_largest_similarity_gap() -> None:
    import numpy as np

    from benchmarks.attached_tripwires import _agreement
    from ragbound.tripwires.guard import MergedTopK

    rows = np.zeros((2, 2), np.int64)
    own = MergedTopK(np.array([[0.9, 0.8], [0.7, 0.6]]), np.array([[1, 0], [0, 0]], bool), rows)
    theirs = MergedTopK(np.array([[0.9, 0.8], [0.7, 0.5]]), np.array([[0, 1], [0, 0]], bool), rows)
    agreement = _agreement(own, theirs)
    assert agreement["pattern_differs"] == 1
    assert agreement["max_abs_similarity_diff"] == pytest.approx(0.1)
    # row 0: the tripwire 0.9 (own) against 0.8 (theirs); row 1: the knowledge's 0.6 vs 0.5
    assert agreement["tripwire_max_abs_diff"] == pytest.approx(0.1)
    assert agreement["knowledge_max_abs_diff"] == pytest.approx(0.1)
    assert agreement["knowledge_lower_on_chroma"] == 1
