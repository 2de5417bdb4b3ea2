"""The pieces a sentence embedder's ONNX graph is built from, with numpy and ``onnx`` (no
torch): linear layers, LayerNorm, erf GELU, multi-head self-attention with an additive bias,
the encoder layer of BERT and MPNet, pooling over the attention mask and L2 normalisation.
:mod:`ragbound.embedders.bert_graph` and :mod:`ragbound.embedders.mpnet_graph` put them
together (opset 17, output ``sentence_embedding``, float32, batch x dimension)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ragbound.embedders.onnx_runner import POOLED_OUTPUT
from ragbound.embedders.safetensors_file import read_safetensors

OPSET = 17
OUTPUT = POOLED_OUTPUT

# where an encoder layer's tensors are, under the layer's prefix: BERT's names
BERT_LAYER = {
    "query": "attention.self.query",
    "key": "attention.self.key",
    "value": "attention.self.value",
    "out": "attention.output.dense",
    "attention_norm": "attention.output.LayerNorm",
    "intermediate": "intermediate.dense",
    "output": "output.dense",
    "output_norm": "output.LayerNorm",
}


def model_config(folder: Path, model_type: str) -> dict | None:
    """``folder``'s config.json when it is of ``model_type`` with erf GELU (transformers'
    "gelu") and safetensors weights, else None."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    plain = (
        isinstance(config, dict)
        and config.get("model_type") == model_type
        and config.get("hidden_act") == "gelu"
        and (folder / "model.safetensors").is_file()
    )
    return config if plain else None


def read_weights(folder: Path, prefix: str) -> dict[str, np.ndarray]:
    """The tensors of ``folder``'s model.safetensors by name, without ``prefix`` (the base
    model's name where a model with a head saved it: ``bert.``, ``mpnet.``)."""
    tensors = read_safetensors(folder / "model.safetensors")
    return {name.removeprefix(prefix): value for name, value in tensors.items()}


