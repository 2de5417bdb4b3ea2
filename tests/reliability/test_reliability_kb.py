"""The knowledge base's own writes under real processes: two writers at once, a writer and a
reader at once, ``kill -9`` at each step of a commit, Ctrl-C, and damaged files.

Every child is the real ``ragbound`` command (see ``processes.py``). Knowledge bases are BM25
(no model to load) except where the vectors themselves are under test.
"""

from __future__ import annotations

import json
import shutil
import signal
import threading
from pathlib import Path

import numpy as np
import pytest

from ragbound.errors import ArtifactError
from ragbound.knowledge import LOCK_WHAT, KnowledgeBase
from ragbound.locking import writer_lock
from tests.reliability.damage import break_utf8, truncate
from tests.reliability.processes import KILLED, finish, ragbound, start

OWLS = "Owls hunt mice at night and turn their heads far around."
MOLES = "Moles dig long tunnels under lawns and eat earthworms."


def write_doc(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text + "\n", encoding="utf-8")
    return folder


def bm25_kb(corpus: Path, target: Path) -> Path:
    KnowledgeBase.build([corpus], embedder="bm25").save(target)
    return target


def assert_clean(kb_dir: Path) -> None:
    """Only what the committed manifest references is on disk: no leftovers, no temp files."""
    manifest = json.loads((kb_dir / "manifest.json").read_text())
    referenced = {
        f"{s['name']}{suffix}"
        for s in manifest["segments"]
        for suffix in (".chunks.jsonl", ".vectors.npy")
    }
    on_disk = {p.name for p in (kb_dir / "segments").iterdir()}
    assert on_disk <= referenced and on_disk, on_disk - referenced
    assert not [p for p in kb_dir.iterdir() if p.name.endswith(".tmp")]


def wait_until_waiting(process) -> str:
    """Block until the child says it waits for the lock (its first stderr line)."""
    line = process.stderr.readline()
    assert line.startswith("waiting for another process"), line
    return line


def top_hit(kb: KnowledgeBase, text: str) -> tuple[str, float]:
    hits = kb.search([text], k=1)
    return kb.chunk_at(hits.indices[0, 0]).doc_id, float(hits.similarities[0, 0])


# ------------------------------------------------------------------- two writers at once
@pytest.mark.parametrize("run", range(3))
def test_two_adds_at_once_both_land(corpus_dir: Path, tmp_path: Path, run: int):
    kb_dir = bm25_kb(corpus_dir / "bees", tmp_path / "kb")
    owls, moles = (
        write_doc(tmp_path / "a", "owls.txt", OWLS),
        write_doc(tmp_path / "b", "m.txt", MOLES),
    )
    with writer_lock(kb_dir, what=LOCK_WHAT):  # both load and chunk, then queue on the lock
        first, second = start("add", kb_dir, owls), start("add", kb_dir, moles)
        wait_until_waiting(first), wait_until_waiting(second)
    for process in (first, second):
        code, _, err = finish(process)
        assert code == 0, err
    kb = KnowledgeBase.load(kb_dir)
    assert len(kb) == 7 and len(kb.manifest.segments) == 3
    assert top_hit(kb, OWLS)[0] == "owls.txt" and top_hit(kb, MOLES)[0] == "m.txt"
    assert_clean(kb_dir)


def test_two_dense_adds_at_once_keep_each_chunks_own_vectors(minilm_kb_dir: Path, tmp_path: Path):
    kb_dir = tmp_path / "kb"
    shutil.copytree(minilm_kb_dir, kb_dir)
    owls, moles = (
        write_doc(tmp_path / "a", "owls.txt", OWLS),
        write_doc(tmp_path / "b", "m.txt", MOLES),
    )
    with writer_lock(kb_dir, what=LOCK_WHAT):
        first, second = start("add", kb_dir, owls), start("add", kb_dir, moles)
        wait_until_waiting(first), wait_until_waiting(second)
    assert [finish(first)[0], finish(second)[0]] == [0, 0]
    kb = KnowledgeBase.load(kb_dir)
    assert len(kb) == 12 and kb.vectors.shape == (12, 384)
    for text, doc_id in ((OWLS, "owls.txt"), (MOLES, "m.txt")):
        found, similarity = top_hit(kb, text)
        assert found == doc_id and similarity == pytest.approx(1.0, abs=1e-3)


