"""Write the bundled MiniLM's reference vectors (src/ragbound/embedders/reference_minilm.json):
sentence-transformers' vectors of a few probe texts, which the torch-free graph builder
(:mod:`ragbound.embedders.bert_graph`) must reproduce. Run once, with torch installed:

    PYTHONPATH=src python scripts/minilm_reference.py
"""

from __future__ import annotations

import json
from pathlib import Path

import sentence_transformers
from sentence_transformers import SentenceTransformer

from ragbound.embedders.onnx_export import PROBE
from ragbound.embedders.packaged import minilm_path
from ragbound.embedders.reference import REFERENCE_FILES, weights_digest

# the export's probe, and two more: a question with digits, and a single token of punctuation
TEXTS = [*PROBE, "Is 0.05 < 0.5? Yes; but 5e-3 is smaller still.", "?"]


def main() -> None:
    folder = minilm_path()
    model = SentenceTransformer(str(folder), device="cpu")
    vectors = model.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    reference = {
        "model": "all-MiniLM-L6-v2",
        "weights_sha256": weights_digest(folder),
        "made_with": f"sentence-transformers {sentence_transformers.__version__}",
        "texts": TEXTS,
        "vectors": [[round(float(x), 7) for x in row] for row in vectors],
    }
    out = Path(__file__).parents[1] / "src" / "ragbound" / "embedders" / REFERENCE_FILES[0]
    out.write_text(json.dumps(reference, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(TEXTS)} vectors to {out}")


if __name__ == "__main__":
    main()
