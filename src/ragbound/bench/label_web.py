"""The labelling page: a small local web server (stdlib ``http.server``) on 127.0.0.1.

One self-contained HTML page (inline CSS and JavaScript, nothing fetched from elsewhere) and a
JSON API, both on the same origin:

- ``GET /`` the page (``/?annotator=NAME`` fills in the name);
- ``GET /api/next?annotator=NAME`` the next item NAME has not finished, the tasks still open
  for it and the annotator's progress (``item`` is null when every item is done);
- ``POST /api/label`` with ``{"annotator", "input_id", "labels": {task: outcome}, "note"}``
  appends the labels through the same log as the terminal labeller.

Only same-origin JSON posts are accepted (a cross-site form cannot send ``application/json``
without a preflight this server never grants), and requests naming another host are refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ragbound.bench.evaluate import DEFAULT_SPECS
from ragbound.bench.labels import LabelSession
from ragbound.bench.models import EvaluationSpec
from ragbound.errors import InputError

MAX_BODY = 64 * 1024  # bytes of a POST body
LOOPBACK = ("127.0.0.1", "localhost", "::1")
CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'"
)


def next_payload(session: LabelSession, annotator: str) -> dict[str, Any]:
    """What ``GET /api/next`` answers: progress, tasks, the next item and its open tasks."""
    given = session.given(annotator)
    pending = session.pending(annotator)
    item = pending[0] if pending else None
    labels = given.get(item.input_id, {}) if item else {}
    return {
        "annotator": annotator.strip(),
        "total": len(session.items),
        "finished": len(session.items) - len(pending),
        "tasks": [task.model_dump() for task in session.task_views()],
        "item": item.model_dump() if item else None,
        "open": [spec.name for spec in session.open_tasks(labels)] if item else [],
        "given": labels,
    }


class LabelServer(ThreadingHTTPServer):
    """The labelling server; ``serve_forever()`` runs it, ``shutdown()`` stops it."""

    daemon_threads = True

    def __init__(self, session: LabelSession, host: str = "127.0.0.1", port: int = 0) -> None:
        self.session = session
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        """The page's address, e.g. ``http://127.0.0.1:8765/``."""
        host, port = self.server_address[0], self.server_address[1]
        host = f"[{host}]" if ":" in str(host) else host
        return f"http://{host}:{port}/"

    def host_allowed(self, header: str | None) -> bool:
        """Loopback servers answer only requests addressed to a loopback name (no rebinding)."""
        host, port = str(self.server_address[0]), self.server_address[1]
        if host not in LOOPBACK:
            return True
        names = {f"{name}:{port}" for name in ("127.0.0.1", "localhost", "[::1]")}
        return header in names


class _Handler(BaseHTTPRequestHandler):
    server: LabelServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the terminal shows the labeller's own messages only."""

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        if content_type.startswith("text/html"):
            self.send_header("Content-Security-Policy", CSP)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, data: object) -> None:
        self._send(status, json.dumps(data).encode(), "application/json")

    def _error(self, status: HTTPStatus, message: str) -> None:
        self._json(status, {"error": message})

    def _checked(self) -> bool:
        if self.server.host_allowed(self.headers.get("Host")):
            return True
        self._error(HTTPStatus.FORBIDDEN, "requests must address the server as 127.0.0.1")
        return False

    def do_GET(self) -> None:
        if not self._checked():
            return
        url = urlsplit(self.path)
        if url.path in ("/", "/index.html"):
            self._send(HTTPStatus.OK, PAGE.encode(), "text/html; charset=utf-8")
        elif url.path == "/favicon.ico":
            self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
        elif url.path == "/api/next":
            annotator = parse_qs(url.query).get("annotator", [""])[0]
            self._answer(lambda: next_payload(self.server.session, annotator))
        else:
            self._error(HTTPStatus.NOT_FOUND, f"no such page: {url.path}")

    def do_POST(self) -> None:
        if not self._checked():
            return
        if urlsplit(self.path).path != "/api/label":
            self._error(HTTPStatus.NOT_FOUND, f"no such endpoint: {self.path}")
            return
        if self.headers.get_content_type() != "application/json":
            self._error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "send the labels as application/json")
            return
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_BODY:
            self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body must be 1 to {MAX_BODY} bytes")
            return
        body = self.rfile.read(length)
        self._answer(lambda: {"saved": len(self._record(body))})

    def _record(self, body: bytes) -> list[Any]:
        try:
            data = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"the body is not JSON: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("labels"), dict):
            raise InputError('expected {"annotator", "input_id", "labels": {task: outcome}}')
        return self.server.session.record(
            str(data.get("annotator", "")),
            str(data.get("input_id", "")),
            data["labels"],
            note=str(data.get("note", "")),
        )

    def _answer(self, make: Any) -> None:
        try:
            payload = make()
        except InputError as exc:
            self._error(HTTPStatus.BAD_REQUEST, str(exc))
        except Exception as exc:  # the page shows it; the server keeps serving
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")
        else:
            self._json(HTTPStatus.OK, payload)


