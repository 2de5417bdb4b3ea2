"""Detectors: the online out-of-knowledge test and the Guard that serves it."""

from ragbound.detect.boundary import DEFAULT_K, DEFAULT_STATISTIC, BoundaryDetector
from ragbound.detect.calibration import Calibration
from ragbound.detect.guard import Guard

__all__ = ["DEFAULT_K", "DEFAULT_STATISTIC", "BoundaryDetector", "Calibration", "Guard"]
