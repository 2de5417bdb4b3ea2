"""Do the calibration queries look like real user questions, to the detector?

The p-values are valid when real in-knowledge questions score like the calibration queries.
The check compares the detector's own scores of both (:func:`ragbound.stats.calibration_mismatch`):
KS, and an exceedance test of how many real questions reach the calibrated critical value,
which catches calibration queries that sit closer to the corpus than real ones (the failure
that raises false alarms). Scores rather than embeddings, because the scores are all the
calibration uses (docs/online-test.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ragbound.corpus import load_query_records
from ragbound.corpus.provenance import SYNTH_FIELDS
from ragbound.detect import Guard
from ragbound.detect.shift import reference_scores
from ragbound.results import SyntheticCheck
from ragbound.stats import bonferroni_alpha, calibration_mismatch

# The check's level: each of its two tests runs at half of it (stated in every warning).
CHECK_LEVEL = 0.05
# With 20 real questions the check missed MSS calibrated on synthetic questions (29% false
# positives) on 9% of draws, and the one set of 20 a user would pass slipped through; with 50
# it never did (near-synth benchmark, two splits, docs/benchmarks.md).
CONFIDENT_REAL = 50
SYNTHETIC_UNCHECKED = (
    "note: these calibration queries come from `ragbound synth`; add --real-queries FILE (a "
    "few dozen real user questions) to check that they score like real ones"
)


def synthetic_provenance(path: Path, field: str | None = None) -> dict[str, list[str]] | None:
    """The prompt ids and contexts of a query file written by ``ragbound synth``, or None when
    its records do not all carry synth's provenance fields (real questions)."""
    prompts: set[str] = set()
    contexts: set[str] = set()
    for record, _ in load_query_records(path, field=field):
        data = record.data
        if not isinstance(data, dict) or not all(name in data for name in SYNTH_FIELDS):
            return None
        prompts.add(f"{data['prompt_id']}@{data['prompt_version']}")
        contexts.add(str(data.get("context") or "unrecorded"))
    return {"prompt_ids": sorted(prompts), "contexts": sorted(contexts)}


def compare_with_real(
    guard: Guard,
    real_queries: Sequence[str],
    *,
    real_source: str = "",
    provenance: dict[str, list[str]] | None = None,
    level: float = CHECK_LEVEL,
    progress: bool = False,
) -> SyntheticCheck:
    """The calibration queries' scores against ``real_queries``' scores (the guard's default
    statistic): KS and the exceedance test at the calibrated critical value, with the medians
    and the real questions' false-positive rate there."""
    real = guard.score(real_queries, progress=progress)  # the reranker's or combined, if any
    reference = reference_scores(guard)
    mismatch = calibration_mismatch(reference, real.scores, real.critical_value, level)
    ks, exceedance = mismatch.ks, mismatch.exceedance
    return SyntheticCheck(
        synthetic=provenance is not None,
        real_source=real_source,
        n_calibration=ks.n_reference,
        n_real=ks.n_test,
        score_statistic=real.statistic,
        ks_statistic=ks.statistic,
        p_value=ks.p_value,
        level=level,
        differ=mismatch.differ,
        median_calibration=float(np.median(reference)),
        median_real=float(np.median(real.scores)),
        alpha=real.alpha,
        critical_value=real.critical_value,
        real_fpr=exceedance.n_exceed / exceedance.n_test,
        exceedance_p_value=exceedance.p_value,
        expected_fpr=exceedance.expected_rate,
        **(provenance or {}),
    )


def check_warning(check: SyntheticCheck) -> str | None:
    """A warning for users when the two sets differ at ``check.level``, else None."""
    if not check.differ:
        return None
    which = "synthetic calibration queries" if check.synthetic else "calibration queries"
    each = bonferroni_alpha(check.level, 2)  # as calibration_mismatch ran each test
    too_many = check.exceedance_p_value <= each
    closer = check.median_real < check.median_calibration
    if too_many:
        effect = (
            "more real in-knowledge questions are flagged than alpha allows (the calibration "
            "queries sit closer to the corpus than real ones)"
        )
    elif closer:
        effect = (
            "real questions sit closer to the corpus, so fewer are flagged than alpha allows "
            "and out-of-knowledge questions slip through"
        )
    else:
        effect = "real questions sit farther from the corpus, so more are flagged than alpha allows"
    return (
        f"the {which} differ from the real questions in {check.real_source or 'the real file'} "
        f"({describe_check(check)}): {effect}. Calibrate on real questions, "
        "or regenerate with `ragbound synth --examples REAL_FILE`."
    )


def describe_check(check: SyntheticCheck) -> str:
    """The check's two tests and medians in one line, for warnings and notices."""
    return (
        f"KS D={check.ks_statistic:.3f}, p={check.p_value:.2g}; {check.real_fpr:.1%} of the "
        f"real questions reach the critical value at alpha={check.alpha:g}, at most "
        f"{check.expected_fpr:.1%} expected, p={check.exceedance_p_value:.2g}; each test at "
        f"level {bonferroni_alpha(check.level, 2):g}; median {check.score_statistic} "
        f"{check.median_calibration:.4f} vs real {check.median_real:.4f}"
    )


def record_check(guard: Guard, check: SyntheticCheck) -> None:
    """Keep ``check`` in the guard's calibration manifest (saved with it)."""
    calibration = guard.calibration
    calibration.manifest = calibration.manifest.model_copy(update={"synthetic_check": check})


def check_against_real(
    guard: Guard,
    calibration_file: Path,
    real_queries: Sequence[str] | None,
    *,
    field: str | None = None,
    real_source: str = "",
    progress: bool = False,
) -> tuple[SyntheticCheck | None, str | None]:
    """The check of a calibration made of ``calibration_file``'s questions (read with
    ``field``) against ``real_queries``, kept in the guard's manifest, and one line to tell the
    user: the warning when they differ, else that they do not (and how weak a silence on few
    real questions is). Without real questions: no check, and a reminder that it exists when
    the calibration questions come from ``ragbound synth`` (None: nothing to say)."""
    provenance = synthetic_provenance(calibration_file, field)
    if real_queries is None:
        return None, None if provenance is None else SYNTHETIC_UNCHECKED
    check = compare_with_real(
        guard, real_queries, real_source=real_source, provenance=provenance, progress=progress
    )
    record_check(guard, check)
    warning = check_warning(check)
    if warning is not None:
        return check, f"warning: {warning}"
    return check, (
        f"real-question check: no difference at level {check.level:g} "
        f"({describe_check(check)}){weak_silence(check.n_real)}"
    )


def weak_silence(n_real: int) -> str:
    """A reminder that a silent check on few real questions proves little ('' from
    :data:`CONFIDENT_REAL` questions on)."""
    if n_real >= CONFIDENT_REAL:
        return ""
    return (
        f"; with {n_real} real questions a silence is weak evidence: give {CONFIDENT_REAL} or more"
    )
