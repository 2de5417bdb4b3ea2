"""Pure numeric core: test statistics, empirical nulls and p-values, detection metrics.

No I/O and no imports from the rest of ragbound. Every statistic is oriented so that
higher = more out-of-knowledge; similarities are higher = closer, rows sorted descending.
"""

from __future__ import annotations

from ragbound.stats.agreement import (
    accuracy,
    cohen_kappa,
    confusion_matrix,
    fleiss_kappa,
    rating_counts,
)
from ragbound.stats.diversity import (
    GreedySelection,
    as_similarity_matrix,
    greedy_min_distance,
    range_cutoff,
    uniqueness_scores,
)
from ragbound.stats.metrics import (
    OperatingPoint,
    auprc,
    auroc,
    balanced_runs,
    rates_at_threshold,
    threshold_at_fpr,
    tpr_at_fpr,
    wilson_interval,
)
from ragbound.stats.null import (
    P_VALUE_METHODS,
    EmpiricalNull,
    NeighbourNull,
    PValueMethod,
    leave_one_out_p_values,
    meta_null_scores,
    meta_scores,
    per_neighbour_p_values,
)
from ragbound.stats.rates import bootstrap_interval
from ragbound.stats.shift import (
    KSResult,
    MMDResult,
    alpha_spending,
    bonferroni_alpha,
    ks_critical_value,
    ks_two_sample,
    median_bandwidth,
    mmd_permutation_test,
)
from ragbound.stats.statistics import (
    META,
    STATISTICS,
    UNIVARIATE,
    avgknn,
    combine_p_values,
    energy,
    entropy,
    fisher,
    knn,
    mss,
    simes,
    univariate_scores,
)
from ragbound.stats.tripwire import (
    RejectionRates,
    TripwireFeatures,
    condition_matrix,
    merge_top_k,
    rejection_rates,
    rule_decisions,
    tripwire_features,
)

__all__ = [
    "META",
    "P_VALUE_METHODS",
    "STATISTICS",
    "UNIVARIATE",
    "EmpiricalNull",
    "GreedySelection",
    "KSResult",
    "MMDResult",
    "NeighbourNull",
    "OperatingPoint",
    "PValueMethod",
    "RejectionRates",
    "TripwireFeatures",
    "accuracy",
    "alpha_spending",
    "as_similarity_matrix",
    "auprc",
    "auroc",
    "avgknn",
    "balanced_runs",
    "bonferroni_alpha",
    "bootstrap_interval",
    "cohen_kappa",
    "combine_p_values",
    "condition_matrix",
    "confusion_matrix",
    "energy",
    "entropy",
    "fisher",
    "fleiss_kappa",
    "greedy_min_distance",
    "knn",
    "ks_critical_value",
    "ks_two_sample",
    "leave_one_out_p_values",
    "median_bandwidth",
    "merge_top_k",
    "meta_null_scores",
    "meta_scores",
    "mmd_permutation_test",
    "mss",
    "per_neighbour_p_values",
    "range_cutoff",
    "rates_at_threshold",
    "rating_counts",
    "rejection_rates",
    "rule_decisions",
    "simes",
    "threshold_at_fpr",
    "tpr_at_fpr",
    "tripwire_features",
    "uniqueness_scores",
    "univariate_scores",
    "wilson_interval",
]
