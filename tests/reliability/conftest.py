"""Knowledge bases the reliability tests damage or race on: BM25, so child processes are quick."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragbound.knowledge import KnowledgeBase


@pytest.fixture(scope="module")
def bm25_kb(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bm25") / "kb"
    KnowledgeBase.build([corpus_dir], embedder="bm25").save(out)
    return out


@pytest.fixture
def kb(bm25_kb: Path, tmp_path: Path) -> Path:
    """A private copy of the BM25 knowledge base for one test."""
    target = tmp_path / "kb"
    KnowledgeBase.load(bm25_kb).save(target)
    return target
