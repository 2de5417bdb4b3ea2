"""Tripwires under real processes: two adds at once, kill -9 at each step, damaged files.

Tripwires need a dense knowledge base, and a child that embeds loads MiniLM (seconds), so
only the commands that must embed run as MiniLM children; the rest (remove, list) load no
model. The expected vectors are embedded here, by the model the session already loaded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ragbound.errors import ArtifactError
from ragbound.knowledge import KnowledgeBase
from ragbound.tripwires import LiveTripwires, read_tripwires
from tests.reliability.damage import break_utf8, one_error_line, truncate
from tests.reliability.processes import KILLED, finish, ragbound, start
from tests.tripwires.tripwire_texts import TRIPWIRES

STEPS = ("texts-written", "generation-written", "committed")


@pytest.fixture
def kb(minilm_kb_dir: Path, tmp_path: Path) -> Path:
    target = tmp_path / "kb"
    shutil.copytree(minilm_kb_dir, target)
    return target


def tripwire_file(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def committed(kb: Path) -> LiveTripwires:
    return LiveTripwires.open(KnowledgeBase.load(kb))


def assert_own_vectors(store: LiveTripwires) -> None:
    """Each tripwire's stored vector is the embedding of its own text."""
    expected = store.kb.embed([t.text for t in store.tripwires])
    np.testing.assert_allclose(store.vectors, expected, atol=1e-5)


def assert_only_committed_files(kb: Path, store: LiveTripwires) -> None:
    name = f"g{store.manifest.generation:06d}"
    assert sorted(p.name for p in (kb / "tripwires").iterdir()) == [f"{name}.jsonl", f"{name}.npy"]
    assert not list(kb.glob(".tripwires.json.*.tmp"))


def test_two_tripwire_adds_at_once_both_land_each_with_its_own_vectors(kb: Path, tmp_path: Path):
    added: set[str] = set()
    for round_ in range(2):
        files = []
        for half, rows in enumerate((TRIPWIRES[:2], TRIPWIRES[2:])):
            rows = [{**r, "text": f"{r['text']} (case {round_}{half})"} for r in rows]
            files.append(tripwire_file(tmp_path / f"t{round_}{half}.jsonl", rows))
        writers = [start("tripwire", "add", kb, f, "--json") for f in files]
        done = [finish(w) for w in writers]
        assert [d[0] for d in done] == [0, 0], done
        for _, out, _ in done:
            added |= set(json.loads(out)["ids"])
        store = committed(kb)
        assert {t.id for t in store.tripwires} == added  # nothing lost
        assert len(store.manifest.history) == 2 * (round_ + 1)
        assert_own_vectors(store)
        assert_only_committed_files(kb, store)
    store = committed(kb)
    texts = {t.id: t.text for t in store.tripwires}
    check = ragbound("tripwire", "check", kb, *texts.values(), "--json")
    assert check.returncode == 0, check.stderr
    for (own, text), line in zip(texts.items(), check.stdout.splitlines(), strict=True):
        decision = json.loads(line)
        assert decision["query"] == text
        first = decision["triggers"][0]
        assert first["id"] == own and first["rank"] == 1 and first["similarity"] > 0.999


@pytest.mark.parametrize("step", STEPS)
def test_add_killed_at_each_step_leaves_the_old_or_new_set_and_the_next_write_cleans(
    kb: Path, tmp_path: Path, step: str
):
    store = committed(kb)
    store.add(read_tripwires(tripwire_file(tmp_path / "first.jsonl", TRIPWIRES[:2])))
    before = {t.id for t in store.tripwires}
    second = tripwire_file(tmp_path / "second.jsonl", TRIPWIRES[2:])
    killed = ragbound("tripwire", "add", kb, second, crash_at=f"tripwires.add:{step}")
    assert killed.returncode == KILLED
    after = committed(kb)
    assert len(after) == (4 if step == "committed" else 2)
    assert before <= {t.id for t in after.tripwires}
    assert_own_vectors(after)
    assert len(list((kb / "tripwires").iterdir())) > 2  # what the crash left
    # the next write (here an add of the remaining tripwires, in this process) cleans up
    rest = [t for t in read_tripwires(second) if t.id not in {x.id for x in after.tripwires}]
    rerun = committed(kb)
    if rest:
        rerun.add(rest)
    else:
        rerun.remove(topics=["sabotage"])
    assert_only_committed_files(kb, committed(kb))
    assert_own_vectors(committed(kb))


@pytest.mark.parametrize("step", STEPS)
def test_remove_killed_at_each_step_then_a_clean_rerun(kb: Path, tmp_path: Path, step: str):
    committed(kb).add(read_tripwires(tripwire_file(tmp_path / "t.jsonl", TRIPWIRES)))
    (kb / ".tripwires.json.crashed.tmp").write_text("{")  # an older crash's temporary file
    args = ("tripwire", "remove", kb, "--topic", "harm")
    assert ragbound(*args, crash_at=f"tripwires.remove:{step}").returncode == KILLED
    assert len(committed(kb)) == (2 if step == "committed" else 4)
    rerun = ragbound(*args)
    if step == "committed":  # already removed: the rerun says so and changes nothing
        one_error_line(rerun, "no tripwire with topic 'harm'")
        committed(kb).remove(ids=[committed(kb).tripwires[0].id])  # any write cleans up
    else:
        assert rerun.returncode == 0, rerun.stderr
    store = committed(kb)
    assert {t.topic for t in store.tripwires} == {"sabotage"}
    assert_own_vectors(store)
    assert_only_committed_files(kb, store)


def replace_rows(path: Path) -> None:
    vectors = np.load(path)
    vectors[[0, 1]] = vectors[[2, 3]]
    np.save(path, vectors)


def write_nan(path: Path) -> None:
    vectors = np.load(path)
    vectors[1, 7] = np.nan
    np.save(path, vectors)


def nan_without_checksums(path: Path) -> None:
    """A NaN in a tripwire set whose manifest predates checksums."""
    write_nan(path)
    manifest = path.parent.parent / "tripwires.json"
    data = json.loads(manifest.read_text())
    del data["texts_sha256"], data["vectors_sha256"]
    manifest.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("suffix", "damage", "says"),
    [
        ("npy", replace_rows, "is damaged: its SHA-256"),
        ("npy", write_nan, "is damaged: its SHA-256"),
        ("npy", nan_without_checksums, "NaN"),
        ("npy", truncate, "is damaged: its SHA-256"),
        ("jsonl", break_utf8, "is damaged: its SHA-256"),
    ],
    ids=["rows-replaced", "nan", "nan-in-old-manifest", "truncated", "not-utf8"],
)
def test_a_damaged_tripwire_file_is_one_error_naming_it(
    kb: Path, tmp_path: Path, suffix: str, damage, says: str
):
    committed(kb).add(read_tripwires(tripwire_file(tmp_path / "t.jsonl", TRIPWIRES)))
    path = next((kb / "tripwires").glob(f"*.{suffix}"))
    damage(path)
    one_error_line(ragbound("tripwire", "list", kb), path.name, says)
    with pytest.raises(ArtifactError, match=says):
        committed(kb)
