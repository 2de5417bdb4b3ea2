"""docs/benchmarks.md: the one file every benchmark writes its tables into, section by section.

Each benchmark part owns one section of the file, between ``<!-- bench:NAME -->`` and
``<!-- /bench:NAME -->``. ``write_section`` replaces that section in place, stamped with the
date and the machine it ran on, and leaves every other section and all text outside the
markers (hand-written commentary) alone, so a partial rerun updates only its own tables. A
section not yet in the file is appended; the file is created when absent.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

from benchmarks.datasets import REPO
from ragbound.artifacts import write_json, write_text

BENCH_DOC = REPO / "docs" / "benchmarks.md"
# the packages whose versions move the numbers (absent ones are left out of the stamp)
KEY_PACKAGES = (
    "ragbound",
    "numpy",
    "scipy",
    "torch",
    "sentence-transformers",
    "bm25s",
    "llama-cpp-python",
    "pyod",
)
HEADER = """# Benchmarks

Written by the benchmark code itself (`make bench`, `make bench-abstention`,
`python -m benchmarks.run PART`; `--list` lists the parts): each part replaces only its own
section, between the `<!-- bench:NAME -->` markers, and stamps it with the date and the machine.
Do not edit inside the markers; commentary outside them is kept.
"""
_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


def write_section(
    name: str,
    title: str,
    body: str,
    *,
    path: Path = BENCH_DOC,
    today: dt.date | None = None,
    machine: str | None = None,
) -> Path:
    """Put ``body`` (Markdown) as section ``name`` of ``path`` under a ``## title`` heading.

    The section is replaced if present, else appended; the file is created with a short header
    if absent. ``today`` and ``machine`` default to now and ``machine_description()``.
    """
    if not _NAME.fullmatch(name):
        raise ValueError(f"section name {name!r}: use lowercase letters, digits and '-'")
    measured_on, measured_by = _RENDERED.get("stamp", (None, None))
    stamp = (
        f"*Measured {(today or measured_on or dt.date.today()).isoformat()} on "
        f"{machine or measured_by or machine_description()}.*"
    )
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    section = f"{start}\n## {title}\n\n{stamp}\n\n{body.strip()}\n{end}"
    text = path.read_text(encoding="utf-8") if path.is_file() else HEADER
    found = re.search(re.escape(start) + r".*?" + re.escape(end), text, flags=re.DOTALL)
    if found:
        text = text[: found.start()] + section + text[found.end() :]
    elif start in text or end in text:
        raise ValueError(f"{path}: section {name!r} has only one of its two markers")
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, text)
    return path


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table as lines (cells are used as given)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def machine_description() -> str:
    """CPU model, cores, RAM, OS, Python and the key package versions, on one line."""
    parts = [
        _cpu_model(),
        f"{os.cpu_count()} cores",
        _ram(),
        f"{platform.system()} {platform.release()}",
        f"Python {platform.python_version()}",
    ]
    versions = ", ".join(f"{name} {v}" for name in KEY_PACKAGES if (v := _version(name)))
    return "; ".join(part for part in parts if part) + (f" ({versions})" if versions else "")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram() -> str:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return ""
    return f"{total / 2**30:.1f} GiB RAM"


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def measured_or_saved(
    argv: Sequence[str], raw: Path, measure: Callable[[], dict], name: str
) -> dict:
    """A benchmark's results: measured (and saved to ``raw``) with no arguments, read back from
    ``raw`` with ``render`` (measuring nothing); any other argument is refused."""
    stamp = raw.with_name(raw.stem + ".stamp.json")
    if list(argv) == ["render"]:
        _RENDERED["stamp"] = _saved_stamp(raw, stamp)
        return json.loads(raw.read_text(encoding="utf-8"))
    if argv:
        raise SystemExit(f"benchmarks.{name}: unknown arguments {list(argv)}; give none or render")
    _RENDERED.pop("stamp", None)
    results = measure()
    write_json(raw, results)
    write_json(stamp, {"date": dt.date.today().isoformat(), "machine": machine_description()})
    return results


# a render writes the date and machine its results were measured on, not today's
_RENDERED: dict[str, tuple[dt.date, str | None]] = {}


def _saved_stamp(raw: Path, stamp: Path) -> tuple[dt.date, str | None]:
    """When and where ``raw`` was measured: its stamp file, else the raw file's date alone."""
    if stamp.is_file():
        saved = json.loads(stamp.read_text(encoding="utf-8"))
        return dt.date.fromisoformat(saved["date"]), saved["machine"]
    return dt.date.fromtimestamp(raw.stat().st_mtime), None
