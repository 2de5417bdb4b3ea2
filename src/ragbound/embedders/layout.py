"""What a sentence-transformers folder computes, read from its configuration files alone
(no torch): the runtime that does not load sentence-transformers needs it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Pooling = Literal["mean", "cls", "max"]

_TRANSFORMER = "sentence_transformers.models.Transformer"
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"
_POOLING_FLAGS: dict[str, Pooling] = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
}


@dataclass(frozen=True)
class SentenceLayout:
    """A transformer, one pooling, and an optional L2 normalisation (every local embedder
    here normalises anyway): the shape of the bundled models and of most
    sentence-transformers folders.

    ``dimension`` is the pooled vector's length; ``max_seq_length`` is in tokens (longer
    texts are truncated, as sentence-transformers does)."""

    pooling: Pooling
    dimension: int
    max_seq_length: int
    lower_case: bool


def read_layout(folder: Path) -> SentenceLayout | None:
    """The folder's layout, or None when it is not a transformer followed by one pooling (and
    maybe a normalisation): such a folder runs only through sentence-transformers."""
    modules = _json(folder / "modules.json")
    if not isinstance(modules, list) or not (folder / "tokenizer.json").is_file():
        return None
    types = [m.get("type") for m in modules]
    if types not in ([_TRANSFORMER, _POOLING], [_TRANSFORMER, _POOLING, _NORMALIZE]):
        return None
    if modules[0].get("path", "") != "":
        return None
    pooling_config = _json(folder / modules[1]["path"] / "config.json")
    sentence_config = _json(folder / "sentence_bert_config.json")
    if not isinstance(pooling_config, dict) or not isinstance(sentence_config, dict):
        return None
    chosen = [mode for flag, mode in _POOLING_FLAGS.items() if pooling_config.get(flag)]
    other = [k for k, v in pooling_config.items() if k.startswith("pooling_mode") and v]
    if len(chosen) != 1 or len(other) != 1 or "max_seq_length" not in sentence_config:
        return None
    return SentenceLayout(
        pooling=chosen[0],
        dimension=int(pooling_config["word_embedding_dimension"]),
        max_seq_length=int(sentence_config["max_seq_length"]),
        lower_case=bool(sentence_config.get("do_lower_case", False)),
    )


def _json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
