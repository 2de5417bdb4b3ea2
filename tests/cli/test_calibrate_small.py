"""A first set-up on a small knowledge base: ``calibrate`` with its default k on fewer chunks
than k, and a calibration too small for alpha to mean what it says, each said in words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbound.detect import Guard
from ragbound.detect.names import DEFAULT_K
from ragbound.detect.resolution import POWERLESS
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from tests.cli.runner import run
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE

QUESTIONS = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE


@pytest.fixture(scope="module")
def small_kb(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ten-document corpus (fewer chunks than the default k), BM25."""
    kb_dir = tmp_path_factory.mktemp("small") / "kb"
    KnowledgeBase.build([corpus_dir], embedder="bm25").save(kb_dir)
    assert len(KnowledgeBase.load(kb_dir)) < DEFAULT_K
    return kb_dir


def questions_file(folder: Path, questions: list[str]) -> Path:
    path = folder / "questions.txt"
    path.write_text("\n".join(questions) + "\n", encoding="utf-8")
    return path


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_default_k_is_cut_to_a_small_knowledge_base_with_a_note(
    monkeypatch, capsys, small_kb: Path, tmp_path: Path
) -> None:
    size = len(KnowledgeBase.load(small_kb))
    queries = questions_file(tmp_path, QUESTIONS)
    code, out, err = run(monkeypatch, capsys, "calibrate", str(small_kb), "--queries", str(queries))
    assert code == 0, err
    assert f"k={DEFAULT_K} (the default) is more than the knowledge base's {size} chunks" in flat(
        err
    )
    assert f"(k={size}," in flat(out)
    manifest = json.loads((small_kb / "calibration" / "manifest.json").read_text())
    assert manifest["detector"]["k"] == size
    code, out, err = run(monkeypatch, capsys, "decide", str(small_kb), "How do bees dance?")
    assert code == 0, err


def test_a_k_given_larger_than_the_knowledge_base_is_refused_naming_both(
    monkeypatch, capsys, small_kb: Path, tmp_path: Path
) -> None:
    size = len(KnowledgeBase.load(small_kb))
    queries = questions_file(tmp_path, QUESTIONS)
    argv = ("calibrate", str(small_kb), "--queries", str(queries), "--k", str(size + 1))
    code, _, err = run(monkeypatch, capsys, *argv)
    assert code == 2
    assert f"k={size + 1} is larger than the knowledge base ({size} chunks)" in flat(err)
    with pytest.raises(InputError, match="larger than the knowledge base"):
        Guard.calibrate(KnowledgeBase.load(small_kb), QUESTIONS, k=size + 1)


def test_the_library_cuts_its_default_k_with_a_warning(small_kb: Path) -> None:
    kb = KnowledgeBase.load(small_kb)
    with pytest.warns(UserWarning, match="is more than the knowledge base's"):
        guard = Guard.calibrate(kb, QUESTIONS)
    assert guard.k == len(kb)


@pytest.mark.parametrize(
    ("n", "alpha", "words", "needed"),
    [
        (15, 0.05, POWERLESS, "use at least 19 queries (and 79 for a steady"),
        (24, 0.05, "scores above all of them", "use at least 79 questions"),
        (30, 0.1, "above all but 2 of them", "use at least 39 questions"),
    ],
)
def test_too_few_questions_for_alpha_get_a_warning_saying_how_many_would_do(
    monkeypatch, capsys, small_kb: Path, tmp_path: Path, n: int, alpha: float, words, needed
) -> None:
    questions = (QUESTIONS * 3)[:n]
    queries = questions_file(tmp_path, questions)
    argv = ("calibrate", str(small_kb), "--queries", str(queries), "--alpha", str(alpha))
    code, out, err = run(monkeypatch, capsys, *argv, "--json")
    assert code == 0, err
    assert words in flat(err) and needed in flat(err)
    resolution = json.loads(out)["resolution"]
    assert resolution["n"] == n and resolution["level"] == alpha and resolution["coarse"]
    assert resolution["step"] == pytest.approx(1 / (n + 1))
    assert resolution["can_flag"] == (words != POWERLESS)


def test_enough_questions_for_alpha_get_no_warning(
    monkeypatch, capsys, small_kb: Path, tmp_path: Path
) -> None:
    queries = questions_file(tmp_path, QUESTIONS)  # 28 questions: 4 ranks at alpha 0.2
    argv = ("calibrate", str(small_kb), "--queries", str(queries), "--alpha", "0.2", "--k", "3")
    code, out, err = run(monkeypatch, capsys, *argv, "--json")
    assert code == 0, err
    assert "warning" not in err
    resolution = json.loads(out)["resolution"]
    assert resolution["flaggable"] == 5 and not resolution["coarse"]


def test_a_shared_alpha_is_judged_at_each_test_s_share(small_kb: Path) -> None:
    """With the answerability test, each test runs at its share of alpha: coarser."""
    kb = KnowledgeBase.load(small_kb)
    with pytest.warns(UserWarning) as caught:
        Guard.calibrate(kb, QUESTIONS, k=3, alpha=0.1, answerability="coverage")
    shared = [str(w.message) for w in caught if "each test's share of 0.1" in str(w.message)]
    assert len(shared) == 1, [str(w.message) for w in caught]
