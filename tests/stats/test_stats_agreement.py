"""Tests for ragbound.stats.agreement: hand-computed kappas, Fleiss' table, kappa properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragbound.stats import accuracy, cohen_kappa, confusion_matrix, fleiss_kappa, rating_counts

# The worked example of Fleiss' kappa (10 items, 14 raters, 5 categories):
# P-bar = 0.378, P-e = 0.213, kappa = (0.378 - 0.213) / (1 - 0.213) = 0.210.
FLEISS_TABLE = [
    [0, 0, 0, 0, 14],
    [0, 2, 6, 4, 2],
    [0, 0, 3, 5, 6],
    [0, 3, 9, 2, 0],
    [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0],
    [3, 2, 6, 3, 0],
    [2, 5, 3, 2, 2],
    [6, 5, 2, 1, 0],
    [0, 2, 2, 3, 7],
]

labels = st.lists(st.sampled_from(["yes", "no", "maybe"]), min_size=1, max_size=30)


def test_confusion_matrix_rows_are_truth_columns_are_predictions() -> None:
    truth = ["yes", "yes", "no", "no", "no"]
    predicted = ["yes", "no", "no", "no", "yes"]
    matrix = confusion_matrix(truth, predicted, ["yes", "no"])
    assert matrix.tolist() == [[1, 1], [1, 2]]
    assert confusion_matrix(truth, predicted).tolist() == [[2, 1], [1, 1]]  # sorted: no, yes
    with pytest.raises(ValueError, match="'maybe' is not one of"):
        confusion_matrix(["maybe"], ["yes"], ["yes", "no"])
    with pytest.raises(ValueError, match="differ in length"):
        confusion_matrix(["yes"], [])


def test_accuracy_by_hand() -> None:
    assert accuracy(["a", "b", "c", "a"], ["a", "b", "a", "b"]) == 0.5
    with pytest.raises(ValueError, match="empty"):
        accuracy([], [])


def test_cohen_kappa_from_a_two_by_two_by_hand() -> None:
    # rater A yes/no vs rater B: yes-yes 20, yes-no 5, no-yes 10, no-no 15 (50 items)
    a = ["yes"] * 25 + ["no"] * 25
    b = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    # observed = 35/50 = 0.7; A says yes 0.5, B says yes 0.6 -> expected = 0.5*0.6 + 0.5*0.4 = 0.5
    assert cohen_kappa(a, b) == pytest.approx((0.7 - 0.5) / (1 - 0.5))
    assert cohen_kappa(a, b, ["yes", "no"]) == pytest.approx(0.4)


def test_cohen_kappa_of_opposite_raters_is_minus_one() -> None:
    assert cohen_kappa(["yes", "no", "yes", "no"], ["no", "yes", "no", "yes"]) == -1.0


def test_one_shared_category_is_full_agreement() -> None:
    assert cohen_kappa(["no"] * 4, ["no"] * 4) == 1.0
    assert fleiss_kappa([[3, 0], [3, 0]]) == 1.0


def test_fleiss_kappa_of_the_worked_example() -> None:
    assert fleiss_kappa(FLEISS_TABLE) == pytest.approx(0.2099, abs=5e-4)


def test_fleiss_kappa_with_two_raters_matches_scotts_pi_by_hand() -> None:
    # items: (yes, yes), (yes, no), (no, no), (no, no): observed = 3/4;
    # shares: yes 3/8, no 5/8 -> expected = 9/64 + 25/64 = 34/64
    counts = rating_counts(
        [["yes", "yes"], ["yes", "no"], ["no", "no"], ["no", "no"]], ["yes", "no"]
    )
    assert counts.tolist() == [[2, 0], [1, 1], [0, 2], [0, 2]]
    assert fleiss_kappa(counts) == pytest.approx((0.75 - 34 / 64) / (1 - 34 / 64))


def test_fleiss_kappa_refuses_bad_tables() -> None:
    with pytest.raises(ValueError, match="same number"):
        fleiss_kappa([[2, 0], [1, 0]])
    with pytest.raises(ValueError, match=">= 2"):
        fleiss_kappa([[1, 0], [0, 1]])
    with pytest.raises(ValueError, match="whole numbers"):
        fleiss_kappa([[1.5, 0.5]])
    with pytest.raises(ValueError, match="not one of"):
        rating_counts([["yes", "perhaps"]], ["yes", "no"])


@given(labels)
@settings(max_examples=60, deadline=None)
def test_kappa_is_one_for_identical_labels(values: list[str]) -> None:
    assert cohen_kappa(values, values) == 1.0
    assert fleiss_kappa(rating_counts([[v, v, v] for v in values], ["yes", "no", "maybe"])) == 1.0


@given(st.data())
@settings(max_examples=80, deadline=None)
def test_cohen_kappa_is_symmetric_and_bounded(data: st.DataObject) -> None:
    a = data.draw(labels)
    b = data.draw(
        st.lists(st.sampled_from(["yes", "no", "maybe"]), min_size=len(a), max_size=len(a))
    )
    kappa = cohen_kappa(a, b)
    assert kappa == pytest.approx(cohen_kappa(b, a))
    assert -1.0 - 1e-12 <= kappa <= 1.0 + 1e-12
    matrix = confusion_matrix(a, b, ["yes", "no", "maybe"])
    assert matrix.sum() == len(a)
    assert np.trace(matrix) / len(a) == pytest.approx(accuracy(a, b))
