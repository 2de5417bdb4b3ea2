"""Real ragbound services on loopback for the tests: in a thread, or a child process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn

from ragbound.demo import sample_corpus
from ragbound.detect import Guard
from ragbound.knowledge import KnowledgeBase
from ragbound.tripwires import LiveTripwires, Tripwire, TripwireRule, save_rule, tripwire_id
from tests.support.instant_upstream import ScriptedUpstream
from tests.support.ports import free_port
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE
from tests.tripwires.tripwire_texts import TRIPWIRES

READ = "read-token-0123456789abcdef"
ADMIN = "admin-token-0123456789abcdef"
RULE = TripwireRule(k=3, proportion=None, rank=1)
SRC = Path(__file__).resolve().parents[2] / "src"
SERVED = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE  # the calibration queries of a served KB


def served_kb(minilm_kb_dir: Path, target: Path, calibration: list[str] = SERVED) -> Path:
    """The bees-and-trains knowledge base, calibrated on 28 queries (enough for the monitor),
    with a saved tripwire rule (rank 1 in the top 3) and no tripwires yet."""
    shutil.copytree(minilm_kb_dir, target)
    return prepare_served(target, calibration)


def prepare_served(kb_dir: Path, calibration: list[str] = SERVED) -> Path:
    """Calibrate the bees-and-trains knowledge base at ``kb_dir`` (local or attached) on
    ``calibration`` and save the tripwire rule, as :func:`served_kb` serves it."""
    kb = KnowledgeBase.load(kb_dir)
    Guard.calibrate(kb, calibration, k=4, alpha=0.1).save()
    save_rule(kb_dir, RULE)
    return kb_dir


# the bundled sample corpus calibrated with the answerability test: a question in scope whose
# answer its documents do not hold, one they answer, and one off the corpus
UNANSWERABLE = "Which university did the inventor of BM25 attend?"
ANSWERABLE = "How does BM25 score a chunk?"
OFF_CORPUS = "Who won the FIFA World Cup in 2014?"
CAUSE_OF_QUESTION = {
    UNANSWERABLE: "unanswerable",
    ANSWERABLE: "in_knowledge",
    OFF_CORPUS: "out_of_knowledge",
}


def answerability_kb(target: Path) -> Path:
    """The bundled sample corpus (MiniLM) calibrated on its in-knowledge questions with the
    answerability test, as ``ragbound index DOCS`` then ``ragbound calibrate KB --queries
    in_knowledge.txt --answerability coverage`` make it."""
    KnowledgeBase.build([sample_corpus() / "docs"], embedder="minilm").save(target)
    text = (sample_corpus() / "in_knowledge.txt").read_text(encoding="utf-8")
    questions = [line for line in text.splitlines() if line.strip()]
    Guard.calibrate(KnowledgeBase.load(target), questions, answerability="coverage").save()
    return target


def add_tripwires(kb_dir: Path) -> Path:
    """Add the bees-and-trains tripwires to the knowledge base at ``kb_dir``."""
    tripwires = [Tripwire(id=tripwire_id(t["topic"], t["text"]), **t) for t in TRIPWIRES]
    LiveTripwires.open(KnowledgeBase.load(kb_dir)).add(tripwires)
    return kb_dir


def guarded_kb(minilm_kb_dir: Path, target: Path, calibration: list[str] = SERVED) -> Path:
    """The served knowledge base with the bees-and-trains tripwires."""
    return add_tripwires(served_kb(minilm_kb_dir, target, calibration))


def token_file(folder: Path) -> Path:
    path = folder / "tokens.txt"
    path.write_text(f"# tokens\nread:{READ}\nadmin:{ADMIN}\n", encoding="utf-8")
    return path


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def stats(url: str) -> dict:
    """The service's ``GET /v1/stats`` (the dashboard's JSON), read with the read token."""
    response = httpx.get(f"{url}/v1/stats", headers=auth(READ))
    assert response.status_code == 200, response.text
    return response.json()


def check_all(url: str, queries: list[str]) -> list[dict]:
    """The service's decisions on ``queries`` (one ``POST /v1/decide/batch``, read token)."""
    response = httpx.post(
        f"{url}/v1/decide/batch", json={"queries": queries}, headers=auth(READ), timeout=60
    )
    assert response.status_code == 200, response.text
    return response.json()["results"]


