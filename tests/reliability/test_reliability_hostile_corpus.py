"""``ragbound index`` on hostile corpus folders, in real child processes.

Symlink loops, a dangling symlink, a FIFO and a socket are skipped with one warning line (a
FIFO is never opened: a child that blocks on it hits the generous timeout and the test fails);
an unreadable or binary file is one ``error:`` line; a single line of megabytes completes;
Ctrl-C or SIGTERM while embedding leaves no ``staging/`` folder that holds nothing to resume.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ragbound.knowledge import STAGING, KnowledgeBase
from tests.reliability.processes import finish, ragbound, start

FACT = "Bees dance to show where flowers are.\n"
GENEROUS_S = 300.0  # a child blocked on a FIFO never ends: it fails the test at this timeout
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "river",
    "stone",
    "bread",
    "copper",
    "owl",
    "fern",
    "tide",
    "comet",
    "glacier",
]


def corpus_with(folder: Path) -> Path:
    """A corpus folder holding one ordinary document."""
    folder.mkdir(parents=True)
    (folder / "bees.txt").write_text(FACT, encoding="utf-8")
    return folder


def index(corpus: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``ragbound index CORPUS --out OUT --embedder bm25`` run to the end (within the timeout)."""
    return ragbound("index", corpus, "--out", out, "--embedder", "bm25", *args, timeout=GENEROUS_S)


def errors(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("error:")]


def test_loops_dangling_links_fifos_and_sockets_are_skipped_with_one_warning(tmp_path: Path):
    corpus = corpus_with(tmp_path / "corpus")
    (corpus / "a.txt").symlink_to("b.txt")
    (corpus / "b.txt").symlink_to("a.txt")
    (corpus / "gone.md").symlink_to("nowhere.md")
    (corpus / "sub").mkdir()
    (corpus / "sub" / "up").symlink_to("..", target_is_directory=True)
    os.mkfifo(corpus / "pipe.txt")
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(corpus / "socket.jsonl"))
        done = index(corpus, tmp_path / "kb")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("warning:") == 1
    warning = " ".join(done.stderr.split())
    for entry in ("a.txt (a symlink loop)", "gone.md (a dangling symlink)", "pipe.txt (a FIFO)"):
        assert entry in warning
    assert "skipped 6 corpus entries" in warning and "and 1 more" in warning  # the folder loop
    assert len(KnowledgeBase.load(tmp_path / "kb")) == 1


def test_a_fifo_named_directly_is_one_error_line_and_is_never_opened(tmp_path: Path):
    os.mkfifo(tmp_path / "pipe.txt")
    done = index(tmp_path / "pipe.txt", tmp_path / "kb")
    assert done.returncode == 2
    assert errors(done) == [
        f"error: {tmp_path / 'pipe.txt'}: not a regular file (a FIFO); name a file or a folder"
    ]
    assert not (tmp_path / "kb").exists()


def unreadable(corpus: Path) -> Path:
    """A file the child cannot read: mode 000, or (root reads those) one whose read fails with
    EIO, a symlink to the child's own ``/proc/self/mem``."""
    path = corpus / "secret.txt"
    if os.geteuid() != 0:
        path.write_text("Secret.\n", encoding="utf-8")
        path.chmod(0)
        return path
    if not Path("/proc/self/mem").exists():
        pytest.skip("running as root without /proc: no file here is unreadable")
    path.symlink_to("/proc/self/mem")
    return path


def test_an_unreadable_file_is_one_error_line(tmp_path: Path):
    corpus = corpus_with(tmp_path / "corpus")
    path = unreadable(corpus)
    done = index(corpus, tmp_path / "kb")
    assert done.returncode == 2, done.stderr
    [error] = errors(done)
    assert error.startswith(f"error: {path}: cannot read the file")
    assert "Traceback" not in done.stderr


def test_a_binary_file_is_one_error_line(tmp_path: Path):
    corpus = corpus_with(tmp_path / "corpus")
    (corpus / "blob.txt").write_bytes(bytes(range(256)) * 64)
    done = index(corpus, tmp_path / "kb")
    assert done.returncode == 2, done.stderr
    [error] = errors(done)
    assert f"{corpus / 'blob.txt'}:2: not UTF-8 text (invalid byte 0x80" in error


def test_a_single_line_of_megabytes_is_indexed(tmp_path: Path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    line = " ".join(WORDS[i % len(WORDS)] for i in range(1_000_000))  # about 6 MB, no newline
    (corpus / "line.txt").write_text(line, encoding="utf-8")
    done = index(corpus, tmp_path / "kb", "--json")
    assert done.returncode == 0, done.stderr
    kb = KnowledgeBase.load(tmp_path / "kb")
    # 200-word windows stepping by 160 words: every word is in a chunk
    assert len(kb) == 1_000_000 // 160 and max(c.n_words for c in kb.chunks) == 200


def wait_until(ready: Callable[[], bool], process: subprocess.Popen[str], what: str) -> None:
    """Poll until ``ready()``; fail if the child ends first, or after a generous time."""
    deadline = time.monotonic() + GENEROUS_S
    while not ready():
        assert process.poll() is None, finish(process)[2]
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.05)


def long_corpus(folder: Path) -> Path:
    """A corpus whose embedding takes a while: 2,000 chunks of different sentences."""
    folder.mkdir()
    sentences = (f"Fact {n} is that {WORDS[n % 13]} meets {WORDS[n % 7]}." for n in range(40_000))
    (folder / "facts.txt").write_text(" ".join(sentences), encoding="utf-8")
    return folder


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_an_index_stopped_while_embedding_leaves_no_staging_folder(tmp_path: Path, signum: int):
    corpus, out = long_corpus(tmp_path / "corpus"), tmp_path / "kb"
    process = start("index", corpus, "--out", out, OMP_NUM_THREADS="1")
    wait_until((out / STAGING).exists, process, "embedding")  # its staging folder is made
    process.send_signal(signum)
    code, _, err = finish(process, timeout=GENEROUS_S)
    assert (code, err.strip()) == (130, "interrupted")
    assert not out.exists()  # it made the folder, and nothing in it was worth keeping


def test_an_index_stopped_after_a_staged_block_keeps_it_and_says_so(tmp_path: Path):
    corpus, out = long_corpus(tmp_path / "corpus"), tmp_path / "kb"
    process = start("index", corpus, "--out", out, OMP_NUM_THREADS="1", RAGBOUND_STAGE_BLOCK="8")
    first = out / STAGING
    wait_until(lambda: any(first.glob("*/block-000001.npy")), process, "a staged block")
    process.send_signal(signal.SIGINT)
    code, _, err = finish(process, timeout=GENEROUS_S)
    assert code == 130 and err.splitlines()[-1] == "interrupted"
    kept = len(list((out / STAGING).glob("*/block-*.npy")))
    assert kept >= 1 and f"keeps {kept} embedded block(s)" in " ".join(err.split())
