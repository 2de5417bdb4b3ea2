"""Run the ragbound command in-process through its real entry point (main)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ragbound.cli import main


def run(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["ragbound", *args])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


def write_log(path: Path, queries: list[str]) -> Path:
    """A query log at ``path``: one JSON line per query, in time order, 8 a day from
    2026-11-01 (up to 72 queries)."""
    assert len(queries) <= 72, "the day would take two digits"
    lines = [
        {"time": f"2026-11-0{1 + i // 8}T10:{i % 60:02d}:00Z", "query": q}
        for i, q in enumerate(queries)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path
