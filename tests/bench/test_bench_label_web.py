"""The labelling web page: its HTTP API over urllib, and the page itself in headless Chromium."""

from __future__ import annotations

import importlib.util
import json
import shutil
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragbound.bench import RunDir
from ragbound.bench.label_web import LabelServer, serve_labeller
from ragbound.errors import InputError
from tests.bench.label_runs import ABSTAINING, write_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[RunDir, LabelServer]]:
    run = write_run(tmp_path / "run", {("m1", "rag", "basic"): 3, ("m2", "hyde", "basic"): 2})
    server = serve_labeller(run.root, port=0, n=4)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield run, server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def call(
    server: LabelServer,
    path: str,
    body: object | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, Any]:
    """(status, decoded JSON or text, headers) of one request to the server."""
    data = None if body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json"} if data is not None else {}
    request = urllib.request.Request(
        server.url.rstrip("/") + path, data, {**sent, **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, raw, head = response.status, response.read(), response.headers
    except urllib.error.HTTPError as exc:
        status, raw, head = exc.code, exc.read(), exc.headers
    text = raw.decode()
    return status, json.loads(text) if head.get_content_type() == "application/json" else text, head


def test_the_api_serves_items_and_writes_labels(served: tuple[RunDir, LabelServer]) -> None:
    run, server = served
    assert server.url.startswith("http://127.0.0.1:")
    status, page, head = call(server, "/")
    assert (
        status == 200
        and "<script>" in page
        and "connect-src 'self'" in head["Content-Security-Policy"]
    )
    assert "http://" not in page and "https://" not in page  # nothing fetched from elsewhere

    status, first, _ = call(server, "/api/next?annotator=ann")
    assert status == 200 and (first["finished"], first["total"]) == (0, 4)
    assert first["open"] == ["abstention", "factuality"]
    assert first["tasks"][1]["skip_if"] == {"task": "abstention", "value": "yes"}
    item = first["item"]
    assert {"question", "expected_answer", "answer", "context", "n_context"} <= item.keys()
    assert item["context"][0].startswith("[2] Passports")  # the most similar piece first

    labels = {"abstention": "No", "factuality": "tier_2"}
    status, saved, _ = call(
        server, "/api/label", {"annotator": "ann", "input_id": item["input_id"], "labels": labels}
    )
    assert status == 200 and saved == {"saved": 2}
    assert [(x.task, x.value) for x in run.labels("ann").read()] == [
        ("abstention", "no"),
        ("factuality", "tier_2"),
    ]
    status, after, _ = call(server, "/api/next?annotator=ann")
    assert after["finished"] == 1 and after["item"]["input_id"] != item["input_id"]

    # half-labelled in a previous session: only what is missing is open
    status, _, _ = call(
        server,
        "/api/label",
        {"annotator": "bob", "input_id": item["input_id"], "labels": {"abstention": "no"}},
    )
    status, bob, _ = call(server, "/api/next?annotator=bob")
    assert bob["item"]["input_id"] == item["input_id"] and bob["open"] == ["factuality"]
    assert bob["given"] == {"abstention": "no"}
    # an abstention needs no factuality: the item is finished
    call(
        server,
        "/api/label",
        {"annotator": "bob", "input_id": item["input_id"], "labels": {"abstention": "yes"}},
    )
    status, bob, _ = call(server, "/api/next?annotator=bob")
    assert bob["finished"] == 1 and bob["item"]["input_id"] != item["input_id"]


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "message"),
    [
        (
            "/api/label",
            {"annotator": "ann", "input_id": "nope", "labels": {"abstention": "yes"}},
            None,
            400,
            "not in the label sample",
        ),
        (
            "/api/label",
            {"annotator": "ann", "input_id": "FIRST", "labels": {"abstention": "perhaps"}},
            None,
            400,
            "not one of",
        ),
        (
            "/api/label",
            {"annotator": "", "input_id": "FIRST", "labels": {"abstention": "yes"}},
            None,
            400,
            "annotator name",
        ),
        ("/api/label", {"annotator": "ann"}, None, 400, "expected"),
        (
            "/api/label",
            {"annotator": "ann"},
            {"Content-Type": "text/plain"},
            415,
            "application/json",
        ),
        ("/api/label", {"annotator": "ann"}, {"Host": "evil.example:80"}, 403, "127.0.0.1"),
        ("/api/next?annotator=", None, None, 400, "annotator name"),
        ("/nope", None, None, 404, "no such page"),
    ],
)
def test_the_api_refuses_bad_requests(
    served: tuple[RunDir, LabelServer],
    path: str,
    body: dict[str, Any] | None,
    headers: dict[str, str] | None,
    status: int,
    message: str,
) -> None:
    run, server = served
    first = server.session.items[0].input_id
    if body is not None and body.get("input_id") == "FIRST":
        body = {**body, "input_id": first}
    got, answer, _ = call(server, path, body, headers)
    assert got == status and message in answer["error"]
    assert run.labels("ann").read() == []


def test_a_busy_port_is_a_clear_error(served: tuple[RunDir, LabelServer]) -> None:
    run, server = served
    with pytest.raises(InputError, match="cannot listen"):
        serve_labeller(run.root, port=server.server_address[1])


@pytest.mark.skipif(
    CHROMIUM is None or importlib.util.find_spec("playwright") is None,
    reason="needs Debian's chromium (apt install chromium) and the playwright package",
)
def test_the_page_labels_two_items_in_headless_chromium(served: tuple[RunDir, LabelServer]) -> None:
    from playwright.sync_api import sync_playwright

    run, server = served
    errors: list[str] = []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=BROWSER_FLAGS)
        page = browser.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(server.url)  # the name is typed in, not passed in the address
        page.fill("#annotator", "web ann")
        page.click("#start")
        page.wait_for_selector("#progress:has-text('0 of 4 finished')")
        expected = []
        for finished in (1, 2):
            abstained = page.text_content("#answer") == ABSTAINING
            assert page.is_disabled("#save")  # nothing chosen yet
            page.click(f"button[data-task=abstention][data-value={'yes' if abstained else 'no'}]")
            if abstained:  # no factuality for an abstention
                assert page.locator("button[data-task=factuality]").count() == 0
            else:
                page.click("button[data-task=factuality][data-value=tier_1]")
            page.click("#save")
            page.wait_for_selector(f"#progress:has-text('{finished} of 4 finished')")
            expected.append(("yes", None) if abstained else ("no", "tier_1"))
        assert "web%20ann" in page.url
        browser.close()
    assert errors == []
    labels = run.labels("web ann").read()
    assert [x.annotator for x in labels] == ["web ann"] * len(labels)
    by_item: dict[str, dict[str, str]] = {}
    for label in labels:
        by_item.setdefault(label.input_id, {})[label.task] = label.value
    assert len(by_item) == 2
    assert sorted((v["abstention"], v.get("factuality")) for v in by_item.values()) == sorted(
        expected
    )
