"""The shift-rate experiment renamed (``rejection.json`` -> ``shift_rates.json``,
``rejection_rate`` -> ``shifted_rate``, ``rejection_curves`` -> ``shift_curves``): a run folder
of an older release still reads, and the old plot name warns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbound.report import plots
from ragbound.report.run import OLD_SHIFT_RATES, SHIFT_RATES, load_run

OLD = {
    "trials": 2,
    "size": 4,
    "alpha": 0.05,
    "ratios": [0.0, 1.0],
    "mss": {
        "toy": {
            "rows": [{"ratio": 0.0, "rejection_rate": 1.0}, {"ratio": 1.0, "rejection_rate": 0.0}]
        }
    },
}


def test_an_old_rejection_json_is_read_as_shift_rates(tmp_path: Path) -> None:
    (tmp_path / OLD_SHIFT_RATES).write_text(json.dumps(OLD), encoding="utf-8")
    run = load_run(tmp_path)
    assert run.shift_rates is not None
    assert [row["shifted_rate"] for row in run.shift_rates["mss"]["toy"]["rows"]] == [1.0, 0.0]


def test_the_new_file_wins_over_the_old(tmp_path: Path) -> None:
    (tmp_path / OLD_SHIFT_RATES).write_text(json.dumps(OLD), encoding="utf-8")
    new = {**OLD, "trials": 9, "mss": {"toy": {"rows": [{"ratio": 0.0, "shifted_rate": 0.5}]}}}
    (tmp_path / SHIFT_RATES).write_text(json.dumps(new), encoding="utf-8")
    assert load_run(tmp_path).shift_rates["trials"] == 9  # type: ignore[index]


def test_rejection_curves_is_shift_curves() -> None:
    with pytest.warns(DeprecationWarning, match="rejection_curves is deprecated, use shift_curves"):
        assert plots.rejection_curves is plots.shift_curves
