"""Build an MPNet sentence embedder's ONNX graph (the bundled all-mpnet-base-v2) straight from
its weights: numpy and ``onnx``, no torch (the pieces are :mod:`ragbound.embedders.graph_ops`').

The graph (opset 17) takes what the torch export takes (``input_ids`` and ``attention_mask``:
int64, batch x tokens) and gives ``sentence_embedding`` (float32, batch x dimension), pooled
over the attention mask and L2-normalised in the graph. As transformers' MPNetModel computes:

- embeddings: word + position, then LayerNorm. Positions are RoBERTa's: a token that is not
  the padding id (1) is at 2 + the number of such tokens before it, a padding token at 1.
- one relative position bias for all layers: the key's offset from the query put in one of 32
  buckets (:func:`relative_buckets`), each bucket a learnt bias per head. The buckets of every
  pair of positions up to ``max_position_embeddings`` are a constant, sliced to the sequence
  in the graph; the bias is added to the mask's once, and that sum to every layer's scores.
- BERT's encoder layer (attention, dense + residual + LayerNorm, erf GELU feed-forward).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from ragbound.embedders.graph_ops import GraphBuilder, model_config, read_weights
from ragbound.embedders.layout import SentenceLayout

INPUTS = ("input_ids", "attention_mask")
PADDING_ID = 1  # transformers' MPNetEmbeddings.padding_idx (fixed, whatever the config says)
BUCKETS = 32  # MPNetEncoder.compute_position_bias's num_buckets (fixed as well)
MAX_DISTANCE = 128

MPNET_LAYER = {
    "query": "attention.attn.q",
    "key": "attention.attn.k",
    "value": "attention.attn.v",
    "out": "attention.attn.o",
    "attention_norm": "attention.LayerNorm",
    "intermediate": "intermediate.dense",
    "output": "output.dense",
    "output_norm": "output.LayerNorm",
}


def mpnet_config(folder: Path) -> dict | None:
    """``folder``'s config.json when it describes an MPNet this builder reproduces (erf GELU,
    32 relative position buckets, safetensors weights), else None."""
    config = model_config(folder, "mpnet")
    plain = config is not None and config.get("relative_attention_num_buckets") == BUCKETS
    return config if plain else None


def build_mpnet_graph(folder: Path, layout: SentenceLayout, config: dict) -> onnx.ModelProto:
    """The sentence embedder of ``folder`` (an MPNet, see :func:`mpnet_config`) as an ONNX
    model; tensor names without an ``mpnet.`` prefix (an MPNetModel saved by a head)."""
    graph = GraphBuilder(read_weights(folder, "mpnet."), INPUTS)
    hidden = _embeddings(graph, float(config["layer_norm_eps"]))
    bias = graph.op(
        "Add",
        _position_bias(graph, int(config["max_position_embeddings"])),
        graph.mask_bias(INPUTS[1]),
    )
    hidden = graph.encoder(hidden, bias, config, MPNET_LAYER)
    graph.pool(hidden, layout.pooling)
    return graph.model(layout.dimension)


def _embeddings(graph: GraphBuilder, eps: float) -> str:
    """Word + position embeddings, then LayerNorm; positions from ``input_ids`` (a padding
    id is at PADDING_ID, any other token at PADDING_ID + its rank among the others)."""
    ids = INPUTS[0]
    padding_id = graph.const("padding_id", np.array(PADDING_ID, dtype=np.int64))
    tokens = graph.op(
        "Cast", graph.op("Not", graph.op("Equal", ids, padding_id)), to=TensorProto.INT64
    )
    ranks = graph.op("CumSum", tokens, graph.const("axis_1_scalar", np.array(1, dtype=np.int64)))
    positions = graph.op("Add", graph.op("Mul", ranks, tokens), padding_id)
    words = graph.op("Gather", graph.weight("embeddings.word_embeddings.weight"), ids)
    where = graph.op("Gather", graph.weight("embeddings.position_embeddings.weight"), positions)
    return graph.layer_norm("embeddings.LayerNorm", graph.op("Add", words, where), eps)


def _position_bias(graph: GraphBuilder, max_positions: int) -> str:
    """The relative position bias, heads x tokens x tokens: the bucket of each (query, key)
    pair, sliced from the constant of all pairs, looked up in the learnt biases."""
    length = graph.op("Shape", INPUTS[0], start=1, end=2)
    both = graph.op("Concat", length, length, axis=0)
    buckets = graph.op(
        "Slice",
        graph.const("relative_buckets", relative_buckets(max_positions)),
        graph.ints("zeros_2", [0, 0]),
        both,
        graph.ints("axes_01", [0, 1]),
    )
    table = graph.weight("encoder.relative_attention_bias.weight")  # buckets x heads
    return graph.op("Transpose", graph.op("Gather", table, buckets), perm=[2, 0, 1])


def relative_buckets(length: int) -> np.ndarray:
    """The bucket (0 to BUCKETS - 1) of every (query, key) pair of ``length`` positions, as
    transformers' ``MPNetEncoder.relative_position_bucket`` (T5's, bidirectional) gives it:
    half the buckets for keys after the query, half for keys at or before it; within a half,
    offsets below a quarter of the buckets each their own, longer ones logarithmically
    spaced up to MAX_DISTANCE, farther ones in the last. In float32, as torch computes it."""
    positions = np.arange(length, dtype=np.int64)
    offset = positions[:, None] - positions[None, :]  # query - key: transformers' n
    half = BUCKETS // 2
    exact = half // 2
    distance = np.abs(offset)
    scaled = np.log(np.maximum(distance, exact).astype(np.float32) / np.float32(exact))
    scaled = scaled / np.float32(math.log(MAX_DISTANCE / exact)) * np.float32(half - exact)
    far = np.minimum(exact + scaled.astype(np.int64), half - 1)
    bucket = (offset < 0) * half + np.where(distance < exact, distance, far)
    return bucket.astype(np.int64)
