"""``detect.monitor.LogRecord`` is ``LogLine`` now: the old name still works, and warns."""

from __future__ import annotations

import pytest

import ragbound.detect.monitor as monitor


def test_log_record_is_log_line() -> None:
    with pytest.warns(DeprecationWarning, match="LogRecord is deprecated, use LogLine"):
        assert monitor.LogRecord is monitor.LogLine
