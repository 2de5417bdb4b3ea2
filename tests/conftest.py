"""Shared fixtures: a tiny real corpus written here, and a real MiniLM knowledge base."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.texts import TOPICS


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for topic, sentences in TOPICS.items():
        for i, sentence in enumerate(sentences):
            (root / topic).mkdir(exist_ok=True)
            (root / topic / f"{i}.txt").write_text(sentence + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="session")
def minilm_kb_dir(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved MiniLM knowledge base over the ten documents (built once per session)."""
    from ragbound.knowledge import KnowledgeBase

    out = tmp_path_factory.mktemp("kb") / "kb"
    KnowledgeBase.build([corpus_dir], embedder="minilm").save(out)
    return out
