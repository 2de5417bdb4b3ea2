"""The origins a calibration question can have: plain constants, light to import.

``corpus.provenance`` reads origins from query files; the CLI's ``--questions`` choices read
these without loading the query loader (numpy).
"""

from __future__ import annotations

from typing import Literal, get_args

QuestionOrigin = Literal["real", "synthetic", "unknown"]
"""Where one question came from."""
DeclaredOrigin = Literal["real", "synthetic"]
"""What a user may declare for every question of a calibration (``--questions``)."""
DECLARED_ORIGINS: tuple[str, ...] = get_args(DeclaredOrigin)
