"""Write the bundled models' reference vectors (src/ragbound/embedders/reference_minilm.json,
reference_mpnet.json): sentence-transformers' vectors of a few probe texts, which the
torch-free graph builders (:mod:`ragbound.embedders.bert_graph`,
:mod:`ragbound.embedders.mpnet_graph`) must reproduce. Run once per model, with torch
installed (and the mpnet extra for mpnet):

    PYTHONPATH=src python scripts/bundled_reference.py minilm mpnet
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import sentence_transformers
from sentence_transformers import SentenceTransformer

from ragbound.embedders.onnx_export import PROBE
from ragbound.embedders.packaged import minilm_path, mpnet_path
from ragbound.embedders.reference import REFERENCE_FILES, weights_digest

# the export's probe, and two more: a question with digits, and a single token of punctuation
TEXTS = [*PROBE, "Is 0.05 < 0.5? Yes; but 5e-3 is smaller still.", "?"]
MODELS = {"minilm": ("all-MiniLM-L6-v2", minilm_path), "mpnet": ("all-mpnet-base-v2", mpnet_path)}


def write_reference(embedder: str) -> None:
    model_name, locate = MODELS[embedder]
    folder = locate()
    model = SentenceTransformer(str(folder), device="cpu")
    vectors = model.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    reference = {
        "model": model_name,
        "weights_sha256": weights_digest(folder),
        "made_with": f"sentence-transformers {sentence_transformers.__version__}",
        "texts": TEXTS,
        "vectors": [[round(float(x), 7) for x in row] for row in vectors],
    }
    out = Path(__file__).parents[1] / "src" / "ragbound" / "embedders" / REFERENCE_FILES[embedder]
    out.write_text(json.dumps(reference, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(TEXTS)} vectors of {model_name} to {out}")


def main(names: list[str]) -> None:
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        raise SystemExit(f"unknown bundled model(s) {unknown}: choose from {sorted(MODELS)}")
    for name in names or list(MODELS):
        write_reference(name)


if __name__ == "__main__":
    main(sys.argv[1:])
