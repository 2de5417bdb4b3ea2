"""The bundled local LLM as the benchmarks that generate text load it."""

from __future__ import annotations

import os

from ragbound.llm import LLM


def make_local_llm() -> LLM:
    """The bundled local model, its replies cached; OMP_NUM_THREADS threads when set."""
    from ragbound.llm import CachedLLM, ResponseCache, make_llm

    threads = int(os.environ.get("OMP_NUM_THREADS") or 0) or None
    return CachedLLM(make_llm("local", n_threads=threads), ResponseCache())
