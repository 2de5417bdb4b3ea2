"""``set_cpu_threads`` holds every CPU thread pool of the process, not only the embedder's."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json
import numpy
from threadpoolctl import threadpool_info
from ragbound.embedders import set_cpu_threads
set_cpu_threads(1)
import scipy.linalg  # loaded after the call: held once a model loads
from ragbound.embedders import load_dense_embedder
load_dense_embedder("minilm", runtime="onnx").encode_one("one query")
print(json.dumps([(p["internal_api"], p["num_threads"]) for p in threadpool_info()]))
"""


def test_one_thread_holds_the_blas_pools_loaded_before_and_after():
    # a fresh process: the pools are per process, and this one's are left as they are
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=300
    )
    pools = json.loads(out.stdout.strip().splitlines()[-1])
    assert any(api == "openblas" for api, _ in pools), pools
    assert all(threads == 1 for _, threads in pools), pools


LATE = """
import json
from ragbound.embedders import load_dense_embedder, set_cpu_threads
embedder = load_dense_embedder("minilm", runtime="onnx")
embedder.encode_one("opened before the count is set")  # as a service loading its gate
before = embedder.runner().session.get_session_options().intra_op_num_threads
set_cpu_threads(1)
vector = embedder.encode_one("after")
after = embedder.runner().session.get_session_options().intra_op_num_threads
print(json.dumps([before, after, len(vector[0])]))
"""


def test_a_thread_count_set_after_the_session_opened_applies_to_the_next_query():
    out = subprocess.run(
        [sys.executable, "-c", LATE], capture_output=True, text=True, check=True, timeout=300
    )
    before, after, dimension = json.loads(out.stdout.strip().splitlines()[-1])
    assert (before, after, dimension) == (0, 1, 384)
