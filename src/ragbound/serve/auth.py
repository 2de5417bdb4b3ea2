"""Bearer tokens: ``read`` may check queries, ``admin`` may also change the tripwires.

The token file holds one ``ROLE:TOKEN`` a line (``read:...`` or ``admin:...``); blank lines
and lines starting with ``#`` are skipped. A presented token is compared with every known
token in constant time (``hmac.compare_digest`` over SHA-256 digests, so neither the content
nor the length of a token leaks through timing).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ragbound.errors import InputError, where
from ragbound.records import read_text

Role = Literal["read", "admin"]
ROLES: tuple[Role, ...] = ("read", "admin")
MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class Tokens:
    """Known tokens as (role, SHA-256 digest) pairs."""

    entries: tuple[tuple[Role, bytes], ...]

    @classmethod
    def from_lines(cls, lines: list[str], source: str = "token file") -> Tokens:
        entries: list[tuple[Role, bytes]] = []
        for number, raw in enumerate(lines, start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            role, sep, token = line.partition(":")
            if not sep or role not in ROLES:
                raise InputError(f"{where(source, number)}: expected 'read:TOKEN' or 'admin:TOKEN'")
            if len(token.strip()) < MIN_TOKEN_CHARS:
                raise InputError(
                    f"{where(source, number)}: the token must have at least "
                    f"{MIN_TOKEN_CHARS} characters"
                )
            entries.append((role, _digest(token.strip())))  # type: ignore[arg-type]
        if not entries:
            raise InputError(f"{source}: no tokens (expected lines 'read:TOKEN' or 'admin:TOKEN')")
        return cls(tuple(entries))

    @classmethod
    def load(cls, path: Path) -> Tokens:
        """Read a token file; InputError naming the file and line when it is malformed."""
        return cls.from_lines(read_text(path).splitlines(), str(path))

    def role_of(self, presented: str) -> Role | None:
        """The role of ``presented`` (admin wins), or None; every entry is compared."""
        digest = _digest(presented)
        found: Role | None = None
        for role, known in self.entries:  # no early exit: the time does not depend on a match
            if hmac.compare_digest(digest, known) and found != "admin":
                found = role
        return found


def allows(role: Role | None, needed: Role) -> bool:
    """An admin token may do what a read token may."""
    return role == "admin" or (role == "read" and needed == "read")


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()
