"""ONNX Runtime's intra-op threads do not spin after a run unless ``set_cpu_spinning`` turns
it on (issue 40); the vectors are the same either way."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from ragbound.embedders import load_dense_embedder, sentence, set_cpu_spinning
from ragbound.embedders.onnx import OnnxEmbedder
from ragbound.embedders.onnx_runner import SPINNING_OPTION

QUERY = "Does spinning change the vector of a query?"


def spinning_option(embedder: OnnxEmbedder) -> str:
    return embedder.runner().session.get_session_options().get_session_config_entry(SPINNING_OPTION)


@pytest.fixture
def embedder(monkeypatch: pytest.MonkeyPatch) -> OnnxEmbedder:
    monkeypatch.setattr(sentence, "_SPINNING", {})  # the process default, restored after
    found = load_dense_embedder("minilm", runtime="onnx")
    assert isinstance(found, OnnxEmbedder)
    return found


def test_spinning_is_off_by_default(embedder: OnnxEmbedder):
    assert not sentence.cpu_spinning()
    embedder.encode_one(QUERY)
    assert spinning_option(embedder) == "0"


def test_turning_it_on_applies_to_the_next_query_with_the_same_vector(embedder: OnnxEmbedder):
    off = embedder.encode_one(QUERY)
    session = embedder.runner().session
    set_cpu_spinning(True)
    on = embedder.encode_one(QUERY)
    assert embedder.runner().session is not session  # opened again with the option
    assert spinning_option(embedder) == "1" and embedder.runner().spinning
    np.testing.assert_array_equal(on, off)
    set_cpu_spinning(False)
    assert spinning_option(embedder) == "0"


SERVICE = """
import json
from ragbound.embedders import load_dense_embedder, set_cpu_spinning, set_cpu_threads
from ragbound.embedders.onnx_runner import SPINNING_OPTION
set_cpu_threads(2)  # what `ragbound serve --threads 2` does first
embedder = load_dense_embedder("minilm", runtime="onnx")
seen = []
for spinning in (None, True):
    if spinning is not None:
        set_cpu_spinning(spinning)
    embedder.encode_one("a query")
    options = embedder.runner().session.get_session_options()
    seen.append([options.intra_op_num_threads, options.get_session_config_entry(SPINNING_OPTION)])
print(json.dumps(seen))
"""


def test_a_thread_count_leaves_the_spinning_off_until_it_is_turned_on():
    # a fresh process: set_cpu_threads holds this process's BLAS pools for good
    out = subprocess.run(
        [sys.executable, "-c", SERVICE], capture_output=True, text=True, check=True, timeout=300
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [[2, "0"], [2, "1"]]
