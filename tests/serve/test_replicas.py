"""Several ``ragbound serve`` replicas over one knowledge (docs/deploy.md): a tripwire added
through one replica reaches another on its own attach folder over the same Chroma collection
(a real ``chroma run``); two replicas behind Debian's nginx on loopback lose one to SIGKILL
under load and no client request fails."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from ragbound.faults import CRASH_ENV
from ragbound.knowledge import KnowledgeBase
from tests.serve.server import ChildServer, free_port, log_lines, prepare_served, served_kb
from tests.support.chroma_server import ChromaServer, fill_collection
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE
from tests.tripwires.tripwire_texts import TRIPWIRES, UNSAFE

DEADLINE_S = 60.0  # a hang guard, not a timing assertion
CLIENTS = 4


def _action(url: str, query: str) -> str:
    response = httpx.post(f"{url}/v1/decide", json={"query": query}, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()["action"]


# ------------------------------------------------------------- tripwires, two hosts
def test_a_tripwire_added_through_one_replica_reaches_the_other(
    chroma: ChromaServer, minilm_kb_dir: Path, tmp_path: Path
) -> None:
    """Two attach folders (two hosts) over one collection: B's folder never changes, B sees
    the records A wrote into the collection (the watcher's poll of the collection)."""
    local = KnowledgeBase.load(minilm_kb_dir)
    name = f"replicas_{secrets.token_hex(3)}"
    fill_collection(
        chroma,
        name,
        [c.text for c in local.chunks],
        local.vectors,
        ids=[c.doc_id for c in local.chunks],
    )
    KnowledgeBase.attach(chroma.url(name), tmp_path / "a")
    prepare_served(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # the same folder deployed on host B
    a = ChildServer(str(tmp_path / "a"))
    b = ChildServer(str(tmp_path / "b"))
    try:
        a.ready(), b.ready()
        query = UNSAFE[1]
        assert _action(b.url, query) != "reject"
        added = httpx.post(f"{a.url}/v1/tripwires", json={"tripwires": TRIPWIRES}, timeout=60)
        assert added.status_code == 200, added.text
        assert _action(a.url, query) == "reject"  # A swapped its gate in the change itself
        deadline = time.monotonic() + DEADLINE_S
        while _action(b.url, query) != "reject":
            assert time.monotonic() < deadline, "replica B never loaded A's tripwire"
            time.sleep(0.2)
        listed = httpx.get(f"{b.url}/v1/tripwires", timeout=30).json()
        assert listed["set_hash"] == added.json()["tripwire_set"]
        assert not (tmp_path / "b" / "tripwires.json").exists()  # B's folder was not touched
        removed = httpx.request(
            "DELETE", f"{a.url}/v1/tripwires", json={"topics": ["sabotage"]}, timeout=60
        )
        assert removed.status_code == 200, removed.text
        while _action(b.url, query) == "reject":
            assert time.monotonic() < deadline, "replica B never dropped the removed tripwire"
            time.sleep(0.2)
    finally:
        a.kill(), b.kill()


# ------------------------------------------------------------ nginx, one replica killed
NGINX_TEMP = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
# Debian puts nginx in /usr/sbin, often not on a non-root user's PATH
NGINX = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")


def nginx_conf(root: Path, port: int, upstreams: list[int]) -> str:
    """The configuration docs/deploy.md shows, every path under ``root`` (runs as non-root)."""
    built = subprocess.run([NGINX, "-V"], capture_output=True, text=True).stderr if NGINX else ""
    temps = "".join(
        f"    {kind}_temp_path {root / kind};\n"
        for kind in NGINX_TEMP
        if kind == "client_body" or f"--without-http_{kind}_module" not in built
    )
    servers = "".join(
        f"        server 127.0.0.1:{p} max_fails=1 fail_timeout=5s;\n" for p in upstreams
    )
    user = "user root;\n" if os.geteuid() == 0 else ""  # else workers run as nobody
    return f"""{user}daemon off;
master_process on;
worker_processes 1;
pid {root / "nginx.pid"};
error_log {root / "error.log"} warn;
events {{ worker_connections 256; }}
http {{
    log_format upstreams '$status $request_time "$upstream_addr" "$upstream_status"';
    access_log {root / "access.log"} upstreams;
{temps}    upstream ragbound {{
{servers}    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://ragbound;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_connect_timeout 1s;
            proxy_read_timeout 60s;
            # POST /v1/decide only decides (the tripwire routes change state): retrying it on
            # the other replica is safe, and nginx retries a POST only with non_idempotent
            proxy_next_upstream error timeout http_502 http_503 non_idempotent;
            proxy_next_upstream_tries 2;
        }}
    }}
}}
"""


@pytest.fixture
def nginx(tmp_path: Path):
    if NGINX is None:
        pytest.skip("nginx is not installed (Debian: apt-get install nginx-light)")
    started: list[subprocess.Popen] = []

    def start(upstreams: list[int]) -> str:
        root = tmp_path / "nginx"
        root.mkdir()
        port = free_port()
        (root / "nginx.conf").write_text(nginx_conf(root, port, upstreams), encoding="utf-8")
        argv = [NGINX, "-p", str(root), "-e", str(root / "error.log"), "-c", "nginx.conf"]
        started.append(subprocess.Popen(argv, stderr=subprocess.PIPE))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + DEADLINE_S
        while True:
            assert started[-1].poll() is None, started[-1].stderr.read().decode()  # type: ignore[union-attr]
            try:
                httpx.get(f"{url}/healthz", timeout=2)
                return url
            except httpx.TransportError:
                assert time.monotonic() < deadline, "nginx did not start"
                time.sleep(0.1)

    yield start
    for process in started:
        process.send_signal(signal.SIGQUIT)  # graceful: the master stops its workers
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def test_two_replicas_behind_nginx_lose_one_under_load(
    nginx, minilm_kb_dir: Path, tmp_path: Path
) -> None:
    """Both replicas serve one folder knowledge base (the simplest shared knowledge), each
    with its own --log. Every request sent through nginx is answered 200 though replica A
    is SIGKILLed mid-load; the two logs hold every answered query at least once (a query
    A logged and died before answering is logged again by B: at least once, not exactly)."""
    kb_dir = served_kb(minilm_kb_dir, tmp_path / "kb")
    logs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    replicas = [ChildServer(str(kb_dir), "--log", str(log)) for log in logs]
    try:
        for replica in replicas:
            replica.ready()
        url = nginx([r.port for r in replicas])
        answered: list[str] = []
        failed: list[str] = []
        stop = threading.Event()
        lock = threading.Lock()
        bases = [*IN_KNOWLEDGE, *OUT_OF_KNOWLEDGE]

        def client(n: int) -> None:
            with httpx.Client(timeout=60) as session:
                i = 0
                while not stop.is_set():
                    query = f"{bases[(n + i) % len(bases)]} (client {n}, request {i})"
                    i += 1
                    try:
                        response = session.post(f"{url}/v1/decide", json={"query": query})
                        ok = response.status_code == 200
                    except httpx.HTTPError as exc:
                        ok, response = False, exc  # type: ignore[assignment]
                    with lock:
                        (answered if ok else failed).append(query if ok else f"{query}: {response}")

        threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + DEADLINE_S
        while len(answered) < 40 and not failed:
            assert time.monotonic() < deadline, "no load went through nginx"
            time.sleep(0.05)
        replicas[0].kill()  # SIGKILL mid-load
        killed_at = len(answered)
        while len(answered) < killed_at + 40 and not failed:
            assert time.monotonic() < deadline + DEADLINE_S, "the survivor did not take over"
            time.sleep(0.05)
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
        assert not failed, failed[:5]
        logged = Counter(line["query"] for log in logs for line in log_lines(log))
        assert set(logged) == set(answered)  # every answered query, at least once
        twice = {q: n for q, n in logged.items() if n > 1}
        assert set(twice.values()) <= {2}  # a retry runs once more, on the other replica
        assert replicas[1].process.poll() is None
        retried = _retried(tmp_path / "nginx" / "access.log")
        print(f"answered {len(answered)}, retried by nginx {retried}, logged twice {len(twice)}")
    finally:
        for replica in replicas:
            replica.kill()


def _retried(access_log: Path) -> int:
    """Requests nginx sent to a second replica (two upstream addresses in its access log)."""
    return sum(", " in line for line in access_log.read_text(encoding="utf-8").splitlines())


def test_a_query_logged_by_a_replica_that_died_before_answering_is_logged_twice(
    nginx, minilm_kb_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replica A dies (SIGKILL, by fault injection) after its log holds a decision and before
    the answer leaves: nginx retries the POST on B, which decides and logs it again. The
    client gets one answer; the logs hold that query twice: at least once, not exactly."""
    kb_dir = served_kb(minilm_kb_dir, tmp_path / "kb")
    logs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    monkeypatch.setenv(CRASH_ENV, "serve.decide:logged")
    a = ChildServer(str(kb_dir), "--log", str(logs[0]))
    monkeypatch.delenv(CRASH_ENV)
    b = ChildServer(str(kb_dir), "--log", str(logs[1]))
    try:
        a.ready(), b.ready()
        url = nginx([a.port, b.port])
        asked = [f"{query} (request {i})" for i, query in enumerate(IN_KNOWLEDGE)]
        for query in asked:  # round robin: A gets one of the first two and dies on it
            response = httpx.post(f"{url}/v1/decide", json={"query": query}, timeout=60)
            assert response.status_code == 200, response.text
        assert a.process.wait(timeout=30) == -signal.SIGKILL
        in_a = [line["query"] for line in log_lines(logs[0])]
        in_b = Counter(line["query"] for line in log_lines(logs[1]))
        assert len(in_a) == 1 and in_b[in_a[0]] == 1  # the one A logged, logged again by B
        assert set(in_b) == set(asked) and set(in_b.values()) == {1}
        assert _retried(tmp_path / "nginx" / "access.log") == 1
    finally:
        a.kill(), b.kill()
