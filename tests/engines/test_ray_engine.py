"""The Ray engine on a real local Ray instance (``ray.init(num_cpus=2)``): the same
similarities, scores and shift windows as the local engine, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragbound.detect import Guard
from ragbound.engines import SEARCH_BATCH, make_search
from tests.cli.runner import run
from tests.serve.server import served_kb
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE

ray = pytest.importorskip("ray", reason="the Ray engine needs pip install 'ragbound[ray]'")
pytestmark = pytest.mark.slow  # a Ray instance and two actors loading MiniLM: about 2 minutes


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def kb_dir(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return served_kb(minilm_kb_dir, tmp_path_factory.mktemp("ray") / "kb")


def many_queries(n: int) -> list[str]:
    """More than one search batch of distinct queries, in and out of knowledge."""
    pool = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE + OUT_OF_KNOWLEDGE
    return [f"{pool[i % len(pool)]} ({i})" for i in range(n)]


def test_ray_search_equals_local_search_in_order(local_ray, kb_dir: Path) -> None:
    guard = Guard.load(kb_dir)
    queries = many_queries(2 * SEARCH_BATCH + 37)  # three batches, the last one short
    local = make_search(guard)(queries)
    on_ray = make_search(guard, "ray", workers=2)(queries)
    assert on_ray.shape == local.shape == (len(queries), guard.k)
    np.testing.assert_allclose(on_ray, local, atol=1e-6)


def test_score_and_shift_on_ray_equal_local(local_ray, kb_dir: Path, tmp_path, monkeypatch, capsys):
    log = tmp_path / "log.jsonl"
    lines = [json.dumps({"time": i, "query": q}) for i, q in enumerate(many_queries(300))]
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = {}
    windows = {}
    for engine in ("local", "ray"):
        out = tmp_path / f"{engine}.jsonl"
        code, _, err = run(
            monkeypatch, capsys, "test-log", str(kb_dir), str(log), "--out", str(out),
            "--engine", engine, "--json",
        )  # fmt: skip
        assert code == 0, err
        rows[engine] = [json.loads(line) for line in out.read_text().splitlines()]
        code, out_text, err = run(
            monkeypatch, capsys, "shift", str(kb_dir), "--queries", str(log), "--window", "50",
            "--state", str(tmp_path / f"{engine}.state.json"), "--engine", engine, "--json",
        )  # fmt: skip
        assert code == 0, err
        windows[engine] = [json.loads(line) for line in out_text.splitlines()]
    assert len(rows["ray"]) == 300
    assert [r["line"] for r in rows["ray"]] == [r["line"] for r in rows["local"]]
    assert [r["p_value"] for r in rows["ray"]] == [r["p_value"] for r in rows["local"]]
    np.testing.assert_allclose(
        [r["score"] for r in rows["ray"]], [r["score"] for r in rows["local"]], atol=1e-6
    )
    assert len(windows["ray"]) == 6
    assert [w["p_value"] for w in windows["ray"]] == [w["p_value"] for w in windows["local"]]
