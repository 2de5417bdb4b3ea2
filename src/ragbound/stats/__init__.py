"""Pure numeric core: test statistics, empirical nulls and p-values, detection metrics.

No I/O and no imports from the rest of ragbound. Every statistic is oriented so that
higher = more out-of-knowledge; similarities are higher = closer, rows sorted descending.

Names load from their submodule on first use, so importing one constant (say
``STATISTICS``) does not import the numeric modules and numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragbound._lazy import lazy_attributes

_SOURCES: dict[str, str] = {
    "accuracy": "ragbound.stats.agreement",
    "cohen_kappa": "ragbound.stats.agreement",
    "confusion_matrix": "ragbound.stats.agreement",
    "fleiss_kappa": "ragbound.stats.agreement",
    "rating_counts": "ragbound.stats.agreement",
    "as_similarity_matrix": "ragbound.stats.diversity",
    "greedy_min_distance": "ragbound.stats.diversity",
    "range_cutoff": "ragbound.stats.diversity",
    "uniqueness_scores": "ragbound.stats.diversity",
    "auprc": "ragbound.stats.metrics",
    "auroc": "ragbound.stats.metrics",
    "auroc_standard_error": "ragbound.stats.metrics",
    "balanced_runs": "ragbound.stats.metrics",
    "rates_at_threshold": "ragbound.stats.metrics",
    "threshold_at_fpr": "ragbound.stats.metrics",
    "tpr_at_fpr": "ragbound.stats.metrics",
    "wilson_interval": "ragbound.stats.metrics",
    "EmpiricalNull": "ragbound.stats.null",
    "NeighbourNull": "ragbound.stats.null",
    "PValueMethod": "ragbound.stats.names",
    "leave_one_out_p_values": "ragbound.stats.null",
    "meta_null_scores": "ragbound.stats.null",
    "meta_scores": "ragbound.stats.null",
    "per_neighbour_p_values": "ragbound.stats.null",
    "bootstrap_interval": "ragbound.stats.rates",
    "exceedance_test": "ragbound.stats.shift",
    "bonferroni_alpha": "ragbound.stats.shift",
    "calibration_mismatch": "ragbound.stats.shift",
    "ks_critical_value": "ragbound.stats.shift",
    "ks_two_sample": "ragbound.stats.shift",
    "mmd_permutation_test": "ragbound.stats.shift",
    "alpha_spending": "ragbound.stats.spending",
    "META": "ragbound.stats.names",
    "STATISTICS": "ragbound.stats.names",
    "UNIVARIATE": "ragbound.stats.names",
    "avgknn": "ragbound.stats.statistics",
    "combine_p_values": "ragbound.stats.statistics",
    "energy": "ragbound.stats.statistics",
    "entropy": "ragbound.stats.statistics",
    "fisher": "ragbound.stats.statistics",
    "knn": "ragbound.stats.statistics",
    "mss": "ragbound.stats.statistics",
    "simes": "ragbound.stats.statistics",
    "univariate_scores": "ragbound.stats.statistics",
    "TripwireRates": "ragbound.stats.tripwire",
    "merge_top_k": "ragbound.stats.tripwire",
    "tripwire_rates": "ragbound.stats.tripwire",
    "rule_decisions": "ragbound.stats.tripwire",
    "tripwire_features": "ragbound.stats.tripwire",
}

__all__ = [
    "META",
    "STATISTICS",
    "UNIVARIATE",
    "EmpiricalNull",
    "NeighbourNull",
    "PValueMethod",
    "TripwireRates",
    "accuracy",
    "alpha_spending",
    "as_similarity_matrix",
    "auprc",
    "auroc",
    "auroc_standard_error",
    "avgknn",
    "balanced_runs",
    "bonferroni_alpha",
    "bootstrap_interval",
    "calibration_mismatch",
    "cohen_kappa",
    "combine_p_values",
    "confusion_matrix",
    "energy",
    "entropy",
    "exceedance_test",
    "fisher",
    "fleiss_kappa",
    "greedy_min_distance",
    "knn",
    "ks_critical_value",
    "ks_two_sample",
    "leave_one_out_p_values",
    "merge_top_k",
    "meta_null_scores",
    "meta_scores",
    "mmd_permutation_test",
    "mss",
    "per_neighbour_p_values",
    "range_cutoff",
    "rates_at_threshold",
    "rating_counts",
    "rule_decisions",
    "simes",
    "threshold_at_fpr",
    "tpr_at_fpr",
    "tripwire_features",
    "tripwire_rates",
    "uniqueness_scores",
    "univariate_scores",
    "wilson_interval",
]

if TYPE_CHECKING:
    from ragbound.stats.agreement import (
        accuracy,
        cohen_kappa,
        confusion_matrix,
        fleiss_kappa,
        rating_counts,
    )
    from ragbound.stats.diversity import (
        as_similarity_matrix,
        greedy_min_distance,
        range_cutoff,
        uniqueness_scores,
    )
    from ragbound.stats.metrics import (
        auprc,
        auroc,
        auroc_standard_error,
        balanced_runs,
        rates_at_threshold,
        threshold_at_fpr,
        tpr_at_fpr,
        wilson_interval,
    )
    from ragbound.stats.names import META, STATISTICS, UNIVARIATE, PValueMethod
    from ragbound.stats.null import (
        EmpiricalNull,
        NeighbourNull,
        leave_one_out_p_values,
        meta_null_scores,
        meta_scores,
        per_neighbour_p_values,
    )
    from ragbound.stats.rates import bootstrap_interval
    from ragbound.stats.shift import (
        bonferroni_alpha,
        calibration_mismatch,
        exceedance_test,
        ks_critical_value,
        ks_two_sample,
        mmd_permutation_test,
    )
    from ragbound.stats.spending import alpha_spending
    from ragbound.stats.statistics import (
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
        TripwireRates,
        merge_top_k,
        rule_decisions,
        tripwire_features,
        tripwire_rates,
    )


__getattr__, __dir__ = lazy_attributes(__name__, _SOURCES, globals())
