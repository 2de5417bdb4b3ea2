"""``openai:MODEL``: embeddings from an OpenAI-compatible server.

Most tests run against a real server (infinity-emb serving the bundled MiniLM on loopback,
see conftest.py; skipped without it). The retry and malformed-reply tests use a labelled
test double (tests/scripted_server.py), since no real server misbehaves on purpose.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragbound.detect import Guard
from ragbound.embedders import EndpointError, OpenAIEmbedder, canonical_spec, load_dense_embedder
from ragbound.errors import IncompatibleArtifactError, InputError
from ragbound.knowledge import KnowledgeBase
from tests.cli.runner import run
from tests.scripted_server import Reply, ScriptedServer, serving
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE

ENV = ("RAGBOUND_EMBED_BASE_URL", "OPENAI_BASE_URL", "RAGBOUND_EMBED_API_KEY", "OPENAI_API_KEY")
TEXTS = ["What is BM25?", "Honey bees live in colonies.", "word " * 400, ""]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


# ----------------------------------------------------------------- a real server (infinity)
def test_vectors_agree_with_the_local_model(endpoint_env: str) -> None:
    remote = load_dense_embedder("openai:minilm")
    local = load_dense_embedder("minilm")
    info = remote.info
    assert (info.name, info.revision, info.dimension) == ("minilm", "openai:minilm:384", 384)
    assert (info.similarity, info.kind) == ("cosine", "dense")
    vectors = remote.encode(TEXTS, batch_size=3)  # two requests
    assert vectors.dtype == np.float32 and vectors.flags.c_contiguous
    assert vectors.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosines = (vectors * local.encode(TEXTS)).sum(axis=1)
    assert cosines.min() > 0.999, cosines
    one = remote.encode_one(TEXTS[0])
    assert one.shape == (1, 384) and float(one[0] @ vectors[0]) > 0.9999


def test_a_knowledge_base_on_the_server_gives_the_local_p_values(
    endpoint_env: str, corpus_dir: Path, minilm_kb_dir: Path, tmp_path: Path
) -> None:
    calibration = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE[:10]
    queries = MORE_IN_KNOWLEDGE[10:] + OUT_OF_KNOWLEDGE
    kb = KnowledgeBase.build([corpus_dir], embedder="openai:minilm")
    assert kb.manifest.embedder_spec == "openai:minilm"
    kb.save(tmp_path / "kb")
    loaded = KnowledgeBase.load(tmp_path / "kb")
    remote = Guard.calibrate(loaded, calibration, k=4, alpha=0.1).check_many(queries)
    local_kb = KnowledgeBase.load(minilm_kb_dir)
    local = Guard.calibrate(local_kb, calibration, k=4, alpha=0.1).check_many(queries)
    # the same model on both sides: scores differ by float noise only, so the p-values (ranks
    # among the calibration scores) are equal unless a score falls within that noise of a tie
    scores = np.array([[v.score for v in remote], [v.score for v in local]])
    np.testing.assert_allclose(scores[0], scores[1], atol=1e-4)
    assert [v.p_value for v in remote] == pytest.approx([v.p_value for v in local], abs=1e-9)
    assert [v.out_of_knowledge for v in remote] == [v.out_of_knowledge for v in local]


GATE_WITHOUT_TORCH = """
import sys
from ragbound.embedders import set_cpu_threads
from ragbound.gate import Gate

