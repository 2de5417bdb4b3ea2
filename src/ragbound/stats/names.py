"""Names of the test statistics and p-value methods: plain constants, light to import.

The numeric modules (``stats.statistics``, ``stats.null``) import them from here; the CLI
reads them for its option choices and ``--help`` without loading numpy.
"""

from __future__ import annotations

from typing import Literal

UNIVARIATE: tuple[str, ...] = ("mss", "knn", "avgknn", "entropy", "energy")
META: tuple[str, ...] = ("fisher", "simes")
STATISTICS: tuple[str, ...] = UNIVARIATE + META

PValueMethod = Literal["conformal", "paper"]
P_VALUE_METHODS: tuple[str, ...] = ("conformal", "paper")
