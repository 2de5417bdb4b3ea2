"""What every OpenAI-compatible client here shares: settings from the environment, the
``Retry-After`` header and the backoff between retries."""

from __future__ import annotations

import email.utils
import os
import random
import time
from collections.abc import Sequence

MAX_RETRY_AFTER = 120.0  # seconds: a longer Retry-After is capped to this


def env_setting(names: Sequence[str]) -> tuple[str, str] | None:
    """``(name, value)`` of the first environment variable in ``names`` that is set and not
    empty, or None."""
    for name in names:
        value = os.environ.get(name)
        if value:
            return name, value
    return None


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or HTTP date), capped."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def backoff_delay(attempt: int, backoff: float, retry_after: float | None) -> float:
    """Seconds to wait before retry number ``attempt + 1``: the server's ``Retry-After`` when
    it gave one, else ``backoff * 2**attempt`` plus up to ``backoff`` of jitter (so clients
    that failed together do not retry together)."""
    if retry_after is not None:
        return retry_after
    return backoff * 2**attempt + random.uniform(0.0, backoff)
