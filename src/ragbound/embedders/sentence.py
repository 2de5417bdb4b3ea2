"""Dense embedders through sentence-transformers, loaded only from local folders."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragbound.embedders.base import EmbedderInfo
from ragbound.errors import InputError

# Nothing may be fetched from a model hub at run time: fail loudly instead of downloading.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_WEIGHT_SUFFIXES = (".safetensors", ".bin")
_CONFIG_FILES = ("modules.json", "config.json", "sentence_bert_config.json")

_THREADS: dict[str, int] = {}  # the CPU threads asked for, applied when torch loads
TORCH_EXTRA = "pip install 'ragbound[torch]'"


def sentence_transformers(purpose: str) -> Any:
    """The ``sentence_transformers`` module, imported for ``purpose`` (its progress bars off,
    the thread count applied); an InputError naming the ``torch`` extra when it is missing."""
    try:
        import sentence_transformers as module
        from transformers.utils import logging as hf_logging
    except ImportError as exc:
        raise InputError(
            f"{purpose} needs torch and sentence-transformers, which the core does not "
            f"install: {TORCH_EXTRA} (missing {exc.name})"
        ) from exc
    hf_logging.disable_progress_bar()  # no "Loading weights" bar in CLI output
    apply_cpu_threads()
    return module


def set_cpu_threads(threads: int) -> None:
    """Let torch and ONNX Runtime use ``threads`` CPU threads for embedding (process-wide;
    ONNX Runtime sessions opened after the call). Applied at once if torch is loaded, else
    when a local model loads it: a server embedder's process never imports torch."""
    _THREADS["torch"] = threads
    limit_math_threads()
    if sys.modules.get("torch") is not None:  # loaded (None: import blocked)
        apply_cpu_threads()


def cpu_threads() -> int | None:
    """The thread count given to :func:`set_cpu_threads` (None: the runtime's default)."""
    return _THREADS.get("torch")


_SPINNING: dict[str, bool] = {}  # given to set_cpu_spinning; off when absent


def set_cpu_spinning(on: bool) -> None:
    """Let ONNX Runtime's intra-op threads spin (busy-wait for the next piece of work) after
    each run, process-wide; an embedder's session is opened again at its next query.

    Off unless turned on here: a spinning thread holds a core after each run, and the search
    that follows waits for it (docs/embedders.md has the measurements). The vectors are the
    same either way."""
    _SPINNING["onnx"] = bool(on)


def cpu_spinning() -> bool:
    """Whether ONNX Runtime's intra-op threads spin (:func:`set_cpu_spinning`; off by
    default)."""
    return _SPINNING.get("onnx", False)


def limit_math_threads() -> None:
    """Hold the BLAS and OpenMP pools of the native libraries loaded so far (numpy's and
    scipy's OpenBLAS, scikit-learn's OpenMP) to the count given to :func:`set_cpu_threads`.

    OpenBLAS keeps a thread per core spinning after each product: in a service given one
    embedding thread they burned as much CPU as the work itself (measured on 2 cores: 11.9 ms
    of CPU a decision, 5.7 ms with the pools held). Call again after loading a library."""
    if "torch" in _THREADS:
        from threadpoolctl import threadpool_limits

        from ragbound.blas_threads import setting_counts

        # a small search holding OpenBLAS to one thread meanwhile restores this count after
        setting_counts(lambda: threadpool_limits(limits=_THREADS["torch"]))


def apply_cpu_threads() -> None:
    """Apply the thread count given to :func:`set_cpu_threads`, if any (loads torch)."""
    if "torch" in _THREADS:
        import torch

        torch.set_num_threads(_THREADS["torch"])


def release_freed_memory() -> None:
    """Return freed heap pages to the OS (glibc only; a no-op elsewhere): batches of
    different shapes fragment glibc's heap (600 MB grown embedding 10k chunks untrimmed)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def model_revision(folder: Path) -> str:
    """A cheap content fingerprint of a model folder: configs hashed, weights by name and
    size (not read: hundreds of MB on each load)."""
    digest = hashlib.sha256()
    for name in _CONFIG_FILES:
        path = folder / name
        if path.is_file():
            digest.update(name.encode() + b"\0" + path.read_bytes())
    for path in sorted(folder.rglob("*")):
        if path.suffix in _WEIGHT_SUFFIXES:
            rel = path.relative_to(folder).as_posix()
            digest.update(f"{rel}\0{path.stat().st_size}".encode())
    return digest.hexdigest()[:16]


def check_model_folder(folder: Path) -> None:
    """Raise InputError unless ``folder`` looks like a sentence-transformers model."""
    if not folder.is_dir():
        raise InputError(f"embedder path {folder} is not a folder")
    if not (folder / "modules.json").is_file() and not (folder / "config.json").is_file():
        raise InputError(
            f"{folder} is not a sentence-transformers model folder "
            "(expected modules.json or config.json inside)"
        )


class SentenceTransformerEmbedder:
    """A sentence-transformers model from a local folder, L2-normalised (cosine similarity).

    The model loads lazily on the first ``encode`` so that opening a knowledge base to read
    its chunks costs nothing.
    """

    def __init__(self, folder: str | Path, *, name: str | None = None, device: str = "cpu"):
        self.folder = Path(folder)
        check_model_folder(self.folder)
        self.name = name or self.folder.name
        self.device = device
        self._model: Any = None
        self._info: EmbedderInfo | None = None

    def _load(self) -> Any:
        if self._model is None:
            module = sentence_transformers(f"embedding with {self.folder.name} on torch")
            self._model = module.SentenceTransformer(str(self.folder), device=self.device)
        return self._model

    @property
    def info(self) -> EmbedderInfo:
        if self._info is None:
            model = self._load()
            dim_fn = (
                getattr(model, "get_embedding_dimension", None)
                or model.get_sentence_embedding_dimension
            )
            self._info = EmbedderInfo(
                name=self.name,
                revision=model_revision(self.folder),
                dimension=int(dim_fn()),
                similarity="cosine",
                kind="dense",
                max_seq_length=int(model.max_seq_length),
                runtime="torch",
            )
        return self._info

    def encode(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> np.ndarray:
        """Embed texts; rows are unit vectors, so inner product = cosine similarity."""
        model = self._load()
        vectors = model.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=progress,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(texts), -1)

    def encode_one(self, text: str) -> np.ndarray:
        """Embed one query on the request path; shape (1, dimension)."""
        model = self._load()
        vector = model.encode(text, normalize_embeddings=True, show_progress_bar=False)
        return np.ascontiguousarray(vector, dtype=np.float32).reshape(1, -1)
