"""End to end with the real bundled local model: 5 synthetic queries, calibrate, check."""

from pathlib import Path

import pytest

from ragbound.detect import Guard
from ragbound.knowledge import KnowledgeBase
from ragbound.synth.queries import generate_queries
from tests.markers import needs_local_model

pytestmark = [
    pytest.mark.slow,
    needs_local_model,
]


def test_real_local_model_writes_queries_that_calibrate(minilm_kb_dir: Path, tmp_path: Path):
    from ragbound.llm import CachedLLM, ResponseCache, make_llm

    kb = KnowledgeBase.load(minilm_kb_dir)
    llm = CachedLLM(make_llm("local"), ResponseCache(tmp_path / "cache"))
    queries, report = generate_queries(kb, llm, n=5, seed=0, concurrency=1)
    assert report.kept == len(queries) >= 3 and report.requested <= 10, report
    assert all(q.query.endswith("?") or len(q.query.split()) >= 4 for q in queries)
    guard = Guard.calibrate(kb, [q.query for q in queries], k=4, alpha=0.2)
    far = guard.check("Who painted the Mona Lisa?")
    near = guard.check(queries[0].query)
    assert far.p_value < near.p_value


def test_the_synth_command_feeds_calibrate_and_check(minilm_kb_dir: Path, tmp_path: Path):
    from typer.testing import CliRunner

    from ragbound.cli import app

    kb_dir = tmp_path / "kb"
    KnowledgeBase.load(minilm_kb_dir).save(kb_dir)
    queries = tmp_path / "synthetic.jsonl"
    runner = CliRunner()
    synth = runner.invoke(app, ["synth", str(kb_dir), "--n", "4", "--out", str(queries)])
    assert synth.exit_code == 0, synth.output
    assert "wrote 4 queries" in synth.output, synth.output
    calibrate = ["calibrate", str(kb_dir), "--queries", str(queries), "--k", "4", "--alpha", "0.25"]
    assert runner.invoke(app, calibrate).exit_code == 0
    decide = runner.invoke(app, ["decide", str(kb_dir), "Who painted the Mona Lisa?", "--json"])
    assert decide.exit_code == 0 and '"p_value"' in decide.output
