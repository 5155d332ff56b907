"""A throwaway PostgreSQL server for tests: initdb into a temp dir, listen on a free loopback
port, trust authentication, stopped at the end. Needs Debian's postgresql package (installed by
scripts/setup.sh --dev) and, as root, runs the server as the `postgres` user."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or [shutil.which(name) or ""]
    if not found[-1]:
        raise FileNotFoundError(f"PostgreSQL's {name} is not installed: run `bash scripts/setup.sh --dev` "
                                "(it installs Debian's postgresql package)")
    return found[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yields a SQLAlchemy URL of a fresh database on a server that lives for the block."""
    # its own directory: pytest's are root-only, and the server runs as `postgres`
    workdir = Path(tempfile.mkdtemp(prefix="tianfeng-pg-"))
    workdir.chmod(0o755)
    data, sockets = workdir / "pgdata", workdir / "pgsock"
    sockets.mkdir(parents=True)
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(workdir, "postgres")
        shutil.chown(sockets, "postgres")
    port = _free_port()
    run = lambda *cmd: subprocess.run([*as_user, *cmd], check=True, capture_output=True, text=True)  # noqa: E731
    run(_bin("initdb"), "-D", str(data), "--auth=trust", "-U", "postgres", "--encoding=UTF8")
    run(_bin("pg_ctl"), "-D", str(data), "-w", "-l", str(workdir / "server.log"), "-o",
        f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c max_connections=100", "start")
    try:
        run(_bin("createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "tianfeng")
        yield f"postgresql://postgres@127.0.0.1:{port}/tianfeng"  # as the how-to writes it
    finally:
        subprocess.run([*as_user, _bin("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                       capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)