def test_a_writer_waiting_too_long_is_refused(corpus_dir: Path, tmp_path: Path):
    kb_dir = bm25_kb(corpus_dir / "bees", tmp_path / "kb")
    with writer_lock(kb_dir, what=LOCK_WHAT):
        done = ragbound(
            "add", kb_dir, write_doc(tmp_path / "a", "owls.txt", OWLS), RAGBOUND_LOCK_TIMEOUT="0.2"
        )
    assert done.returncode == 2
    [error] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "is writing the knowledge base" in error and "gave up after 0.2 s" in error
    assert len(KnowledgeBase.load(kb_dir)) == 5


def test_ctrl_c_while_waiting_exits_130_and_changes_nothing(corpus_dir: Path, tmp_path: Path):
    kb_dir = bm25_kb(corpus_dir / "bees", tmp_path / "kb")
    before = (kb_dir / "manifest.json").read_bytes()
    with writer_lock(kb_dir, what=LOCK_WHAT):
        process = start("add", kb_dir, write_doc(tmp_path / "a", "owls.txt", OWLS))
        wait_until_waiting(process)
        process.send_signal(signal.SIGINT)
        code, _, err = finish(process)
    assert (code, err.strip()) == (130, "interrupted")
    assert (kb_dir / "manifest.json").read_bytes() == before
    assert len(KnowledgeBase.load(kb_dir)) == 5


def test_a_reader_during_overwrites_always_sees_a_whole_knowledge_base(
    corpus_dir: Path, tmp_path: Path
):
    kb_dir = bm25_kb(corpus_dir, tmp_path / "kb")
    sizes: list[int] = []
    failures: list[ArtifactError] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                sizes.append(len(KnowledgeBase.load(kb_dir)))
            except ArtifactError as exc:  # pragma: no cover - the failure under test
                failures.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for corpus in (corpus_dir / "bees", corpus_dir, corpus_dir / "bees"):
            done = ragbound("index", corpus, "--out", kb_dir, "--embedder", "bm25", "--overwrite")
            assert done.returncode == 0, done.stderr
    finally:
        stop.set()
        reader.join()
    assert not failures and sizes and set(sizes) <= {5, 10}
    assert len(KnowledgeBase.load(kb_dir)) == 5
    assert_clean(kb_dir)


# ------------------------------------------------------------------- kill -9 at each step
def count_or_none(kb_dir: Path) -> int | None:
    """Chunks in the committed knowledge base; None when there is none."""
    if not (kb_dir / "manifest.json").exists():
        return None
    return len(KnowledgeBase.load(kb_dir))


ADD_STEPS = ["kb.add:chunks-written", "kb.add:segment-written", "kb.add:committed"]


@pytest.mark.parametrize("step", ADD_STEPS)
def test_add_killed_at_each_step(corpus_dir: Path, tmp_path: Path, step: str):
    kb_dir = bm25_kb(corpus_dir / "bees", tmp_path / "kb")
    owls = write_doc(tmp_path / "a", "owls.txt", OWLS)
    assert ragbound("add", kb_dir, owls, crash_at=step).returncode == KILLED
    committed = step == "kb.add:committed"
    assert count_or_none(kb_dir) == (6 if committed else 5)
    rerun = ragbound("add", kb_dir, owls)  # the user runs it again
    assert rerun.returncode == (2 if committed else 0), rerun.stderr
    more = ragbound("add", kb_dir, write_doc(tmp_path / "b", "m.txt", MOLES))
    assert more.returncode == 0, more.stderr
    kb = KnowledgeBase.load(kb_dir)
    assert len(kb) == 7 and top_hit(kb, OWLS)[0] == "owls.txt"
    assert_clean(kb_dir)


INDEX_STEPS = ["kb.index:chunks-written", "kb.index:segment-written", "kb.index:committed"]


@pytest.mark.parametrize("step", INDEX_STEPS)
def test_index_killed_at_each_step_then_a_rerun_succeeds(corpus_dir: Path, tmp_path: Path, step):
    kb_dir = tmp_path / "kb"
    args = ("index", corpus_dir, "--out", kb_dir, "--embedder", "bm25")
    assert ragbound(*args, crash_at=step).returncode == KILLED
    committed = step == "kb.index:committed"
    assert count_or_none(kb_dir) == (10 if committed else None)
    rerun = ragbound(*args)
    if committed:
        assert rerun.returncode == 2 and "already holds a knowledge base" in rerun.stderr
    else:
        assert rerun.returncode == 0, rerun.stderr
    assert count_or_none(kb_dir) == 10
    assert_clean(kb_dir)


