"""Detectors: the online out-of-knowledge test and the Guard that serves it.

Names load from their submodule on first use, so importing a light submodule (say
``detect.names``, the defaults the CLI's help shows) does not import numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragbound._lazy import lazy_attributes

_SOURCES: dict[str, str] = {
    "DEFAULT_STATISTIC": "ragbound.detect.names",
    "BoundaryDetector": "ragbound.detect.boundary",
    "DEFAULTS": "ragbound.detect.config",
    "DetectorConfig": "ragbound.detect.config",
    "detector_config": "ragbound.detect.config",
    "Guard": "ragbound.detect.guard",
}

__all__ = [
    "DEFAULTS",
    "DEFAULT_STATISTIC",
    "BoundaryDetector",
    "DetectorConfig",
    "Guard",
    "detector_config",
]

if TYPE_CHECKING:
    from ragbound.detect.boundary import BoundaryDetector
    from ragbound.detect.config import DEFAULTS, DetectorConfig, detector_config
    from ragbound.detect.guard import Guard
    from ragbound.detect.names import DEFAULT_STATISTIC

__getattr__, __dir__ = lazy_attributes(__name__, _SOURCES, globals())
