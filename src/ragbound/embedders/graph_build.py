"""Make a folder's ONNX graph from its weights without torch, where reference vectors allow
the check (:mod:`ragbound.embedders.reference`), and refuse one that does not reproduce them.

``onnx`` is imported only while a graph is built: the request path reads the cached graph."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from ragbound.embedders.layout import SentenceLayout
from ragbound.embedders.onnx_runner import OnnxRunner
from ragbound.embedders.reference import TOLERANCE, Reference, largest_difference, reference_for
from ragbound.errors import InputError

BUILT_BY = "weights"  # verified.json's built_by for a graph made here (else "torch")


def build_checked(model: Path, folder: Path, layout: SentenceLayout) -> dict | None:
    """Write ``folder``'s graph built from its weights to ``model`` and return the verdict of
    its check against the reference; None when no builder covers the folder (not a plain BERT
    or MPNet, or weights no reference was made for)."""
    builder = _builder(folder)
    reference = reference_for(folder) if builder is not None else None
    if builder is None or reference is None:
        return None
    import onnx

    build, config = builder
    onnx.save(build(folder, layout, config), str(model))
    return {**check_against(model, folder, layout, reference), "onnx": onnx.__version__}


def _builder(folder: Path) -> tuple[Callable, dict] | None:
    """The graph builder of ``folder``'s model type and its config, or None."""
    from ragbound.embedders.bert_graph import bert_config, build_bert_graph
    from ragbound.embedders.mpnet_graph import build_mpnet_graph, mpnet_config

    for read_config, build in ((bert_config, build_bert_graph), (mpnet_config, build_mpnet_graph)):
        config = read_config(folder)
        if config is not None:
            return build, config
    return None


def check_against(model: Path, folder: Path, layout: SentenceLayout, reference: Reference) -> dict:
    """The graph's vectors of the reference texts (one at a time, and all in one call, which
    pads) against the reference: the largest difference and the smallest cosine."""
    import onnxruntime

    runner = OnnxRunner(model, folder, layout)
    alone = np.vstack([runner.run([text]) for text in reference.texts])
    together = runner.run(reference.texts)
    cosines = np.sum(alone * reference.vectors, axis=1) / np.linalg.norm(reference.vectors, axis=1)
    return {
        "built_by": BUILT_BY,
        "largest_difference": max(
            largest_difference(alone, reference), largest_difference(together, reference)
        ),
        "tolerance": TOLERANCE,
        "min_cosine": float(np.min(cosines)),
        "probe_texts": len(reference.texts),
        "reference": f"{reference.file} ({reference.made_with})",
        "onnxruntime": onnxruntime.__version__,
    }


def refuse_built(verdict: dict, folder: Path) -> None:
    """Raise when ``verdict`` is of a graph built from the weights that is off its reference
    by more than :data:`~ragbound.embedders.reference.TOLERANCE`."""
    if verdict.get("built_by") != BUILT_BY or verdict["largest_difference"] <= TOLERANCE:
        return
    raise InputError(
        f"the ONNX graph built from the weights of {folder} does not reproduce "
        f"sentence-transformers (largest difference {verdict['largest_difference']:.2e} > "
        f"{TOLERANCE:g} over {verdict['probe_texts']} reference texts); "
        "use RAGBOUND_EMBED_RUNTIME=torch"
    )
