"""``ragbound index`` killed while embedding continues where it stopped on the next run.

Real child processes killed with SIGKILL at a named step (``RAGBOUND_CRASH_AT``), tiny staged
blocks (``RAGBOUND_STAGE_BLOCK``) so a small corpus spans several, and one thread each so the
killed-and-resumed build and the uninterrupted one compute the same numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ragbound.knowledge import STAGING, KnowledgeBase
from tests.reliability.processes import KILLED, ragbound

SMALL = {"RAGBOUND_STAGE_BLOCK": "3", "OMP_NUM_THREADS": "1"}
FACTS = [
    "Bees dance to show where flowers are.",
    "Owls hunt mice at night.",
    "Moles dig tunnels under lawns.",
    "Rails on a standard gauge line are 1435 mm apart.",
    "Glaciers carve valleys into a U shape.",
    "Copper conducts heat and electricity well.",
    "Tides follow the moon's pull on the oceans.",
    "Ferns spread by spores rather than seeds.",
    "Lighthouses warn ships away from rocks.",
    "Sourdough rises with wild yeast and bacteria.",
    "Comets grow tails when they near the sun.",
]


def write_corpus(folder: Path) -> Path:
    folder.mkdir()
    for number, fact in enumerate(FACTS):
        (folder / f"{number:02d}.txt").write_text(fact + "\n", encoding="utf-8")
    return folder


def test_an_index_killed_while_embedding_resumes_from_its_last_block(tmp_path: Path):
    corpus = write_corpus(tmp_path / "corpus")
    kb_dir = tmp_path / "kb"
    killed = ragbound("index", corpus, "--out", kb_dir, crash_at="kb.embed:block-2-staged", **SMALL)
    assert killed.returncode == KILLED, killed.stderr
    assert not (kb_dir / "manifest.json").exists()
    staged = sorted(p.name for p in (kb_dir / STAGING).glob("*/block-*.npy"))
    assert staged == ["block-000001.npy", "block-000002.npy"]

    # armed at the finished blocks too: embedding block 1 or 2 again would kill the rerun
    again = ",".join(f"kb.embed:block-{n}-staged" for n in (1, 2))
    resumed = ragbound("index", corpus, "--out", kb_dir, crash_at=again, **SMALL)
    assert resumed.returncode == 0, resumed.stderr
    assert not (kb_dir / STAGING).exists()

    fresh_dir = tmp_path / "fresh"
    fresh = ragbound("index", corpus, "--out", fresh_dir, **SMALL)
    assert fresh.returncode == 0, fresh.stderr
    kb, uninterrupted = KnowledgeBase.load(kb_dir), KnowledgeBase.load(fresh_dir)
    assert len(kb) == len(FACTS) and kb.fingerprint == uninterrupted.fingerprint
    np.testing.assert_array_equal(kb.vectors, uninterrupted.vectors)
    resumed_files, fresh_files = (
        json.loads((folder / "manifest.json").read_text())["segments"][0]
        for folder in (kb_dir, fresh_dir)
    )
    assert resumed_files["vectors_sha256"] == fresh_files["vectors_sha256"]
