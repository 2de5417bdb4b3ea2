"""Deprecated: this module is :mod:`ragbound.knowledge.tripwire_flags` now (removed in the
next release)."""

from __future__ import annotations

from ragbound._lazy import warn_deprecated
from ragbound.knowledge.tripwire_flags import TRIPWIRE_FLAG, StoredRecords, is_tripwire

__all__ = ["TRIPWIRE_FLAG", "StoredRecords", "is_tripwire"]
warn_deprecated(__name__, "ragbound.knowledge.tripwire_flags", stacklevel=2)
