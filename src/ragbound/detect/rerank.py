"""Cross-encoder reranking: the retrieved chunks' relevance to the query as the test's rows.

With a reranker, the rows the calibration keeps and every check scores are the cross-encoder's
relevance logits of the k retrieved chunks (higher = more relevant), sorted descending,
instead of their cosine similarities: every statistic applies unchanged, and the conformal
p-value stays exactly valid since calibration and check make their rows the same way. The
reranker is a local folder (a ``*ForSequenceClassification`` model with one output, such as
sentence-transformers' ``CrossEncoder.save`` writes); nothing is downloaded at run time.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragbound.embedders.sentence import model_revision, sentence_transformers
from ragbound.errors import InputError

_WEIGHT_PATTERNS = ("*.safetensors", "*.bin")
RERANK_BATCH = 32


def check_reranker_folder(folder: str | Path) -> Path:
    """The folder, resolved, if it holds a one-logit cross-encoder; InputError naming why not."""
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise InputError(
            f"reranker {path}: no such folder; give a local cross-encoder model folder "
            "(nothing is downloaded)"
        )
    config_file = path / "config.json"
    if not config_file.is_file():
        raise InputError(f"reranker {path} is not a model folder: it has no config.json")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"reranker {config_file}: not valid JSON ({exc})") from exc
    architectures = config.get("architectures") if isinstance(config, dict) else None
    if not isinstance(architectures, list) or not any(
        str(name).endswith("ForSequenceClassification") for name in architectures
    ):
        raise InputError(
            f"reranker {path} is not a cross-encoder: its config.json names the architectures "
            f"{architectures!r}; expected a *ForSequenceClassification model (a "
            "sentence-transformers CrossEncoder folder)"
        )
    outputs = len(config.get("id2label") or {"0": "score"})
    if outputs != 1:
        raise InputError(
            f"reranker {path} has {outputs} outputs (a classifier?); the relevance statistic "
            "needs a cross-encoder with one relevance logit"
        )
    if not any(any(path.glob(pattern)) for pattern in _WEIGHT_PATTERNS):
        raise InputError(f"reranker {path} holds no weights (*.safetensors or *.bin)")
    return path.resolve()


class CrossEncoderReranker:
    """A cross-encoder from a local folder; ``relevance`` gives raw logits, higher = more relevant.

    The model loads lazily on the first call, so opening a calibration costs nothing.

    Example:
        >>> reranker = CrossEncoderReranker("models/my-cross-encoder")  # doctest: +SKIP
        >>> reranker.relevance(["what is BM25?"], [["BM25 ranks by terms.", "Bees fly."]])
        array([[ 7.1, -9.8]])  # doctest: +SKIP
    """

    def __init__(self, folder: str | Path, *, device: str = "cpu"):
        self.folder = check_reranker_folder(folder)
        self.device = device
        self._model: Any = None

    @property
    def revision(self) -> str:
        """A fingerprint of the model's files (configs and weight sizes)."""
        return model_revision(self.folder)

    def _load(self) -> Any:
        if self._model is None:
            module = sentence_transformers("the reranker")
            self._model = module.CrossEncoder(str(self.folder), device=self.device)
        return self._model

    def relevance(self, queries: Sequence[str], passages: Sequence[Sequence[str]]) -> np.ndarray:
        """Relevance logit of every (query, passage) pair: shape (n_queries, n_passages).

        ``passages[i]`` are the passages of ``queries[i]``; every query has as many.
        """
        widths = {len(row) for row in passages}
        if len(passages) != len(queries) or len(widths) > 1:
            raise InputError("relevance needs one row of equally many passages per query")
        width = widths.pop() if widths else 0
        pairs = [(q, p) for q, row in zip(queries, passages, strict=True) for p in row]
        if not pairs:
            return np.zeros((len(queries), width))
        model = self._load()  # first: without torch it names the extra
        import torch

        logits = model.predict(
            pairs,
            batch_size=RERANK_BATCH,
            activation_fn=torch.nn.Identity(),  # raw logits: a sigmoid would saturate
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(logits, dtype=np.float64).reshape(len(queries), width)


def relevance_rows(
    reranker: CrossEncoderReranker,
    queries: Sequence[str],
    passages: Sequence[Sequence[str]],
) -> np.ndarray:
    """Each query's relevance logits over its passages, sorted descending (the test's rows)."""
    logits = reranker.relevance(queries, passages)
    return -np.sort(-logits, axis=1)
