"""The answerability judge's benchmark: its samples and its section (the run itself needs the
bundled LLM for hours: `python -m benchmarks.run answerability-judge`)."""

from __future__ import annotations

import pytest

from benchmarks import answerability_judge as judge


def test_samples_are_seeded_ordered_and_capped() -> None:
    questions = [f"q{i}" for i in range(10)]
    first = judge.sample(questions, 4, seed=1)
    assert first == judge.sample(questions, 4, seed=1)
    assert len(first) == 4 and first == sorted(first, key=questions.index)
    assert judge.sample(questions, 40, seed=1) == questions


def test_the_section_shows_both_rows_per_corpus_and_what_was_skipped() -> None:
    rows = {
        judge.RELEVANCE: {"level": 0.05, "inside": 0.05, "left_out": 0.1, "unanswerable": 0.3},
        judge.WITH_JUDGE: {
            "level": 0.03,
            "inside": 0.05,
            "left_out": 0.6,
            "unanswerable": 0.7,
            "auroc_left_out": 0.9,
            "seconds_per_call": 9.5,
        },
    }
    results = {
        "n": 40,
        "n_calibration": 60,
        "seed": 0,
        "total_s": 600.0,
        "corpora": {"CLAP NQ": {"rows": rows, "sizes": {"calibration": 60, "inside": 40}}},
        "skipped": {"COVID-QA": "COVID-QA not found"},
    }
    text = "\n".join(judge.judge_markdown(results))
    assert (
        "| CLAP NQ | relevance + judge (local 1.5B) | 0.600 | 0.700 | 0.050 | 0.030 | 0.900 |  | 9.500 |"
        in text
    )
    assert (
        "| CLAP NQ | relevance alone (default, mss) | 0.100 | 0.300 | 0.050 | 0.050 |  |  |  |"
        in text
    )
    assert "- COVID-QA: skipped, COVID-QA not found" in text
    assert "10.0 min" in text
    assert judge.judge_markdown({"corpora": {}}) == []


def test_unknown_corpora_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_ANSWER_JUDGE_CORPORA", "Nowhere QA")
    with pytest.raises(SystemExit, match="choose among"):
        judge.corpora()
