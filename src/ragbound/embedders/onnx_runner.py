"""One exported sentence-transformers graph and its tokenizer on ONNX Runtime: texts in,
pooled unit vectors out (no torch, transformers or sentence-transformers)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragbound.embedders.layout import SentenceLayout
from ragbound.embedders.sentence import cpu_spinning, cpu_threads, limit_math_threads

# the output of a graph that pools and L2-normalises inside (ragbound.embedders.bert_graph)
POOLED_OUTPUT = "sentence_embedding"
# ONNX Runtime's session option: intra-op threads spin after a run ("1", its default) or sleep
SPINNING_OPTION = "session.intra_op.allow_spinning"


class OnnxRunner:
    """One exported graph and its tokenizer: texts in, pooled float32 vectors out."""

    def __init__(self, model: Path, folder: Path, layout: SentenceLayout):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.layout = layout
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(layout.max_seq_length)
        self.tokenizer.no_padding()
        options = ort.SessionOptions()
        # 0: ONNX Runtime picks (one per physical core); set_cpu_threads applies to it too
        self.threads = cpu_threads()  # a session keeps its count: a new one when it changes
        options.intra_op_num_threads = self.threads or 0
        options.inter_op_num_threads = 1
        # off unless set_cpu_spinning turned it on: threads spinning after a run hold the
        # cores the search that follows needs (benchmarks/default_path.py)
        self.spinning = cpu_spinning()
        options.add_session_config_entry(SPINNING_OPTION, "1" if self.spinning else "0")
        options.log_severity_level = 3
        # a memory plan is cached per input shape, and queries come in every shape: off, the
        # process stays flat (measured: 1,500 batches of random shapes, +1 MB against +28 MB)
        options.enable_mem_pattern = False
        self.session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        limit_math_threads()  # the libraries loaded with the model are held too
        self.inputs = {i.name for i in self.session.get_inputs()}
        # a graph built from the weights pools and normalises itself; an export gives tokens
        self.pools = self.session.get_outputs()[0].name == POOLED_OUTPUT

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        return [len(e.ids) for e in self.tokenizer.encode_batch(self._prepared(texts))]

    def run(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts``, shape (len(texts), dimension): one forward pass per group of
        near-equal token counts (:func:`length_groups`), so a short query is not padded to the
        batch's longest."""
        encodings = self.tokenizer.encode_batch(self._prepared(texts))
        vectors = np.empty((len(texts), self.layout.dimension), dtype=np.float32)
        for group in length_groups([len(e.ids) for e in encodings]):
            vectors[group] = self._forward([encodings[i] for i in group])
        return vectors

    def _forward(self, encodings: Sequence[Any]) -> np.ndarray:
        """One padded batch through the graph; pooled unit vectors."""
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for row, e in enumerate(encodings):
            ids[row, : len(e.ids)] = e.ids
            mask[row, : len(e.ids)] = e.attention_mask
            types[row, : len(e.ids)] = e.type_ids
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        out = self.session.run(None, {k: v for k, v in feed.items() if k in self.inputs})[0]
        return out if self.pools else pooled(out, mask, self.layout)

    def _prepared(self, texts: Sequence[str]) -> list[str]:
        return [t.lower() for t in texts] if self.layout.lower_case else list(texts)


# A group's longest query is at most this many times its shortest plus SLACK tokens. Measured on
# 960 mixed served queries (PubMedQA, TruthfulQA, HarmfulQA) in batches of 16 as they came, one
# thread: 178 queries/s padded to each batch's longest, 168 one at a time, 260 grouped.
GROUP_RATIO = 1.2
GROUP_SLACK = 2


def length_groups(counts: Sequence[int]) -> list[list[int]]:
    """Positions of ``counts`` (token counts) grouped for padding: ascending by count, a new
    group begun when a count exceeds the group's first by more than GROUP_RATIO x it +
    GROUP_SLACK tokens. Every position is in exactly one group.

    >>> length_groups([30, 8, 9, 31, 12])
    [[1, 2], [4], [0, 3]]
    """
    order = sorted(range(len(counts)), key=counts.__getitem__)
    groups: list[list[int]] = []
    for i in order:
        if groups and counts[i] <= counts[groups[-1][0]] * GROUP_RATIO + GROUP_SLACK:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def pooled(hidden: np.ndarray, mask: np.ndarray, layout: SentenceLayout) -> np.ndarray:
    """Pool token states (batch, tokens, dim) as sentence-transformers does, padding ignored,
    and L2-normalise (as every local embedder here does)."""
    weights = mask[..., None].astype(np.float32)
    if layout.pooling == "cls":
        vectors = hidden[:, 0]
    elif layout.pooling == "max":
        vectors = np.where(weights > 0, hidden, -1e9).max(axis=1)
    else:
        vectors = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    vectors = vectors.astype(np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
