"""Checks a study database URL before anything opens it, so every mistake is one line: a URL that
is not one, a driver that is not installed, a SQLite path whose folder is missing, a file that is
not a SQLite database, or (for commands that only read) a database that does not exist yet."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tianfeng.core.errors import ConfigError

_SQLITE_MAGIC = b"SQLite format 3\x00"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")  # `sqlite:`, `postgresql+psycopg:`: a URL, not a path


def as_url(text: str) -> str:
    """`--storage` as given: a SQLAlchemy URL, or a plain path to a SQLite file (`study.db`,
    `runs/study.db`), which becomes `sqlite:///PATH`."""
    return text if _SCHEME.match(text) else f"sqlite:///{text}"


def engine_options(url: str) -> dict:
    """SQLAlchemy engine arguments for a study database: SQLite waits up to 120 s for a lock
    (several workers share one file); a server's pooled connections are checked before use."""
    return {"connect_args": {"timeout": 120}} if url.startswith("sqlite") else {"pool_pre_ping": True}


def storage_flag(url: str) -> str:
    """` --storage URL` for a command to copy, or "" for the default database."""
    from tianfeng.defaults import DEFAULT_STORAGE

    return "" if url == DEFAULT_STORAGE else f" --storage {url}"


def check_storage(url: str, *, must_exist: bool, writes: bool = False, flag: str = "--storage") -> str:
    """`url` if it can be opened; `must_exist` for commands that read a study (a mistyped SQLite
    path must not silently create an empty database); `writes` for commands that change it (a
    SQLite file or folder that cannot be written fails here, not deep inside a commit)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise ConfigError(flag, "", "must be a SQLAlchemy database URL such as sqlite:///tianfeng.db "
                          f"or postgresql://user@host/db; got {url!r}") from None
    try:
        parsed.get_dialect().import_dbapi()
    except NoSuchModuleError:
        raise ConfigError(flag, "", f"unknown database kind {parsed.drivername!r} in {url!r}; "
                          "use sqlite:///FILE or postgresql://...") from None
    except ImportError as exc:
        hint = (" (pip install 'tianfeng[postgres]' for postgresql://; postgresql+psycopg2:// needs psycopg2-binary)"
                if parsed.get_backend_name() == "postgresql" else "")
        raise ConfigError(flag, "", f"the driver for {parsed.drivername} is not installed: {exc.name or exc}"
                          f"{hint}") from None
    if parsed.get_backend_name() == "sqlite":
        _check_sqlite_file(parsed.database, url, must_exist=must_exist, writes=writes, flag=flag)
    return url


def _check_sqlite_file(database: str | None, url: str, *, must_exist: bool, writes: bool, flag: str) -> None:
    if not database or database == ":memory:":
        raise ConfigError(flag, "", f"{url!r} names no database file; use sqlite:///FILE")
    path = Path(database)
    if path.is_dir():
        raise ConfigError(flag, "", f"{path} is a directory, not a SQLite database file")
    if not path.exists():
        if must_exist:
            raise ConfigError(flag, "", f"no database at {path} (a search creates it; check the path)")
        if not path.parent.is_dir():
            raise ConfigError(flag, "", f"cannot create {path}: folder {path.parent} does not exist")
        if not os.access(path.parent, os.W_OK):
            raise ConfigError(flag, "", f"cannot create {path}: folder {path.parent} {_why_unwritable(path.parent)}")
        return
    try:
        with path.open("rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise ConfigError(flag, "", f"cannot read {path}: {exc.strerror}") from None
    if head and head != _SQLITE_MAGIC:
        raise ConfigError(flag, "", f"{path} is not a SQLite database")
    # SQLite writes a journal beside the file: the folder must be writable too
    for place in (path, path.parent):
        if writes and not os.access(place, os.W_OK):
            raise ConfigError(flag, "", f"cannot write the study database {path}: {place} {_why_unwritable(place)}; "
                              "status, report, runs and promote --front or --dry-run can still read it")


def _why_unwritable(path: Path) -> str:
    try:
        read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    return "is on a read-only file system" if read_only else "is not writable by this user"
