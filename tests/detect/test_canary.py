"""Canaries: recorded at calibration, clean after save and load, refused when the knowledge's
similarities moved (unless forced), and HNSW's own noise does not trip them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from ragbound.detect import Guard
from ragbound.detect.calibration import CALIBRATION_FORMAT
from ragbound.detect.canary import (
    APPROXIMATE_TOLERANCE,
    CANARY_COUNT,
    CANARY_K,
    Canary,
    _move,
    check_canaries,
    pick_canaries,
    record_canaries,
)
from ragbound.errors import IncompatibleArtifactError
from ragbound.knowledge import KnowledgeBase
from ragbound.stores import Hits, SearchInfo
from tests.texts import IN_KNOWLEDGE

pytestmark = pytest.mark.filterwarnings("ignore:.*calibration queries cannot flag")


def test_canaries_are_spread_evenly_and_deterministic():
    queries = [f"q{i}" for i in range(21)]
    assert pick_canaries(queries) == ["q0", "q5", "q10", "q15", "q20"]
    assert pick_canaries(queries[:3]) == ["q0", "q1", "q2"]
    assert pick_canaries([]) == []


def test_recorded_at_calibration_and_clean_after_save_and_load(minilm_kb_dir: Path, tmp_path):
    kb_dir = tmp_path / "kb"
    KnowledgeBase.load(minilm_kb_dir).save(kb_dir)
    guard = Guard.calibrate(KnowledgeBase.load(kb_dir), IN_KNOWLEDGE, k=3)
    canaries = guard.calibration.manifest.canaries
    assert [c.query for c in canaries] == pick_canaries(IN_KNOWLEDGE)
    # top-min(CANARY_K, k): the calibration's k is what every search is known to fill
    assert len(canaries) == CANARY_COUNT and all(len(c.chunk_ids) == 3 for c in canaries)
    guard.save()
    loaded = Guard.load(kb_dir)
    assert loaded.calibration.manifest.canaries == canaries
    check = loaded.check_canaries()
    assert check.ok and check.exact and check.largest_move <= 1e-5 and check.rows_changed == 0


def test_a_calibration_without_canaries_still_loads(minilm_kb_dir: Path, tmp_path):
    kb_dir = tmp_path / "kb"
    KnowledgeBase.load(minilm_kb_dir).save(kb_dir)
    Guard.calibrate(KnowledgeBase.load(kb_dir), IN_KNOWLEDGE, k=3).save()
    path = kb_dir / "calibration" / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    assert manifest["format"] == CALIBRATION_FORMAT
    del manifest["canaries"]
    path.write_text(json.dumps(manifest), encoding="utf-8")
    guard = Guard.load(kb_dir)
    assert guard.calibration.manifest.canaries == []
    assert guard.check_canaries().ok


def test_the_learned_statistics_record_canaries_too(minilm_kb_dir: Path):
    kb = KnowledgeBase.load(minilm_kb_dir)
    guard = Guard.calibrate(kb, IN_KNOWLEDGE * 2, statistic="combined")
    assert len(guard.calibration.manifest.canaries) == CANARY_COUNT
    assert guard.check_canaries().ok


def test_a_move_past_the_tolerance_is_refused_with_one_line(minilm_kb_dir: Path):
    guard = Guard.calibrate(KnowledgeBase.load(minilm_kb_dir), IN_KNOWLEDGE, k=3)
    first = guard.calibration.manifest.canaries[0]
    moved = first.model_copy(update={"similarities": [s + 0.21 for s in first.similarities]})
    guard.calibration.manifest.canaries[0] = moved
    with pytest.raises(IncompatibleArtifactError) as caught:
        guard.verify_canaries()
    message = str(caught.value)
    assert "\n" not in message and "moved by 0.21" in message and "--force" in message
    assert first.query[:20] in message
    guard.verify_canaries(force=True)


def test_approximate_moves_compare_the_same_rows():
    canary = Canary(query="q", similarities=[0.9, 0.8, 0.7], chunk_ids=["a", "b", "c"])
    # the graph missed b: ranks shift, but the rows found both times did not move
    assert _move(canary, [0.9, 0.7, 0.6], ["a", "c", "d"], by_rank=False) == 0.0
    assert _move(canary, [0.9, 0.7, 0.6], ["a", "c", "d"], by_rank=True) == pytest.approx(0.1)
    assert _move(canary, [0.5, 0.4, 0.3], ["x", "y", "z"], by_rank=False) == 0.0
    assert _move(canary, [0.5, 0.4, 0.3], ["x", "y", "z"], by_rank=True) == pytest.approx(0.4)


@dataclass
class _Rows:
    """Knowledge over a store searched with named query vectors (for measuring HNSW noise):
    row ``i`` of the store is chunk ``ids[i]``."""

    store: object
    ids: list[str]
    queries: dict[str, np.ndarray]

    def describe(self) -> SearchInfo:
        return self.store.describe()  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self.ids)

    def search(self, queries, k: int) -> Hits:
        return self.store.search(np.stack([self.queries[q] for q in queries]), k)  # type: ignore

    def chunk_at(self, row: int):
        return type("Row", (), {"id": self.ids[int(row)]})()


GRAPHS = {
    "poor float16 graph": {"m": 8, "ef_construction": 40, "ef_search": 10, "precision": "float16"},
    "default graph": {"ef_search": 16},
}


@pytest.mark.parametrize("graph", GRAPHS)
def test_hnsw_noise_does_not_trip_the_tolerance(graph: str):
    """Rebuild an HNSW graph with another insertion order (another graph, other misses) and
    search with a small ef_search: the canaries stay within the approximate tolerance."""
    from ragbound.stores.hnsw import HnswParams, HnswStore

    pytest.importorskip("faiss", reason="faiss-cpu is not installed (the hnsw extra)")
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(40, 32))
    rows = centres[rng.integers(0, 40, 4000)] + 0.6 * rng.normal(size=(4000, 32))
    rows = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    queries = rows[rng.choice(4000, 50, replace=False)] + 0.3 * rng.normal(size=(50, 32))
    queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    named = {f"q{i}": v for i, v in enumerate(queries)}
    params = HnswParams(**GRAPHS[graph])
    ids = [str(i) for i in range(4000)]
    first = _Rows(HnswStore(rows, similarity="cosine", params=params), ids, named)
    canaries = [c for name in named for c in _canaries(first, name)]
    order = rng.permutation(4000)
    rebuilt = _Rows(
        HnswStore(rows[order], similarity="cosine", params=params), [str(i) for i in order], named
    )
    check = check_canaries(rebuilt, canaries)
    rank_moves = [_move(c, *_row(rebuilt, c.query), by_rank=True) for c in canaries]
    print(f"{graph} rebuilt: pairwise {check.largest_move:.2e}, rank-wise {max(rank_moves):.2e}, "
          f"top rows changed {check.rows_changed}/{check.canaries}")  # fmt: skip
    assert not check.exact and check.ok and check.largest_move < APPROXIMATE_TOLERANCE / 10
    assert check_canaries(first, canaries).largest_move == 0.0  # the same graph: no move


def test_the_local_hnsw_backing_is_clean_after_save_and_load(minilm_kb_dir: Path, tmp_path):
    from ragbound.stores.hnsw import HnswParams

    pytest.importorskip("faiss", reason="faiss-cpu is not installed (the hnsw extra)")
    kb = KnowledgeBase.load(minilm_kb_dir)
    kb.use_hnsw(HnswParams(ef_search=8, m=8, precision="float16"))
    kb.save(tmp_path / "kb")
    Guard.calibrate(KnowledgeBase.load(tmp_path / "kb"), IN_KNOWLEDGE, k=3).save()
    check = Guard.load(tmp_path / "kb").check_canaries()
    print(f"local hnsw reloaded: move {check.largest_move:.2e}")
    assert not check.exact and check.ok and check.largest_move <= 1e-6


def _canaries(kb: _Rows, name: str) -> list[Canary]:
    kb_one = _Rows(kb.store, kb.ids, {name: kb.queries[name]})
    return record_canaries(kb_one, [name], CANARY_K)  # type: ignore[arg-type]


def _row(kb: _Rows, query: str) -> tuple[list[float], list[str]]:
    hits = kb.search([query], 5)
    return list(map(float, hits.similarities[0])), [kb.ids[int(j)] for j in hits.indices[0]]
