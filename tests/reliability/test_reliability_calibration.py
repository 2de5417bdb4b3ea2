"""The calibration under real processes: two writers, a reader, kill -9 mid-save, damage.

A BM25 knowledge base keeps these child processes quick (no model to load); the lock and
the commit are the same for every embedder.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragbound.detect import Guard
from ragbound.detect.calibration import Calibration
from ragbound.errors import ArtifactError
from ragbound.knowledge import KnowledgeBase
from ragbound.locking import writer_lock
from tests.reliability.damage import break_utf8, one_error_line, truncate
from tests.reliability.processes import KILLED, finish, ragbound, start
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE

K = 3
QUERIES_A = IN_KNOWLEDGE
QUERIES_B = MORE_IN_KNOWLEDGE
PROBES = ["How do bees make honey?", "What is the capital of Peru?"]
CALIBRATION_STEPS = (
    "calibration.save:similarities-written",
    "calibration.save:data-written",
    "calibration.save:committed",
)


@pytest.fixture
def query_files(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("\n".join(QUERIES_A) + "\n", encoding="utf-8")
    b.write_text("\n".join(QUERIES_B) + "\n", encoding="utf-8")
    return a, b


def calibrate_args(kb: Path, queries: Path) -> tuple[str | Path, ...]:
    # alpha 0.3: 16 questions resolve it without the small-calibration warning (its line
    # would sit beside the error and waiting lines these tests read)
    return ("calibrate", kb, "--queries", queries, "--k", str(K), "--alpha", "0.3")


def expected_similarities(kb: Path, queries: list[str]) -> np.ndarray:
    """What a calibration on ``queries`` holds, computed here without saving."""
    return Guard.calibrate(KnowledgeBase.load(kb), queries, k=K, alpha=0.1).calibration.similarities


def assert_whole(kb: Path) -> Calibration:
    """The committed calibration loads, is one of the two, and nothing else is in its folder."""
    calibration = Calibration.load(kb)
    assert calibration.queries in (QUERIES_A, QUERIES_B)
    np.testing.assert_array_equal(
        calibration.similarities, expected_similarities(kb, calibration.queries)
    )
    ident = calibration.manifest.id
    assert sorted(p.name for p in (kb / "calibration").iterdir()) == [
        f"{ident}.queries.jsonl",
        f"{ident}.similarities.npy",
        "manifest.json",
    ]
    return calibration


def test_two_calibrates_at_once_leave_one_whole_calibration(kb: Path, query_files):
    for _ in range(3):
        first, second = (start(*calibrate_args(kb, f)) for f in query_files)
        codes = [finish(first), finish(second)]
        assert [c[0] for c in codes] == [0, 0], codes
        assert_whole(kb)


def test_a_reader_during_a_writer_sees_the_old_or_the_new_calibration(kb: Path, query_files):
    a, b = query_files
    assert ragbound(*calibrate_args(kb, a)).returncode == 0
    base = KnowledgeBase.load(kb)
    expected = [
        [v.p_value for v in Guard.calibrate(base, queries, k=K, alpha=0.1).check_many(PROBES)]
        for queries in (QUERIES_A, QUERIES_B)
    ]
    for round_ in range(4):
        writer = start(*calibrate_args(kb, b if round_ % 2 == 0 else a))
        reader = ragbound("decide", kb, *PROBES, "--json")
        assert reader.returncode == 0, reader.stderr
        seen = [json.loads(line)["test"]["p_value"] for line in reader.stdout.splitlines()]
        assert seen in expected
        assert finish(writer)[0] == 0


def test_a_second_writer_waits_for_the_lock_or_is_refused_naming_the_holder(kb: Path, query_files):
    a, b = query_files
    assert ragbound(*calibrate_args(kb, a)).returncode == 0
    with writer_lock(kb, what="knowledge base"):
        refused = ragbound(*calibrate_args(kb, b), RAGBOUND_LOCK_TIMEOUT="0")
        one_error_line(refused, "another process (pid", "writing the knowledge base", str(kb))
        reader = ragbound("decide", kb, *PROBES, "--json")  # readers take no lock
        assert reader.returncode == 0, reader.stderr
        waiting = start(*calibrate_args(kb, b))
        # hold the lock until the writer says it waits (no timing guess)
        assert waiting.stderr is not None
        line = waiting.stderr.readline()
        assert line.startswith("waiting for another process (pid"), line
    code, _, err = finish(waiting)
    assert code == 0 and "waiting" not in err  # said once, then saved
    assert Calibration.load(kb).queries == QUERIES_B


@pytest.mark.parametrize("step", CALIBRATION_STEPS)
def test_kill_at_each_step_then_a_clean_rerun(kb: Path, query_files, step: str):
    a, b = query_files
    assert ragbound(*calibrate_args(kb, a)).returncode == 0
    killed = ragbound(*calibrate_args(kb, b), crash_at=step)
    assert killed.returncode == KILLED
    committed = step.endswith("committed")
    assert Calibration.load(kb).queries == (QUERIES_B if committed else QUERIES_A)
    if not committed:  # the crash left files of its own
        assert len(list((kb / "calibration").iterdir())) > 3
    (kb / "calibration" / ".manifest.json.crashed.tmp").write_text("{")
    assert ragbound(*calibrate_args(kb, b)).returncode == 0
    assert assert_whole(kb).queries == QUERIES_B


def test_two_calibrations_made_in_one_second_of_one_query_set_get_two_ids(kb: Path, monkeypatch):
    monkeypatch.setattr("ragbound.detect.calibration.utc_now", lambda: "2026-11-23T10:00:00+00:00")
    base = KnowledgeBase.load(kb)
    made = [Guard.calibrate(base, QUERIES_A, k=K, alpha=0.1).calibration for _ in range(2)]
    assert made[0].manifest.created_at == made[1].manifest.created_at
    assert made[0].manifest.id != made[1].manifest.id


def shift_similarities(path: Path) -> None:
    np.save(path, np.load(path) + 0.2)


def nan_without_checksums(path: Path) -> None:
    """A NaN in a calibration whose manifest predates checksums."""
    sims = np.load(path)
    sims[1, 0] = np.nan
    np.save(path, sims)
    manifest = path.parent / "manifest.json"
    data = json.loads(manifest.read_text())
    del data["similarities_sha256"], data["queries_sha256"]
    manifest.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("suffix", "damage", "says"),
    [
        ("similarities.npy", shift_similarities, "is damaged: its SHA-256"),
        ("similarities.npy", truncate, "is damaged: its SHA-256"),
        ("queries.jsonl", break_utf8, "is damaged: its SHA-256"),
        ("similarities.npy", nan_without_checksums, "NaN"),
        ("similarities.npy", Path.unlink, "not found"),
    ],
    ids=["shifted-by-0.2", "truncated", "not-utf8", "nan-in-old-manifest", "missing"],
)
def test_a_damaged_calibration_file_is_one_error_naming_it(
    kb: Path, query_files, suffix: str, damage, says: str
):
    assert ragbound(*calibrate_args(kb, query_files[0])).returncode == 0
    path = next((kb / "calibration").glob(f"*.{suffix}"))
    damage(path)
    one_error_line(ragbound("decide", kb, *PROBES), path.name, says)
    with pytest.raises(ArtifactError, match=says):
        Calibration.load(kb)


def test_nan_similarities_are_refused_at_save(kb: Path):
    calibration = Guard.calibrate(KnowledgeBase.load(kb), QUERIES_A, k=K, alpha=0.1).calibration
    calibration.similarities[0, 0] = np.nan
    with pytest.raises(ArtifactError, match="must be finite"):
        calibration.save(kb)
    assert not Calibration.exists(kb)
