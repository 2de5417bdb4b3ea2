import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragbound.stats import EmpiricalNull, auroc
from ragbound.stats.combined import (
    FEATURE_TAU,
    LinearScore,
    _LogisticProblem,
    _monotone_logistic,
    bm25_idf,
    cross_fitted_scores,
    document_gap,
    similarity_features,
    stack_features,
    weighted_overlap,
)


def test_similarity_features_by_hand():
    f = similarity_features("g", [[0.8, 0.6, 0.4, 0.2, 0.0, 0.0]])
    assert set(f) == {"g.top1", "g.mean4", "g.mean6", "g.entropy", "g.energy"}
    assert f["g.top1"][0] == pytest.approx(0.8)
    assert f["g.mean4"][0] == pytest.approx(0.5)
    assert f["g.mean6"][0] == pytest.approx(2.0 / 6)
    weights = np.exp([0.8, 0.6, 0.4, 0.2, 0.0, 0.0])
    p = weights / weights.sum()
    assert f["g.entropy"][0] == pytest.approx(float((p * np.log(p)).sum()))
    tau = FEATURE_TAU
    energy = tau * math.log(sum(math.exp(s / tau) for s in (0.8, 0.6, 0.4, 0.2, 0.0, 0.0)))
    assert f["g.energy"][0] == pytest.approx(energy)


def test_a_constant_row_has_entropy_log_k_and_a_narrow_row_no_mean4():
    f = similarity_features("c", [[0.5, 0.5, 0.5]])
    assert set(f) == {"c.top1", "c.mean3", "c.entropy", "c.energy"}
    assert f["c.entropy"][0] == pytest.approx(-math.log(3))


def test_bm25_idf_by_hand_and_its_checks():
    # n = 10: df 0 -> log(1 + 10.5 / 0.5) = log 22; df 5 -> log(1 + 5.5 / 5.5) = log 2
    np.testing.assert_allclose(
        bm25_idf([0, 5, 10], 10), [math.log(22), math.log(2), math.log(1 + 0.5 / 10.5)]
    )
    assert np.all(np.diff(bm25_idf(np.arange(11), 10)) < 0)  # rarer weighs more
    for bad in ([-1], [11]):
        with pytest.raises(ValueError, match="document frequencies"):
            bm25_idf(bad, 10)
    with pytest.raises(ValueError, match="n_documents"):
        bm25_idf([0], 0)


def _set_overlap(weights: dict[int, float], total: float, groups: list[set[int]]) -> float:
    """The overlap as sets define it: the reference the vectorised one must match."""
    best = max((sum(weights[w] for w in g if w in weights) for g in groups), default=0.0)
    return best / total if total > 0 else 0.0


def _overlap_of(weights: dict[int, float], total: float, groups: list[set[int]]) -> float:
    ids = sorted(weights)
    flat = [w for g in groups for w in sorted(g)]
    of = [i for i, g in enumerate(groups) for _ in g]
    return weighted_overlap(ids, [weights[i] for i in ids], total, flat, of, len(groups))


def test_weighted_overlap_by_hand():
    weights = {7: 3.0, 2: 1.0}  # 7 a rare word (pantograph), 2 a common one (train)
    # the rare word alone outweighs the common one alone
    assert _overlap_of(weights, 4.0, [{2, 5}]) == 0.25
    assert _overlap_of(weights, 4.0, [{2}, {7, 9}]) == 0.75
    assert _overlap_of(weights, 4.0, [{2, 7}]) == 1.0
    assert _overlap_of(weights, 5.0, [{2, 7}]) == 0.8  # a query word no group can hold
    assert _overlap_of(weights, 4.0, []) == 0.0
    assert _overlap_of({}, 0.0, [{2}]) == 0.0
    assert _overlap_of({}, 1.5, [{2}]) == 0.0  # only words without an id


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.integers(0, 30), st.floats(0.01, 10.0), max_size=8),
    st.lists(st.sets(st.integers(0, 30), max_size=10), max_size=8),
    st.floats(0.0, 5.0),
)
def test_weighted_overlap_matches_the_set_definition(
    weights: dict[int, float], groups: list[set[int]], unseen: float
):
    total = sum(weights.values()) + unseen
    expected = _set_overlap(weights, total, groups)
    assert _overlap_of(weights, total, groups) == pytest.approx(expected, abs=1e-12)