def serve_labeller(
    run_dir: str | Path,
    port: int = 0,
    *,
    host: str = "127.0.0.1",
    tasks: Sequence[str | EvaluationSpec] = DEFAULT_SPECS,
    n: int = 200,
    seed: int = 0,
) -> LabelServer:
    """A labelling server for the run's sample, bound (not yet serving) on ``host:port``.

    ``port`` 0 picks a free port (see ``server.url``). Run ``server.serve_forever()``
    (in a thread, or until Ctrl-C) and stop with ``server.shutdown(); server.server_close()``.
    """
    session = LabelSession(run_dir, tasks, n=n, seed=seed)
    try:
        return LabelServer(session, host, port)
    except OSError as exc:
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>ragbound: label model answers</title>
<style>
  :root { font-family: system-ui, sans-serif; color: #1d232a; background: #f6f7f9; }
  body { margin: 0 auto; max-width: 60rem; padding: 1rem 1.5rem 4rem; }
  header { display: flex; flex-wrap: wrap; gap: 1rem; align-items: center;
           justify-content: space-between; }
  h1 { font-size: 1.3rem; margin: 0.5rem 0; }
  h2 { font-size: 0.8rem; text-transform: uppercase; letter-spacing: 0.05em; color: #5b6570;
       margin: 1.2rem 0 0.3rem; }
  section { background: #fff; border: 1px solid #d8dde3; border-radius: 8px; padding: 1rem 1.5rem; }
  .text { white-space: pre-wrap; margin: 0; line-height: 1.45; }
  #answer { background: #fffbe8; padding: 0.6rem; border-radius: 6px; }
  #context { font-size: 0.85rem; color: #4a535c; list-style: none; padding-left: 1rem; }
  .meta { font-size: 0.85rem; color: #5b6570; margin: 0; }
  fieldset { border: 1px solid #d8dde3; border-radius: 6px; margin: 1rem 0 0; }
  legend { font-weight: 600; padding: 0 0.3rem; }
  button { font: inherit; padding: 0.45rem 0.9rem; margin: 0.25rem; border-radius: 6px;
           border: 1px solid #8b96a1; background: #fff; cursor: pointer; }
  button.choice[aria-pressed="true"] { background: #1f6feb; border-color: #1f6feb; color: #fff; }
  #save { background: #1a7f37; border-color: #1a7f37; color: #fff; margin-top: 1rem; }
  #save:disabled { background: #b7c2cc; border-color: #b7c2cc; cursor: default; }
  #status { color: #b42318; min-height: 1.2em; }
  .hint { font-size: 0.8rem; color: #5b6570; }
</style>
</head>
<body>
<header>
  <h1>Label model answers</h1>
  <form id="who">
    <label>Annotator <input id="annotator" required maxlength="100" autocomplete="off"></label>
    <button id="start" type="submit">Start</button>
  </form>
  <span id="progress" aria-live="polite"></span>
</header>
<p id="status" role="status"></p>
<section id="card" hidden>
  <p class="meta" id="meta"></p>
  <h2>Question</h2>
  <p class="text" id="question"></p>
  <h2>Expected answer</h2>
  <p class="text" id="expected"></p>
  <h2>Context</h2>
  <details><summary id="context-summary"></summary><ul id="context"></ul></details>
  <h2>Model answer</h2>
  <p class="text" id="answer"></p>
  <div id="tasks"></div>
  <button id="save" type="button" disabled>Save and next</button>
  <p class="hint">Keys: a number picks an outcome of the first open task; Enter saves.</p>
</section>
<section id="done" hidden><p>Every item of the sample is labelled. Thank you.</p></section>
<script>
"use strict";
const state = { annotator: "", item: null, tasks: [], open: [], chosen: {}, busy: false };
const $ = (id) => document.getElementById(id);

function setStatus(message) { $("status").textContent = message; }

function visibleTasks() {
  return state.tasks.filter((task) => state.open.includes(task.name) &&
    !(task.skip_if && state.chosen[task.skip_if.task] === task.skip_if.value));
}

async function api(path, options) {
  const response = await fetch(path, options);
  const body = await response.json();
  if (!response.ok) { throw new Error(body.error || response.statusText); }
  return body;
}

async function loadNext() {
  const data = await api("/api/next?annotator=" + encodeURIComponent(state.annotator));
  state.tasks = data.tasks;
  state.item = data.item;
  state.open = data.open;
  state.chosen = {};
  $("progress").textContent = data.finished + " of " + data.total + " finished";
  $("card").hidden = data.item === null;
  $("done").hidden = data.item !== null;
  if (data.item !== null) { render(); }
}

function render() {
  const item = state.item;
  $("meta").textContent = "item " + item.position + " · " + item.model + " · " +
    item.strategy + " · " + item.system_prompt;
  $("question").textContent = item.question;
  $("expected").textContent = item.expected_answer === null ? "(none)" : item.expected_answer;
  $("answer").textContent = item.answer;
  $("context-summary").textContent = item.context.length + " of " + item.n_context +
    " pieces (trimmed)";
  const list = $("context");
  list.replaceChildren();
  for (const piece of item.context) {
    const entry = document.createElement("li");
    entry.textContent = piece;
    list.append(entry);
  }
  renderTasks();
}

function renderTasks() {
  const box = $("tasks");
  box.replaceChildren();
  for (const task of visibleTasks()) {
    const group = document.createElement("fieldset");
    const legend = document.createElement("legend");
    legend.textContent = task.name;
    group.append(legend);
    task.outcomes.forEach((outcome, index) => {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "choice";
      button.dataset.task = task.name;
      button.dataset.value = outcome;
      button.textContent = (index + 1) + " · " + outcome;
      button.setAttribute("aria-pressed", String(state.chosen[task.name] === outcome));
      button.addEventListener("click", () => choose(task.name, outcome));
      group.append(button);
    });
    box.append(group);
  }
  $("save").disabled = state.busy || !visibleTasks().every((task) => task.name in state.chosen);
}

function choose(task, value) {
  state.chosen[task] = value;
  const shown = visibleTasks().map((t) => t.name);
  for (const name of Object.keys(state.chosen)) {
    if (!shown.includes(name)) { delete state.chosen[name]; }  // made moot by this choice
  }
  renderTasks();
}

async function save() {
  if (state.busy || $("save").disabled) { return; }
  const labels = {};
  for (const task of visibleTasks()) { labels[task.name] = state.chosen[task.name]; }
  state.busy = true;
  renderTasks();
  try {
    await api("/api/label", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ annotator: state.annotator, input_id: state.item.input_id, labels }),
    });
    setStatus("");
    state.busy = false;
    await loadNext();
  } catch (error) {
    state.busy = false;
    setStatus(error.message);
    renderTasks();
  }
}

function start(name) {
  state.annotator = name.trim();
  if (!state.annotator) { return; }
  history.replaceState(null, "", "?annotator=" + encodeURIComponent(state.annotator));
  loadNext().catch((error) => setStatus(error.message));
}

$("save").addEventListener("click", save);
$("who").addEventListener("submit", (event) => {
  event.preventDefault();
  start($("annotator").value);
});
document.addEventListener("keydown", (event) => {
  if (state.item === null || event.target.tagName === "INPUT") { return; }
  if (event.key === "Enter") { event.preventDefault(); save(); return; }
  const task = visibleTasks().find((t) => !(t.name in state.chosen));
  const number = Number.parseInt(event.key, 10);
  if (task && number >= 1 && number <= task.outcomes.length) {
    choose(task.name, task.outcomes[number - 1]);
  }
});
const named = new URLSearchParams(location.search).get("annotator");
if (named) { $("annotator").value = named; start(named); }
</script>
</body>
</html>
"""
