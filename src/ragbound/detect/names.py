"""The online test's parameter defaults, descriptions and labels: plain constants.

``DetectorConfig`` (``detect.config``) declares its fields with these; the CLI reads them
for its option defaults and ``--help`` without loading pydantic or numpy.
"""

from __future__ import annotations

from ragbound.stats.names import STATISTICS

# The paper finds the best statistic differs by corpus; MSS won on its PubMed corpus and on
# ours (docs/online-test.md, "Choosing the statistic"), and it needs no neighbour beyond the
# first.
DEFAULT_STATISTIC = "mss"
# a score learned at calibration (ragbound.detect.combined), not a function of k similarities
COMBINED = "combined"
# calibrate only: pick the statistic, k and granularity by estimated power (detect.select)
AUTO = "auto"
# the answerability test's statistics (ragbound.detect.answerability)
COVERAGE = "coverage"
JUDGE = "judge"  # an LLM reads the question and the nearest chunks (ragbound.detect.judge)
ANSWERABILITY_STATISTICS: tuple[str, ...] = (COVERAGE, JUDGE)
# tau = "auto": the embedder's training temperature (detect.config.resolve_tau)
TAU_AUTO = "auto"

DEFAULT_K = 32
DEFAULT_TAU = 1.0
DEFAULT_ALPHA = 0.05
DEFAULT_P_VALUE_METHOD = "conformal"

DESCRIPTIONS: dict[str, str] = {
    "statistic": (
        f"Test statistic, higher = more out of knowledge: {', '.join(STATISTICS)}, or "
        f"{COMBINED} (a score learned at calibration from several of them)."
    ),
    "k": "Nearest chunks retrieved per query (the paper's k = 32).",
    "tau": (
        "Temperature of the energy statistic, in similarity units. The paper's 1.0 makes "
        "energy rank queries like avgknn on cosine similarities; a contrastive embedder's "
        "training temperature (0.05 for MiniLM) lets the nearest chunks dominate."
    ),
    "alpha": "Significance level in (0, 1): a query is out of knowledge when p <= alpha.",
    "p_value_method": (
        "conformal: (1 + #{null >= t}) / (n + 1), exactly valid; "
        "paper: eq. 2, #{null > t} / (n + 1), can be 0 and slightly anti-conservative."
    ),
    "reranker": (
        "Local cross-encoder folder: its relevance logits of the k retrieved chunks, "
        "sorted descending, replace their similarities in every statistic (k "
        "cross-encoder passes per query). None: the similarities."
    ),
}
"""Each DetectorConfig field's description (also the CLI's ``--help`` of its option)."""

APPROXIMATE = "p-values approximate: no real questions"
"""What every place that shows p-values says of a calibration made of synthetic questions."""
