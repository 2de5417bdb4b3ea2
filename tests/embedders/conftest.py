"""A real OpenAI-compatible embedding server for the tests: infinity-emb serving the bundled
MiniLM on a free loopback port, started once per session (skipped when it is not installed;
see tests/support/infinity_server.py, which benchmarks/attached_collection.py starts too).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from tests.support.infinity_server import (
    INFINITY_ENV,
    InfinityError,
    infinity_executable,
    running_infinity,
)
from tests.support.ports import free_port as free_port  # the endpoint tests' spare ports


@pytest.fixture(scope="session")
def infinity_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL (``http://127.0.0.1:PORT/v1``) of a running infinity serving MiniLM as
    ``minilm`` (and ``minilm-twin``); stopped at the end of the session."""
    executable = infinity_executable()
    if executable is None:
        pytest.skip(f"infinity-emb is not installed: run `make infinity` or set ${INFINITY_ENV}")
    log = tmp_path_factory.mktemp("infinity") / "infinity.log"
    with ExitStack() as stack:
        try:
            base_url = stack.enter_context(running_infinity(executable, log))
        except InfinityError as error:
            pytest.fail(str(error))
        yield base_url


@pytest.fixture
def endpoint_env(infinity_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """``$RAGBOUND_EMBED_BASE_URL`` pointing at the infinity server, for this test."""
    monkeypatch.setenv("RAGBOUND_EMBED_BASE_URL", infinity_url)
    return infinity_url


@pytest.fixture(scope="module")
def module_endpoint_env(infinity_url: str) -> Iterator[str]:
    """``$RAGBOUND_EMBED_BASE_URL`` pointing at the infinity server, for this test module
    (for module-scoped fixtures: a service started once, say)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAGBOUND_EMBED_BASE_URL", infinity_url)
        yield infinity_url
