"""Build a BERT sentence embedder's ONNX graph straight from its weights: numpy and ``onnx``,
no torch (the pieces are :mod:`ragbound.embedders.graph_ops`').

The graph (opset 17) takes what the torch export takes (``input_ids``, ``token_type_ids`` and
``attention_mask``: int64, batch x tokens) and gives ``sentence_embedding`` (float32, batch x
dimension): the folder's pooling over the attention mask and an L2 normalisation, in the graph.
Embeddings (word + position + token type, LayerNorm); per layer self-attention (the mask as an
additive bias), output dense + residual + LayerNorm, intermediate dense + GELU (erf) + output
dense + residual + LayerNorm.

ONNX Runtime's transformer fusions (``onnxruntime.transformers.optimizer``, model type bert:
6 Attention, 13 SkipLayerNormalization, 6 BiasGelu) are not applied: the fused graph gave the
same vectors (2.8e-7 off the reference) but was no faster, 1.02 x the plain graph's p50 over
400 one-query runs and 1.08 x its time in batches of 32 on one thread (1.01 x and 0.97 x on
the default threads), interleaved; the session's own optimiser already fuses BiasGelu,
LayerNorm and the scaled MatMul.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from ragbound.embedders.graph_ops import BERT_LAYER, GraphBuilder, model_config, read_weights
from ragbound.embedders.layout import SentenceLayout

INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def bert_config(folder: Path) -> dict | None:
    """``folder``'s config.json when it describes a BERT this builder reproduces (absolute
    positions, erf GELU, safetensors weights), else None."""
    config = model_config(folder, "bert")
    plain = config is not None and config.get("position_embedding_type", "absolute") == "absolute"
    return config if plain else None


def build_bert_graph(folder: Path, layout: SentenceLayout, config: dict) -> onnx.ModelProto:
    """The sentence embedder of ``folder`` (a BERT, see :func:`bert_config`) as an ONNX model;
    tensor names without a ``bert.`` prefix (a BertModel saved by a head)."""
    graph = GraphBuilder(read_weights(folder, "bert."), INPUTS)
    hidden = _embeddings(graph, float(config["layer_norm_eps"]))
    hidden = graph.encoder(hidden, graph.mask_bias(INPUTS[2]), config, BERT_LAYER)
    graph.pool(hidden, layout.pooling)
    return graph.model(layout.dimension)


def _embeddings(graph: GraphBuilder, eps: float) -> str:
    """Word + token type + absolute position (0, 1, ...) embeddings, then LayerNorm."""
    words = graph.op("Gather", graph.weight("embeddings.word_embeddings.weight"), INPUTS[0])
    types = graph.op("Gather", graph.weight("embeddings.token_type_embeddings.weight"), INPUTS[1])
    tokens = graph.op("Shape", INPUTS[0], start=1, end=2)
    positions = graph.op(
        "Slice",
        graph.weight("embeddings.position_embeddings.weight"),
        graph.ints("zero", [0]),
        tokens,
        graph.ints("axis_0", [0]),
    )
    summed = graph.op("Add", graph.op("Add", words, types), positions)
    return graph.layer_norm("embeddings.LayerNorm", summed, eps)