set_cpu_threads(1)  # what `ragbound serve --threads 1` does first
decision = Gate.load(sys.argv[1]).decide(sys.argv[2])
print(decision.action, "torch" in sys.modules)
"""


def test_the_gate_decides_through_the_server_without_torch(
    endpoint_env: str, corpus_dir: Path, tmp_path: Path
) -> None:
    kb = KnowledgeBase.build([corpus_dir], embedder="openai:minilm")
    kb.save(tmp_path / "kb")
    Guard.calibrate(kb, IN_KNOWLEDGE + MORE_IN_KNOWLEDGE, k=4, alpha=0.1).save()
    done = subprocess.run(
        [sys.executable, "-c", GATE_WITHOUT_TORCH, str(tmp_path / "kb"), OUT_OF_KNOWLEDGE[0]],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["abstain", "False"]


def test_a_wrong_model_name_is_one_clear_error(endpoint_env: str) -> None:
    with pytest.raises(EndpointError, match=r"refused model 'minilm-typo' \(HTTP 4\d\d\)") as err:
        _ = load_dense_embedder("openai:minilm-typo").info
    assert "minilm-typo" in str(err.value) and "\n" not in str(err.value)


def test_cli_index_with_the_server(
    endpoint_env: str, corpus_dir: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    out = tmp_path / "kb"
    code, _, err = run(
        monkeypatch, capsys, "index", str(corpus_dir), "--out", str(out), "--embedder",
        "openai:minilm", "--json",
    )  # fmt: skip
    assert code == 0, err
    kb = KnowledgeBase.load(out)
    assert kb.manifest.embedder_spec == "openai:minilm"
    assert kb.manifest.embedder.revision == "openai:minilm:384"
    found = kb.search(["How do bees tell each other where food is?"], 1)
    assert "waggle" in kb.chunks[int(found.indices[0, 0])].text


# ----------------------------------------------------------------- no server needed
def test_the_spec_is_recorded_as_given() -> None:
    assert canonical_spec("openai:minilm") == "openai:minilm"
    with pytest.raises(InputError, match="needs a model name"):
        load_dense_embedder("openai:")


def test_no_base_url_names_both_variables() -> None:
    with pytest.raises(InputError, match="RAGBOUND_EMBED_BASE_URL or OPENAI_BASE_URL"):
        load_dense_embedder("openai:minilm")


@pytest.mark.parametrize("variable", ["RAGBOUND_EMBED_BATCH_SIZE", "RAGBOUND_EMBED_TIMEOUT"])
@pytest.mark.parametrize("value", ["0", "-3", "nan", "inf", "abc"])
def test_a_bad_setting_is_named(variable: str, value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGBOUND_EMBED_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv(variable, value)
    with pytest.raises(InputError, match=rf"\${variable} must be a positive number"):
        OpenAIEmbedder("minilm")


def test_a_closed_port_names_the_url_and_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.embedders.conftest import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    embedder = OpenAIEmbedder("minilm", max_retries=1, backoff=0.01)
    with pytest.raises(EndpointError) as err:
        _ = embedder.info
    message = str(err.value)
    assert f"cannot reach the embedding server at {url}/embeddings" in message
    assert "$OPENAI_BASE_URL" in message and "2 attempts" in message


def test_cli_error_is_one_line(corpus_dir: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    from tests.embedders.conftest import free_port

    monkeypatch.setenv("RAGBOUND_EMBED_BASE_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setattr("ragbound.embedders.endpoint.time.sleep", lambda seconds: None)
    out = tmp_path / "kb"
    argv = ["index", str(corpus_dir), "--out", str(out), "--embedder", "openai:minilm"]
    code, _, err = run(monkeypatch, capsys, *argv)
    assert code == 2
    assert err.startswith("error: cannot reach the embedding server") and err.count("\n") == 1
    assert "$RAGBOUND_EMBED_BASE_URL" in err and not (out / "manifest.json").exists()


# ----------------------------------------------------------------- test double (scripted)
def _embeddings(request: dict[str, Any], dimension: int = 3) -> dict[str, Any]:
    """A well-formed reply of constant vectors, listed in reverse order (index says where)."""
    rows = [
        {"index": i, "embedding": [float(i + 1)] * dimension} for i in range(len(request["input"]))
    ]
    return {"object": "list", "data": rows[::-1], "model": request["model"]}


@pytest.fixture
def double() -> Any:
    with serving(_embeddings) as srv:
        yield srv


def _client(server: ScriptedServer, **options: Any) -> OpenAIEmbedder:
    return OpenAIEmbedder("tiny", base_url=server.base_url, backoff=0.01, **options)


def test_batches_order_by_index_and_send_the_key(double: ScriptedServer) -> None:
    embedder = OpenAIEmbedder(
        "tiny", base_url=double.base_url + "/", api_key="sk-test", batch_size=2
    )
    vectors = embedder.encode(["a", "b", "c"], batch_size=64)
    assert [len(s["json"]["input"]) for s in double.seen] == [2, 1]  # the smaller size wins
    assert double.seen[0]["path"] == "/v1/embeddings"
    assert double.seen[0]["headers"]["Authorization"] == "Bearer sk-test"
    assert double.seen[0]["json"]["model"] == "tiny"
    np.testing.assert_allclose(vectors, np.full((3, 3), 1 / np.sqrt(3)), rtol=1e-6)


def test_429_waits_for_retry_after_then_succeeds(double: ScriptedServer) -> None:
    double.script = [Reply(429, {"error": "slow down"}, {"Retry-After": "1"})]
    start = time.perf_counter()
    vectors = _client(double).encode(["a", "b"])
    assert time.perf_counter() - start >= 1.0
    assert len(double.seen) == 2 and vectors.shape == (2, 3)


def test_5xx_is_retried_then_reported(double: ScriptedServer) -> None:
    double.script = [Reply(503, {"error": "loading"}) for _ in range(3)]
    with pytest.raises(EndpointError, match=r"HTTP 503 .*\(3 attempts\).*loading"):
        _client(double, max_retries=2).encode(["a"])
    assert len(double.seen) == 3


def test_a_changed_dimension_is_refused(double: ScriptedServer) -> None:
    double.script = [Reply(), Reply(body=_embeddings({"input": ["b"], "model": "tiny"}, 4))]
    embedder = _client(double)
    assert embedder.info.dimension == 3
    with pytest.raises(EndpointError, match=r"4-dimensional .* gave 3 before"):
        embedder.encode(["b"])


def test_the_wrong_number_of_vectors_is_refused(double: ScriptedServer) -> None:
    double.script = [Reply(body=_embeddings({"input": ["a"], "model": "tiny"}))]
    with pytest.raises(EndpointError, match="returned 1 vectors for 2 texts"):
        _client(double).encode(["a", "b"])


def test_a_missing_model_reply_quotes_the_server(double: ScriptedServer) -> None:
    body = {"error": {"message": "The model `gpt-x` does not exist.", "code": 404}}
    double.script = [Reply(404, body)]
    with pytest.raises(EndpointError, match=r"refused model 'tiny' \(HTTP 404\).*does not exist"):
        _client(double).encode(["a"])


def test_a_knowledge_base_refuses_a_server_now_serving_another_dimension(
    corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dimension = [3]
    with serving(lambda request: _embeddings(request, dimension[0])) as srv:
        monkeypatch.setenv("RAGBOUND_EMBED_BASE_URL", srv.base_url)
        KnowledgeBase.build([corpus_dir / "bees"], embedder="openai:tiny").save(tmp_path / "kb")
        dimension[0] = 4  # the name now serves another model
        kb = KnowledgeBase.load(tmp_path / "kb")
        with pytest.raises(IncompatibleArtifactError, match=r"openai:tiny:4\).*openai:tiny:3\)"):
            _ = kb.embedder
