"""The LLM layer: one protocol, an OpenAI-compatible client, local llama.cpp, a response cache,
batched calls, prompt files and robust output parsing.

>>> from ragbound.llm import CachedLLM, ResponseCache, load_prompt, make_llm  # doctest: +SKIP
>>> llm = CachedLLM(make_llm("local"), ResponseCache())  # doctest: +SKIP
>>> prompt = load_prompt("relevance-judge")  # doctest: +SKIP
>>> reply = llm.complete(prompt.render(query="...", context="..."),
...                      prompt_id=prompt.id, prompt_version=prompt.version)  # doctest: +SKIP

Backends load lazily: importing this package imports neither llama.cpp nor the model.
"""

from __future__ import annotations

from typing import Any

from ragbound.llm.base import (
    LLM,
    ChatMessage,
    GenerationParams,
    LLMError,
    LLMResponse,
    LLMResponseError,
    LLMTimeoutError,
    LLMUnavailableError,
    ParseError,
    PromptError,
)
from ragbound.llm.batch import (
    ParsedResult,
    Request,
    Result,
    arun_batch,
    arun_parsed,
    run_batch,
    run_parsed,
)
from ragbound.llm.cache import CachedLLM, ResponseCache, acall, call, default_cache_root
from ragbound.llm.parse import (
    Parsed,
    acomplete_parsed,
    complete_parsed,
    extract_tag,
    parse_json_object,
)
from ragbound.llm.prompts import (
    Prompt,
    builtin_examples,
    format_examples,
    list_prompts,
    load_prompt,
    load_prompt_file,
)

LLM_SPECS = ("local", "local:/path/to/model.gguf", "openai:MODEL", "openai")


def make_llm(spec: str = "local", **kwargs: Any) -> LLM:
    """An LLM from a spec: ``local`` (bundled default model), ``local:/path/model.gguf``,
    ``openai:MODEL`` or ``openai`` (model from ``RAGBOUND_LLM_MODEL``).

    ``kwargs`` go to the backend (``LocalLlama`` or ``OpenAIChat``), e.g. ``base_url``.
    """
    kind, _, rest = spec.partition(":")
    if kind == "local":
        from ragbound.llm.local import LocalLlama

        return LocalLlama(model_path=rest or kwargs.pop("model_path", None), **kwargs)
    if kind == "openai":
        from ragbound.llm.openai_backend import OpenAIChat

        return OpenAIChat(model=rest or kwargs.pop("model", None), **kwargs)
    raise LLMError(f"unknown LLM spec {spec!r}: expected one of {', '.join(LLM_SPECS)}")


__all__ = [
    "LLM",
    "LLM_SPECS",
    "CachedLLM",
    "ChatMessage",
    "GenerationParams",
    "LLMError",
    "LLMResponse",
    "LLMResponseError",
    "LLMTimeoutError",
    "LLMUnavailableError",
    "ParseError",
    "Parsed",
    "ParsedResult",
    "Prompt",
    "PromptError",
    "Request",
    "ResponseCache",
    "Result",
    "acall",
    "acomplete_parsed",
    "arun_batch",
    "arun_parsed",
    "builtin_examples",
    "call",
    "complete_parsed",
    "default_cache_root",
    "extract_tag",
    "format_examples",
    "list_prompts",
    "load_prompt",
    "load_prompt_file",
    "make_llm",
    "parse_json_object",
    "run_batch",
    "run_parsed",
]