def test_document_gap_by_hand():
    sims = [[0.9, 0.85, 0.4], [0.6, 0.5, 0.45], [0.8, 0.7, 0.3]]
    docs = [[7, 7, 2], [1, 2, 2], [4, 4, 4]]
    # row 0: doc 7 leads, the next document's best is 0.4; row 1: two documents tie closely;
    # row 2: one document fills the row, its last similarity stands in for another's
    np.testing.assert_allclose(document_gap(sims, docs), [0.5, 0.1, 0.5])
    with pytest.raises(ValueError, match="shaped like sims"):
        document_gap(sims, [[1, 2]])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-1, 1), min_size=2, max_size=8),
    st.lists(st.integers(0, 3), min_size=8, max_size=8),
)
def test_document_gap_lies_between_zero_and_the_row_range(values: list[float], codes: list[int]):
    row = np.sort(np.asarray(values))[::-1][None, :]
    docs = np.asarray(codes[: row.shape[1]])[None, :]
    gap = document_gap(row, docs)[0]
    assert -1e-12 <= gap <= row[0, 0] - row[0, -1] + 1e-12
    if len(set(docs[0].tolist())) == row.shape[1]:  # every entry its own document
        assert gap == pytest.approx(row[0, 0] - row[0, 1])


def test_stack_features_orders_columns_and_names_what_is_missing():
    f = {"a": np.array([1.0, 2.0]), "b": np.array([3.0, 4.0])}
    assert stack_features(f, ("b", "a")).tolist() == [[3.0, 1.0], [4.0, 2.0]]
    with pytest.raises(ValueError, match="missing: c"):
        stack_features(f, ("a", "c"))


def test_linear_score_by_hand_and_its_checks():
    score = LinearScore(("a", "b"), (1.0, 0.0), (2.0, 4.0), (1.0, -2.0), 0.25)
    # (3 - 1) / 2 * 1 + (8 - 0) / 4 * -2 + 0.25
    assert score.score([[3.0, 8.0]]).tolist() == [1.0 - 4.0 + 0.25]
    with pytest.raises(ValueError, match="one entry per feature"):
        LinearScore(("a",), (1.0, 2.0), (1.0,), (1.0,), 0.0)
    with pytest.raises(ValueError, match="scale"):
        LinearScore(("a",), (0.0,), (0.0,), (1.0,), 0.0)
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        score.score([[1.0]])


def test_fit_scores_the_outside_cloud_higher_and_is_plain_numbers():
    rng = np.random.default_rng(0)
    inside = rng.normal(0.0, 1.0, size=(200, 3))
    outside = rng.normal(0.0, 1.0, size=(200, 3)) - np.array([1.5, 0.0, 0.0])
    model = LinearScore.fit(("near", "noise", "constant"), inside, outside)
    assert auroc(model.score(inside), model.score(outside)) > 0.8
    assert model.coef[0] < 0  # lower "near" = more out of knowledge
    assert all(type(v) is float for v in (*model.mean, *model.scale, *model.coef))


def test_a_constant_feature_gets_unit_scale():
    inside = np.column_stack([np.linspace(0, 1, 20), np.ones(20)])
    outside = np.column_stack([np.linspace(-1, 0, 20), np.ones(20)])
    model = LinearScore.fit(("x", "one"), inside, outside)
    assert model.scale[1] == 1.0 and np.isfinite(model.score(inside)).all()


def test_cross_fitting_does_not_score_rows_with_a_model_that_saw_them():
    # pure noise with many features: a model scoring its own training rows separates them,
    # out-of-fold scores do not
    rng = np.random.default_rng(3)
    names = tuple(f"f{i}" for i in range(40))
    inside, outside = rng.normal(size=(60, 40)), rng.normal(size=(60, 40))
    own = LinearScore.fit(names, inside, outside, c=100.0)
    assert auroc(own.score(inside), own.score(outside)) > 0.75
    queries = np.arange(60)
    s_in, s_out = cross_fitted_scores(names, inside, outside, queries, queries, seed=1)
    assert auroc(s_in, s_out) < 0.65


def _conformal_rejection_rate(seed: int, alpha: float, reps: int) -> float:
    """Share of in-knowledge test queries rejected by a learned score with a conformal null.

    The score is learned once on a learning part (in-knowledge rows against shifted
    out-of-knowledge rows): the guarantee holds given the learning part. Each repetition then
    draws a fresh conformal part and one test query, exchangeable in-knowledge rows, and
    takes the null from the conformal part only.
    """
    rng = np.random.default_rng(seed)
    names = ("a", "b", "c")
    model = LinearScore.fit(names, rng.normal(size=(30, 3)), rng.normal(size=(30, 3)) - 1.0)
    rejected = 0
    for _ in range(reps):
        null = EmpiricalNull(model.score(rng.normal(size=(40, 3))))
        p = null.p_values(model.score(rng.normal(size=(1, 3))))
        rejected += int(p[0] <= alpha)
    return rejected / reps


