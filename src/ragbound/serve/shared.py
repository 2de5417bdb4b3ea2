"""What the processes of one service (``ragbound serve --workers N``) show each other: each
publishes a JSON file in a folder they share (replaced whole, so a reader never sees half of
one), and whichever worker answers ``/metrics`` or ``/v1/stats`` adds them up.

Published by every worker: ``metrics`` (its :meth:`Registry.snapshot`) and ``stats`` (its
dashboard data); by the supervisor (name ``monitor``): the shift monitor's metrics and recent
windows, since it alone reads the shared log.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

MONITOR = "monitor"
PUBLISH_EVERY_S = 0.5


def publish(folder: Path, name: str, payload: dict) -> None:
    """Replace ``name``'s file in ``folder`` with ``payload`` (atomic rename)."""
    target = folder / f"{name}.json"
    temporary = folder / f".{name}.{os.getpid()}.tmp"
    temporary.write_text(json.dumps(payload), encoding="utf-8")
    os.replace(temporary, target)


def published(folder: Path) -> dict[str, dict]:
    """Every process's last publication, by name (a file being replaced is read whole or
    not at all; one that vanished with its process is skipped)."""
    found: dict[str, dict] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            found[path.stem] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
    return found