def ask(query: str, system: str | None = None) -> list[dict[str, str]]:
    """The chat messages asking ``query`` (after ``system``, when given)."""
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": query}]


def wait_ready(url: str, timeout: float = 90.0, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} not ready after {timeout} s")


class ThreadServer:
    """uvicorn.Server for ``app`` in a thread of the test process, on a free loopback port."""

    def __init__(self, app) -> None:
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@contextmanager
def scripted_upstream() -> Iterator[ScriptedUpstream]:
    """The scripted chat server (a TEST DOUBLE, fixed replies) on loopback; ``url`` set."""
    double = ScriptedUpstream()
    with ThreadServer(double.app) as url:
        double.url = url  # type: ignore[attr-defined]
        yield double


def serve_argv(*args: str) -> list[str]:
    """The ``ragbound serve`` command line of this checkout's source."""
    return [sys.executable, "-m", "ragbound.cli", "serve", *args]


def child_env() -> dict[str, str]:
    """The environment of a child that imports this checkout's source first."""
    return {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def serve_refused(*args: str) -> subprocess.CompletedProcess[str]:
    """Run a ``ragbound serve`` expected to refuse at start (the timeout only stops a hang)."""
    return subprocess.run(
        serve_argv(*args), env=child_env(), capture_output=True, text=True, timeout=300
    )


class ChildServer:
    """``ragbound serve`` in a child process (killed with SIGKILL by ``kill()``)."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        """``env``: variables added to the child's environment."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            serve_argv(*args, "--port", str(self.port)),
            env={**child_env(), **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # a background shell starts jobs with SIGINT ignored; stop() relies on it
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )

    def ready(self) -> ChildServer:
        try:
            wait_ready(self.url, process=self.process)
        except Exception:
            self.kill()
            raise RuntimeError(self.stderr()) from None
        return self

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=30)

    def stderr(self) -> str:
        assert self.process.stderr is not None
        return self.process.stderr.read().decode(errors="replace")

    def drain_stderr(self) -> list[str]:
        """Read the child's stderr on a thread from now on: the list its lines join as they
        come (for a test that reads them while the child runs; ``stderr()`` reads no more)."""
        assert self.process.stderr is not None
        lines: list[str] = []

        def read(stream=self.process.stderr) -> None:
            for raw in stream:
                lines.append(raw.decode(errors="replace"))

        threading.Thread(target=read, daemon=True).start()
        return lines


def one_rank(gate) -> float:
    """A p-value's step, 1 / (n + 1) for ``n`` calibration scores (plus a float's slack)."""
    return 1 / (len(gate.guard.detector().decision_scores_) + 1) + 1e-9


def assert_served_as(bodies: list[dict], decisions: list, gate) -> None:
    """The service's answers ``bodies`` are the in-process ``decisions`` of the same queries.

    Batched with whatever else arrived, an embedding moves in its last float bits, so a score
    tying a calibration score may move its p-value by one rank: the p-values must agree within
    one rank, and the actions must agree unless the expected p-value lies within one rank of
    alpha, where answer and abstain are both right (a reject must still be a reject).
    """
    step = one_rank(gate)
    for body, decision in zip(bodies, decisions, strict=True):
        test = decision.test
        assert body["test"]["p_value"] == pytest.approx(test.p_value, abs=step), body["query"]
        on_the_edge = abs(test.p_value - test.alpha) <= step and decision.action != "reject"
        if on_the_edge:
            assert body["action"] in {"answer", "abstain"}, body["query"]
        else:
            assert body["action"] == decision.action, body["query"]


def log_lines(path: Path) -> list[dict]:
    """Every line of a query log, each whole (json.loads fails on a torn one)."""
    raw = path.read_bytes()
    assert not raw or raw.endswith(b"\n"), "the log ends mid-line"
    return [json.loads(line) for line in raw.splitlines()]
