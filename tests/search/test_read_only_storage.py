"""A study database the user cannot write: on a read-only file system (a real read-only mount when
the tests run as root, a folder without write permission otherwise). Commands that change the
study say so in one line; commands that only read it still work."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from tianfeng.cli import main


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """(folder holding a one-trial study database `study.db`, how it was made read-only)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    root = os.geteuid() == 0
    if root:  # root writes through file permissions: only a read-only mount stops it
        made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(folder)], capture_output=True, text=True)
        if made.returncode != 0:
            pytest.skip(f"running as root without the right to mount a tmpfs: {made.stderr.strip()}")
    made_here = tmp_path / "study.db"  # made outside: an open connection would keep the mount busy
    storage = optuna.storages.RDBStorage(f"sqlite:///{made_here}")
    study = optuna.create_study(study_name="s", storage=storage)
    study.set_user_attr("kind", "search")
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=1.0))
    storage.engine.dispose()
    shutil.copyfile(made_here, folder / "study.db")
    try:
        if root:
            subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        else:
            (folder / "study.db").chmod(0o444)
            folder.chmod(0o555)
        yield folder, "is on a read-only file system" if root else "is not writable by this user"
    finally:
        if root:
            subprocess.run(["umount", "--lazy", str(folder)], check=False)
        else:
            folder.chmod(0o755)


def _one_error(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("tianfeng: error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def test_resuming_a_read_only_database_names_the_cause(read_only_folder, tiny_space_file: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    folder, cause = read_only_folder
    db = f"sqlite:///{folder / 'study.db'}"
    assert main(["search", "--space", str(tiny_space_file), "--storage", db, "--study", "s", "--resume",
                 "--trials", "3"]) == 2
    line = _one_error(capsys)
    assert "--storage" in line and "cannot write the study database" in line and cause in line, line


def test_a_new_database_on_a_read_only_file_system_names_the_cause(read_only_folder, tiny_space_file: Path,
                                                                    capsys: pytest.CaptureFixture) -> None:
    folder, cause = read_only_folder
    assert main(["search", "--space", str(tiny_space_file), "--storage", f"sqlite:///{folder / 'new.db'}"]) == 2
    line = _one_error(capsys)
    assert f"cannot create {folder / 'new.db'}" in line and cause in line, line


def test_reading_commands_still_work_on_a_read_only_database(read_only_folder, capsys: pytest.CaptureFixture) -> None:
    folder, _ = read_only_folder
    assert main(["status", "--storage", f"sqlite:///{folder / 'study.db'}", "--study", "s", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"state": "completed"' in out


def test_a_database_of_a_newer_schema_is_one_line_saying_so(tmp_path, capsys) -> None:
    """A study database a newer tianfeng (and Optuna) wrote: not Optuna's own advice to upgrade
    Optuna, which tianfeng pins, but what to do in tianfeng's terms."""
    import optuna
    from sqlalchemy import create_engine, text

    from tianfeng.cli import main

    db = tmp_path / "newer.db"
    optuna.create_study(study_name="s", storage=f"sqlite:///{db}")
    with create_engine(f"sqlite:///{db}").begin() as connection:
        connection.execute(text("UPDATE version_info SET schema_version = 999, library_version = '9.0.0'"))
        connection.execute(text("UPDATE alembic_version SET version_num = 'v9.0.0.z'"))
    assert main(["status", "--storage", f"sqlite:///{db}"]) == 1
    err = capsys.readouterr().err
    assert "its tables were written by a newer Optuna than this tianfeng's; upgrade tianfeng" in err
    assert err.count("\n") == 1, err