OVERWRITE_STEPS = [
    "kb.overwrite:chunks-written",
    "kb.overwrite:segment-written",
    "kb.overwrite:committed",
    "kb.overwrite:old-segments-removed",
]


@pytest.mark.parametrize("step", OVERWRITE_STEPS)
def test_overwrite_killed_at_each_step_never_leaves_the_target_empty(
    corpus_dir: Path, tmp_path: Path, step: str
):
    kb_dir = bm25_kb(corpus_dir, tmp_path / "kb")
    write_doc(kb_dir / "calibration", "manifest.json", "{}")  # the old knowledge's
    args = ("index", corpus_dir / "bees", "--out", kb_dir, "--embedder", "bm25", "--overwrite")
    assert ragbound(*args, crash_at=step).returncode == KILLED
    committed = step in OVERWRITE_STEPS[2:]
    assert count_or_none(kb_dir) == (5 if committed else 10)
    rerun = ragbound(*args)
    assert rerun.returncode == 0, rerun.stderr
    assert count_or_none(kb_dir) == 5
    assert not (kb_dir / "calibration").exists()
    assert "removed the calibration" in rerun.stderr  # the crash came before it went
    assert_clean(kb_dir)


# ------------------------------------------------------------------- usage around writes
def test_overwrite_refuses_to_delete_other_files_unless_told(corpus_dir: Path, tmp_path: Path):
    kb_dir = bm25_kb(corpus_dir, tmp_path / "kb")
    (kb_dir / "notes.md").write_text("mine")
    args = ("index", corpus_dir / "bees", "--out", kb_dir, "--embedder", "bm25", "--overwrite")
    refused = ragbound(*args)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "notes.md" in refused.stderr and "--delete-other-files" in refused.stderr
    assert (kb_dir / "notes.md").exists() and count_or_none(kb_dir) == 10
    done = ragbound(*args, "--delete-other-files")
    assert done.returncode == 0 and "deleted 1 other file(s)" in done.stderr
    assert not (kb_dir / "notes.md").exists() and count_or_none(kb_dir) == 5


def test_add_warns_that_it_made_the_calibration_stale(corpus_dir: Path, tmp_path: Path):
    kb_dir = bm25_kb(corpus_dir / "bees", tmp_path / "kb")
    quiet = ragbound("add", kb_dir, write_doc(tmp_path / "a", "owls.txt", OWLS))
    assert quiet.returncode == 0 and "calibrat" not in quiet.stderr  # no calibration yet
    calibration = {"kb_fingerprint": KnowledgeBase.load(kb_dir).fingerprint}
    write_doc(kb_dir / "calibration", "manifest.json", json.dumps(calibration))
    done = ragbound("add", kb_dir, write_doc(tmp_path / "b", "m.txt", MOLES))
    assert done.returncode == 0
    assert (
        done.stderr.startswith("warning: the calibration in") and "calibrate again" in done.stderr
    )


# ------------------------------------------------------------------- damaged files
def damage_chunks(path: Path) -> None:
    path.write_bytes(path.read_bytes().replace(b"bee", b"wasp", 1))


def shift_vectors(path: Path) -> None:
    vectors = np.load(path)
    np.save(path, (vectors + 0.01).astype(np.float32))


def replace_rows(path: Path) -> None:
    vectors = np.load(path)
    vectors[:5] = vectors[5:10]
    np.save(path, vectors)


DAMAGE = {
    "chunk file edited": (damage_chunks, ".chunks.jsonl"),
    "chunk file truncated": (truncate, ".chunks.jsonl"),
    "chunk file not UTF-8": (break_utf8, ".chunks.jsonl"),
    "vectors changed": (shift_vectors, ".vectors.npy"),
    "vector rows replaced": (replace_rows, ".vectors.npy"),
    "vector file truncated": (truncate, ".vectors.npy"),
}


@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_file_is_one_error_naming_it(minilm_kb_dir: Path, tmp_path: Path, case: str):
    kb_dir = tmp_path / "kb"
    shutil.copytree(minilm_kb_dir, kb_dir)
    damage, suffix = DAMAGE[case]
    [damaged] = (kb_dir / "segments").glob(f"*{suffix}")
    damage(damaged)
    done = ragbound("add", kb_dir, write_doc(tmp_path / "a", "owls.txt", OWLS))
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert str(damaged) in done.stderr and "is damaged" in done.stderr
