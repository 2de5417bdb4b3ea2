"""Detectors: the online out-of-knowledge test and the Guard that serves it.

Names load from their submodule on first use, so importing a light submodule (say
``detect.names``, the defaults the CLI's help shows) does not import numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragbound._lazy import lazy_attributes

_SOURCES: dict[str, str] = {
    "DEFAULT_K": "ragbound.detect.boundary",
    "DEFAULT_STATISTIC": "ragbound.detect.boundary",
    "BoundaryDetector": "ragbound.detect.boundary",
    "ScoredQueries": "ragbound.detect.boundary",
    "Calibration": "ragbound.detect.calibration",
    "DEFAULTS": "ragbound.detect.config",
    "DetectorConfig": "ragbound.detect.config",
    "detector_config": "ragbound.detect.config",
    "Guard": "ragbound.detect.guard",
}

__all__ = [
    "DEFAULTS",
    "DEFAULT_K",
    "DEFAULT_STATISTIC",
    "BoundaryDetector",
    "Calibration",
    "DetectorConfig",
    "Guard",
    "ScoredQueries",
    "detector_config",
]

if TYPE_CHECKING:
    from ragbound.detect.boundary import (
        DEFAULT_K,
        DEFAULT_STATISTIC,
        BoundaryDetector,
        ScoredQueries,
    )
    from ragbound.detect.calibration import Calibration
    from ragbound.detect.config import DEFAULTS, DetectorConfig, detector_config
    from ragbound.detect.guard import Guard

__getattr__, __dir__ = lazy_attributes(__name__, _SOURCES, globals())