class GraphBuilder:
    """The nodes and initializers of a graph as it is built; each method returns the name
    of the value it computes. ``weights`` are the model's tensors by name."""

    def __init__(self, weights: dict[str, np.ndarray], inputs: tuple[str, ...]):
        self.weights = weights
        self.inputs = inputs
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.count = 0
        self.made: set[str] = set()

    def op(self, op_type: str, *inputs: str, **attributes: object) -> str:
        self.count += 1
        out = f"{op_type.lower()}_{self.count}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attributes))
        return out

    def const(self, name: str, value: np.ndarray) -> str:
        """An initializer, made once per name (shared constants are asked for again)."""
        if name not in self.made:
            self.made.add(name)
            self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def weight(self, name: str, transpose: bool = False) -> str:
        value = self.weights[name]
        return self.const(name, np.ascontiguousarray(value.T if transpose else value))

    def scalar(self, name: str, value: float) -> str:
        return self.const(name, np.array(value, dtype=np.float32))

    def ints(self, name: str, values: list[int]) -> str:
        return self.const(name, np.array(values, dtype=np.int64))

    def linear(self, prefix: str, x: str) -> str:
        product = self.op("MatMul", x, self.weight(f"{prefix}.weight", transpose=True))
        return self.op("Add", product, self.weight(f"{prefix}.bias"))

    def layer_norm(self, prefix: str, x: str, eps: float) -> str:
        scale, shift = self.weight(f"{prefix}.weight"), self.weight(f"{prefix}.bias")
        return self.op("LayerNormalization", x, scale, shift, axis=-1, epsilon=eps)

    def mask_bias(self, mask: str) -> str:
        """The attention mask as an additive bias on the scores, batch x 1 x 1 x tokens:
        0 on a token, float32's lowest on padding (as transformers does). In the order ONNX
        Runtime's attention fusion recognises: Unsqueeze, Unsqueeze, Cast, Sub, Mul."""
        self.mask = self.op("Cast", mask, to=TensorProto.FLOAT)
        wide = self.op("Unsqueeze", mask, self.ints("axis_1", [1]))
        wide = self.op(
            "Cast", self.op("Unsqueeze", wide, self.ints("axis_2", [2])), to=TensorProto.FLOAT
        )
        padding = self.op("Sub", self.scalar("one", 1.0), wide)
        return self.op("Mul", padding, self.scalar("lowest", float(np.finfo(np.float32).min)))

    def encoder(self, x: str, bias: str, config: dict, names: dict[str, str]) -> str:
        """``config["num_hidden_layers"]`` layers ``encoder.layer.N``, tensors named as
        ``names`` says (:data:`BERT_LAYER`): attention (scores + ``bias``), output dense +
        residual + LayerNorm, intermediate dense + GELU, output dense + residual + LayerNorm."""
        eps = float(config["layer_norm_eps"])
        for layer in range(int(config["num_hidden_layers"])):
            part = {key: f"encoder.layer.{layer}.{name}" for key, name in names.items()}
            attended = self.attention(part, x, bias, config)
            out = self.linear(part["out"], attended)
            x = self.layer_norm(part["attention_norm"], self.op("Add", out, x), eps)
            inner = self.gelu(self.linear(part["intermediate"], x))
            out = self.linear(part["output"], inner)
            x = self.layer_norm(part["output_norm"], self.op("Add", out, x), eps)
        return x

    def attention(self, part: dict[str, str], x: str, bias: str, config: dict) -> str:
        heads = int(config["num_attention_heads"])
        size = int(config["hidden_size"]) // heads
        split = self.ints(f"heads_{heads}x{size}", [0, 0, heads, size])
        q, k, v = (
            self.op("Reshape", self.linear(part[name], x), split)
            for name in ("query", "key", "value")
        )
        q = self.op("Transpose", q, perm=[0, 2, 1, 3])
        k = self.op("Transpose", k, perm=[0, 2, 3, 1])
        v = self.op("Transpose", v, perm=[0, 2, 1, 3])
        scores = self.op("Div", self.op("MatMul", q, k), self.scalar(f"root_{size}", size**0.5))
        probs = self.op("Softmax", self.op("Add", scores, bias), axis=-1)
        context = self.op("Transpose", self.op("MatMul", probs, v), perm=[0, 2, 1, 3])
        return self.op("Reshape", context, self.ints(f"merge_{heads * size}", [0, 0, heads * size]))

    def gelu(self, x: str) -> str:
        """0.5 x (1 + erf(x / sqrt 2)), as transformers' "gelu"."""
        erf = self.op("Erf", self.op("Div", x, self.scalar("sqrt_2", 2**0.5)))
        half = self.op("Mul", x, self.op("Add", erf, self.scalar("one", 1.0)))
        return self.op("Mul", half, self.scalar("half", 0.5))

    def pool(self, hidden: str, pooling: str) -> None:
        """Pool the token states as sentence-transformers does (padding ignored), then
        L2-normalise, into :data:`OUTPUT` (after :meth:`mask_bias`, which casts the mask)."""
        weights = self.op("Unsqueeze", self.mask, self.ints("axis_2", [2]))
        if pooling == "cls":
            vectors = self.op("Gather", hidden, self.const("first", np.array(0)), axis=1)
        elif pooling == "max":
            lowest = self.scalar("minus_1e9", -1e9)
            kept = self.op(
                "Where", self.op("Greater", weights, self.scalar("zero_f", 0.0)), hidden, lowest
            )
            vectors = self.op("ReduceMax", kept, axes=[1], keepdims=0)
        else:
            axis = self.ints("axis_1", [1])
            summed = self.op("ReduceSum", self.op("Mul", hidden, weights), axis, keepdims=0)
            counts = self.op("ReduceSum", weights, axis, keepdims=0)
            floor = self.scalar("tiny_count", 1e-9)
            vectors = self.op("Div", summed, self.op("Max", counts, floor))
        norm = self.op("ReduceL2", vectors, axes=[1], keepdims=1)
        unit = self.op("Div", vectors, self.op("Max", norm, self.scalar("tiny_norm", 1e-12)))
        self.nodes.append(helper.make_node("Identity", [unit], [OUTPUT]))

    def model(self, dimension: int) -> onnx.ModelProto:
        """The checked model: :attr:`inputs` (int64, batch x tokens) in, :data:`OUTPUT` out."""
        ids = [
            helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "tokens"])
            for name in self.inputs
        ]
        out = helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", dimension])
        graph = helper.make_graph(self.nodes, "sentence_embedder", ids, [out], self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.producer_name = "ragbound"
        onnx.checker.check_model(model)
        return model
