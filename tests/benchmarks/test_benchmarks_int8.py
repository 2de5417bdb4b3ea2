"""The int8 benchmark's verdict: offered only within both tolerances on every corpus."""

from __future__ import annotations

from benchmarks import int8


def _rows(*pairs: tuple[float, float, float, float]) -> dict[str, dict[str, dict]]:
    """Corpus i -> fp32 and int8 measures from (fp32 AUROC, int8 AUROC, fp32 FPR, int8 FPR)."""
    return {
        f"corpus {i}": {"fp32": {"auroc": a, "fpr": f}, "int8": {"auroc": b, "fpr": g}}
        for i, (a, b, f, g) in enumerate(pairs)
    }


def test_int8_is_offered_only_within_both_tolerances_everywhere():
    assert int8.offered(_rows((0.80, 0.796, 0.05, 0.058), (0.70, 0.71, 0.04, 0.031)))
    assert not int8.offered(_rows((0.80, 0.794, 0.05, 0.05), (0.70, 0.71, 0.04, 0.04)))
    assert not int8.offered(_rows((0.80, 0.80, 0.05, 0.062), (0.70, 0.71, 0.04, 0.04)))
    assert not int8.offered(_rows((0.80, 0.80, 0.05, 0.038)))  # fewer false positives count
    assert not int8.offered({})
    rows = _rows((0.80, 0.79, 0.05, 0.05), (0.70, 0.70, 0.04, 0.06))
    assert int8.failures(rows) == ["corpus 0 (AUROC loss +0.0100)", "corpus 1 (FPR +0.0200)"]


def test_worst_loss_names_the_corpus_int8_loses_most_on():
    rows = _rows((0.80, 0.79, 0.05, 0.05), (0.70, 0.68, 0.04, 0.04), (0.9, 0.95, 0.05, 0.05))
    corpus, loss = int8.worst_loss(rows)
    assert corpus == "corpus 1" and abs(loss - 0.02) < 1e-12
