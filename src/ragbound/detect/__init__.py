"""Detectors: the online out-of-knowledge test and the Guard that serves it."""

from ragbound.detect.boundary import DEFAULT_K, DEFAULT_STATISTIC, BoundaryDetector, ScoredQueries
from ragbound.detect.calibration import Calibration
from ragbound.detect.config import DEFAULTS, DetectorConfig, detector_config
from ragbound.detect.guard import Guard

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
