"""Turn an expected failure into one ``error: ...`` line and an exit code.

Expected failures are bad input: ragbound's own errors, ``ValueError`` (validation, also the
bare ones of ``ragbound.stats``), pydantic ``ValidationError``, ``OSError`` on a path,
``UnicodeDecodeError``, and click/typer usage errors. Anything else is a bug in ragbound and
keeps its traceback.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import TYPE_CHECKING

from typer import TyperException

from ragbound.errors import RagboundError

if TYPE_CHECKING:
    from pydantic import ValidationError

USAGE = 2  # bad input or usage
INTERRUPTED = 130  # 128 + SIGINT, as shells report Ctrl-C
ERRORS_SHOWN = 3  # pydantic errors spelled out before "and N more"
_PATH_NAMES = ("path", "file", "filename", "source")


def describe(exc: BaseException) -> str | None:
    """The one-line message for an expected failure, or None for a bug."""
    if isinstance(exc, TyperException):  # typer's click: usage errors, bad parameters
        return _usage(exc)
    if isinstance(exc, RagboundError):
        return str(exc)
    if _is_validation_error(exc):
        return _validation(exc)  # type: ignore[arg-type]
    if isinstance(exc, UnicodeDecodeError):
        return _undecodable(exc)
    if isinstance(exc, OSError):
        return _os_error(exc)
    if isinstance(exc, ValueError):
        return str(exc) or type(exc).__name__
    return None


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` was caused by a Ctrl-C: a KeyboardInterrupt in its chain of causes
    (ONNX Runtime's import turns one into ``ImportError: initialization failed``)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _is_validation_error(exc: BaseException) -> bool:
    """A pydantic ValidationError, without importing pydantic: none exists if it never loaded."""
    pydantic_core = sys.modules.get("pydantic_core")  # where pydantic's ValidationError lives
    return pydantic_core is not None and isinstance(exc, pydantic_core.ValidationError)


def one_line(message: str) -> str:
    """Collapse a message onto one line (the CLI's error contract)."""
    return " ".join(message.split())


def _usage(exc: TyperException) -> str:
    """Click's own message, the command's usage line, and where to read its help."""
    message = exc.format_message()
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        usage = " ".join(ctx.get_usage().split()).removeprefix("Usage: ")
        message += f"; usage: {usage} (see '{ctx.command_path} --help')"
    return message


def _validation(exc: ValidationError) -> str:
    """``Title: field: problem; ...`` for the first few errors."""
    parts = []
    for error in exc.errors()[:ERRORS_SHOWN]:
        field = ".".join(str(part) for part in error["loc"]) or "value"
        parts.append(f"{field}: {error['msg']} (got {error.get('input')!r})")
    more = exc.error_count() - ERRORS_SHOWN
    text = f"invalid {exc.title}: " + "; ".join(parts)
    return text + (f"; and {more} more" if more > 0 else "")


def _os_error(exc: OSError) -> str:
    """``PATH: strerror`` (both paths for a rename or copy)."""
    reason = exc.strerror or str(exc)
    if exc.filename is None:
        return reason
    names = [exc.filename] + ([exc.filename2] if exc.filename2 is not None else [])
    return f"{' -> '.join(os.fsdecode(name) for name in names)}: {reason}"


def _undecodable(exc: UnicodeDecodeError) -> str:
    """Which file (when the failing frame names one) and the byte that is not UTF-8."""
    bad = exc.object[exc.start : exc.start + 1].hex()
    where = _file_in_traceback(exc.__traceback__)
    prefix = f"{where}: " if where else ""
    encoding = "UTF-8" if exc.encoding.replace("-", "").lower() == "utf8" else exc.encoding
    return f"{prefix}not {encoding} text (byte 0x{bad} at offset {exc.start}: {exc.reason})"


def _file_in_traceback(tb: TracebackType | None) -> str | None:
    """The innermost frame's local that names a file (``path``, ``file``, ...), if any."""
    found = None
    while tb is not None:
        names = tb.tb_frame.f_locals
        for name in _PATH_NAMES:
            value = names.get(name)
            if isinstance(value, str | os.PathLike):
                found = os.fsdecode(value)
                break
        tb = tb.tb_next
    return found
