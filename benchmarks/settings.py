"""Benchmark settings read from the environment, refused with one line when malformed."""

from __future__ import annotations

import os


def int_list(name: str, default: str, minimum: int, example: str) -> list[int]:
    """The comma-separated integers in environment variable ``name`` (``default`` when unset),
    each at least ``minimum``; SystemExit naming the variable otherwise (empty included)."""
    raw = os.environ.get(name, default)
    try:
        values = [int(s) for s in raw.split(",") if s.strip()]
    except ValueError:
        values = []
    if not values or min(values) < minimum:
        raise SystemExit(f"{name}={raw!r}: give integers >= {minimum}, e.g. {example}")
    return values


def int_value(name: str, default: str, minimum: int, example: str) -> int:
    """One integer of at least ``minimum`` in environment variable ``name``, as :func:`int_list`."""
    values = int_list(name, default, minimum, example)
    if len(values) != 1:
        raise SystemExit(f"{name}={os.environ.get(name)!r}: give one integer, e.g. {example}")
    return values[0]
