"""The service searches the calibration's canaries: at start (a moved canary is not ready),
then every --canary-minutes, in /readyz and /metrics."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from ragbound.gate import Gate
from ragbound.serve import ServeSettings, create_app
from tests.serve.server import ThreadServer, served_kb

pytestmark = pytest.mark.filterwarnings("ignore:.*calibration queries cannot flag")


def _until(url: str, ready: bool, seconds: float = 60.0) -> httpx.Response:
    deadline = time.monotonic() + seconds
    while True:
        answer = httpx.get(f"{url}/readyz")
        loading = answer.json()["error"] == "the model is loading"
        if ((answer.status_code == 200) == ready and not loading) or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


def _move_first_canary(canaries: list, by: float) -> None:
    first = canaries[0]
    moved = [s + by for s in first.similarities]
    canaries[0] = first.model_copy(update={"similarities": moved})


def test_readiness_follows_the_canaries(minilm_kb_dir: Path, tmp_path: Path) -> None:
    kb_dir = served_kb(minilm_kb_dir, tmp_path / "kb")
    app = create_app(lambda: Gate.load(kb_dir), ServeSettings(canary_minutes=0.005))
    with ThreadServer(app) as url:
        ready = _until(url, ready=True)
        assert ready.status_code == 200, ready.text
        canary = ready.json()["canary"]
        assert canary["canaries"] == 5 and canary["largest_move"] <= 1e-5
        canaries = app.state.service.gate.guard.calibration.manifest.canaries
        _move_first_canary(canaries, 0.21)  # as if the store moved under the calibration
        moved = _until(url, ready=False)
        assert moved.status_code == 503 and "moved by 0.21" in moved.json()["error"]
        metrics = httpx.get(f"{url}/metrics").text
        assert "ragbound_canary_largest_move 0.2099" in metrics
        check = httpx.post(f"{url}/v1/decide", json={"query": "What do bees make?"})
        assert check.status_code == 503
        _move_first_canary(canaries, -0.21)
        assert _until(url, ready=True).status_code == 200


def test_a_canary_moved_before_start_is_not_ready(minilm_kb_dir: Path, tmp_path: Path) -> None:
    kb_dir = served_kb(minilm_kb_dir, tmp_path / "kb")
    path = kb_dir / "calibration" / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["canaries"][2]["similarities"][0] -= 0.3
    path.write_text(json.dumps(manifest), encoding="utf-8")
    gate = Gate.load(kb_dir, force=True)  # loaded past the refusal: the service checks again
    app = create_app(gate, ServeSettings(canary_minutes=0))
    with ThreadServer(app) as url:
        answer = _until(url, ready=False)
        assert answer.status_code == 503 and "moved by 0.3" in answer.json()["error"]
        assert answer.json()["canary"]["largest_move"] == pytest.approx(0.3, abs=1e-5)
    app = create_app(lambda: Gate.load(kb_dir), ServeSettings(canary_minutes=0))
    with ThreadServer(app) as url:
        assert "--force" in _until(url, ready=False).json()["error"]


def test_force_serves_with_moved_canaries_and_shows_the_move(
    minilm_kb_dir: Path, tmp_path: Path
) -> None:
    kb_dir = served_kb(minilm_kb_dir, tmp_path / "kb")
    path = kb_dir / "calibration" / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["canaries"][1]["similarities"][0] -= 0.3
    path.write_text(json.dumps(manifest), encoding="utf-8")
    settings = ServeSettings(canary_minutes=0.005, force=True)
    app = create_app(lambda: Gate.load(kb_dir, force=True), settings)
    with ThreadServer(app) as url:
        answer = _until(url, ready=True)
        assert answer.status_code == 200, answer.text
        assert answer.json()["canary"]["largest_move"] == pytest.approx(0.3, abs=1e-5)
        time.sleep(0.6)  # a few rechecks: still ready
        assert httpx.get(f"{url}/readyz").status_code == 200
        check = httpx.post(f"{url}/v1/decide", json={"query": "What do bees make?"})
        assert check.status_code == 200
