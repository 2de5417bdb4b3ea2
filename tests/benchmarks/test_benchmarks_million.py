"""The million-chunk benchmark's knowledge base: real vectors first, then noisy unit copies."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.million import NOISE, synthesise
from ragbound.knowledge import KnowledgeBase


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