# derandomized, as the other Monte Carlo bounds here: fresh seeds on every run made a 3-sigma
# bound fail now and then (seed 6663: 0.2245 over its first 2000 draws, 0.1964 over 20000)
@settings(max_examples=10, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), alpha=st.sampled_from([0.05, 0.1, 0.2]))
def test_learned_score_with_conformal_null_is_super_uniform(seed: int, alpha: float):
    reps = 2000
    rate = _conformal_rejection_rate(seed, alpha, reps)
    exact = math.floor(alpha * 41) / 41  # P(p <= alpha) with 40 conformal scores
    assert exact <= alpha
    assert rate <= exact + 4 * math.sqrt(exact * (1 - exact) / reps)


def test_weights_are_never_positive_and_match_sklearn_when_the_bound_is_idle():
    linear_model = pytest.importorskip("sklearn.linear_model")

    rng = np.random.default_rng(7)
    inside = rng.normal(0.0, 1.0, size=(300, 2))
    outside = rng.normal(0.0, 1.0, size=(300, 2)) - np.array([1.0, 0.5])
    model = LinearScore.fit(("a", "b"), inside, outside)
    x = np.concatenate([inside, outside])
    z = (x - np.array(model.mean)) / np.array(model.scale)
    y = np.r_[np.zeros(300), np.ones(300)]
    free = linear_model.LogisticRegression(C=1.0).fit(z, y)
    assert (free.coef_ < 0).all()  # the bound is not active here
    np.testing.assert_allclose(model.coef, free.coef_[0], atol=1e-3)
    assert model.intercept == pytest.approx(free.intercept_[0], abs=1e-3)
    # a feature whose higher values mean *farther* gets weight 0, not a positive one
    flipped = LinearScore.fit(("a", "b"), -inside, -outside)
    assert all(c <= 0 for c in flipped.coef) and max(flipped.coef) == 0.0


def _logistic_problem(seed: int, width: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    inside = rng.normal(size=(rows, width))
    outside = rng.normal(size=(rows, width)) + rng.normal(size=width) * rng.choice([0.3, 1.0, 3.0])
    x = np.concatenate([inside, outside])
    return (x - x.mean(axis=0)) / x.std(axis=0), np.r_[np.zeros(rows), np.ones(rows)]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    width=st.integers(1, 8),
    rows=st.integers(5, 200),
    c=st.sampled_from([0.01, 1.0, 100.0]),
)
def test_the_monotone_fit_meets_the_optimality_conditions(
    seed: int, width: int, rows: int, c: float
) -> None:
    # the problem is convex: a point is the optimum iff its projected gradient is 0, i.e.
    # every weight below 0 and the intercept have gradient 0, a weight at 0 gradient <= 0
    z, y = _logistic_problem(seed, width, rows)
    w, b = _monotone_logistic(z, y, c)
    assert (w <= 0).all()
    gradient, _ = _LogisticProblem.of(z, y, c).derivatives(np.append(w, b))
    scale = len(z)  # the loss sums over rows
    held = w == 0.0
    assert np.abs(gradient[:width][~held]).max(initial=0.0) <= 1e-8 * scale
    assert (gradient[:width][held] <= 1e-8 * scale).all()
    assert abs(gradient[width]) <= 1e-8 * scale


@pytest.mark.parametrize("seed", range(12))
def test_the_monotone_fit_reaches_scipys_optimum(seed: int) -> None:
    optimize = pytest.importorskip("scipy.optimize")
    rng = np.random.default_rng(seed)
    width, rows, c = (
        int(rng.integers(1, 10)),
        int(rng.integers(10, 400)),
        [0.01, 1.0, 100.0][seed % 3],
    )
    z, y = _logistic_problem(seed, width, rows)
    problem = _LogisticProblem.of(z, y, c)

    def loss(params):
        return problem.loss(params), problem.derivatives(params)[0]

    found = optimize.minimize(
        loss,
        np.zeros(width + 1),
        jac=True,
        method="L-BFGS-B",
        bounds=[(None, 0.0)] * width + [(None, None)],
        options={"ftol": 1e-16, "gtol": 1e-12, "maxiter": 10_000, "maxfun": 100_000},
    )
    w, b = _monotone_logistic(z, y, c)
    np.testing.assert_allclose(w, np.minimum(found.x[:width], 0.0), atol=1e-6)
    assert b == pytest.approx(found.x[width], abs=1e-6)
