"""The attached-Chroma benchmark part: its skip without infinity-emb, the target judged from
the differences, and its docs/benchmarks.md section."""

from __future__ import annotations

import pytest

from benchmarks import attached
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
    if attached.missing_reason() is None:
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
    assert "| `GuardedVectorStoreRetriever` | 20.40 | 31.00 | 1.020 (target <= 1.05) |" in text
    assert "Chroma" in title and render({}) == []
    part["langchain"] = {"skipped": "langchain-chroma is not installed"}
    assert "skipped (langchain-chroma is not installed)" in "\n".join(render({"attached": part}))
