"""ragbound: know what your RAG system does not know.

Calibrated out-of-knowledge p-values for single queries (a goodness-of-fit test on retrieval
similarities; higher statistic = more out-of-knowledge; out of knowledge when p <= alpha).

Importing the package does no I/O and loads no model; heavy parts load on first use.

Example:
    >>> from ragbound import Guard, KnowledgeBase  # doctest: +SKIP
    >>> kb = KnowledgeBase.build(["docs/"]); kb.save("kb/")  # doctest: +SKIP
    >>> guard = Guard.calibrate(kb, questions_the_docs_answer); guard.save()  # doctest: +SKIP
    >>> guard.check("Who won the 1998 world cup?").out_of_knowledge  # doctest: +SKIP
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragbound._lazy import lazy_attributes
from ragbound._version import __version__

_LAZY = {
    "KnowledgeBase": "ragbound.knowledge",
    "BoundaryDetector": "ragbound.detect.boundary",
    "Guard": "ragbound.detect.guard",
    "Gate": "ragbound.gate",
    "Decision": "ragbound.gate",
    "Calibration": "ragbound.detect.calibration",
    "Verdict": "ragbound.results",
    "EvaluationReport": "ragbound.results",
    "evaluate": "ragbound.detect.evaluate",
}

__all__ = [
    "BoundaryDetector",
    "Calibration",
    "Decision",
    "EvaluationReport",
    "Gate",
    "Guard",
    "KnowledgeBase",
    "Verdict",
    "__version__",
    "evaluate",
]

if TYPE_CHECKING:
    from ragbound.detect.boundary import BoundaryDetector
    from ragbound.detect.calibration import Calibration
    from ragbound.detect.evaluate import evaluate
    from ragbound.detect.guard import Guard
    from ragbound.gate import Decision, Gate
    from ragbound.knowledge import KnowledgeBase
    from ragbound.results import EvaluationReport, Verdict


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
