"""Two studies of one name (two databases, or one deleted and made again) never write into each
other's run folder or report: the second is refused in one line, before it creates anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tests.search.test_study import spec_for
from tianfeng.core.errors import ConfigError
from tianfeng.hpo.running.runner import run_search
from tianfeng.promotion.options import PromoteOptions
from tianfeng.promotion.run import promote
from tianfeng.reporting.build import build_report


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_same_named_study_in_another_database_is_refused_before_it_exists(tmp_path: Path,
                                                                            tiny_space_file: Path) -> None:
    first = spec_for(tmp_path, tiny_space_file, trials=2, study="x", storage=f"sqlite:///{tmp_path / 'a.db'}")
    run_search(first, workers=1, resume=False)
    folder = tmp_path / "runs" / "x"
    before = _files(folder)
    assert any(name.startswith("trial-0/") for name in before)

    second = spec_for(tmp_path, tiny_space_file, trials=2, study="x", storage=f"sqlite:///{tmp_path / 'b.db'}")
    with pytest.raises(ConfigError, match=r"holds the runs of study x in sqlite:///.*a\.db"):
        run_search(second, workers=1, resume=False)
    assert optuna.get_all_study_names(second.options.storage) == []  # nothing half-made to trip a retry
    assert _files(folder) == before
    # the owner itself resumes in its folder, and another --runs-dir serves the second study
    run_search(spec_for(tmp_path, tiny_space_file, trials=3, study="x", storage=first.options.storage),
               workers=1, resume=True)
    assert len(optuna.load_study(study_name="x", storage=first.options.storage).trials) == 3
    other = spec_for(tmp_path, tiny_space_file, trials=1, study="x", storage=f"sqlite:///{tmp_path / 'c.db'}",
                     runs_dir=str(tmp_path / "other-runs"))
    run_search(other, workers=1, resume=False)
    assert (tmp_path / "other-runs" / "x" / "trial-0").is_dir()
    # promoting that study's trial into the first study's folder is refused, dry run or not
    before = _files(folder)
    for dry_run in (True, False):
        with pytest.raises(ConfigError, match="holds the runs of study x"):
            promote(PromoteOptions(storage=other.options.storage, study='x', runs_dir=tmp_path / 'runs', dry_run=dry_run), 0)
    assert _files(folder) == before


def test_a_folder_of_runs_without_an_owner_is_not_taken_by_a_new_study(tmp_path: Path, tiny_space_file: Path) -> None:
    leftover = tmp_path / "runs" / "s" / "trial-0" / "metrics.jsonl"
    leftover.parent.mkdir(parents=True)
    leftover.write_text("{}\n")
    with pytest.raises(ConfigError, match="already holds runs of another study"):
        run_search(spec_for(tmp_path, tiny_space_file, trials=1), workers=1, resume=False)
    assert leftover.read_text() == "{}\n"


def test_a_report_of_another_study_is_not_overwritten(tmp_path: Path, tiny_space_file: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    a = spec_for(tmp_path, tiny_space_file, trials=1, study="x", storage=f"sqlite:///{tmp_path / 'a.db'}")
    run_search(a, workers=1, resume=False)
    page = build_report(a.options.storage, "x")
    assert page == Path("reports/x.html")
    assert build_report(a.options.storage, "x") == page  # its own report is rewritten
    written = page.read_bytes()  # (each build stamps its own time: read after the last one)
    b = spec_for(tmp_path, tiny_space_file, trials=1, study="x", storage=f"sqlite:///{tmp_path / 'b.db'}",
                 runs_dir=str(tmp_path / "b-runs"))
    run_search(b, workers=1, resume=False)
    with pytest.raises(ConfigError, match=r"reports/x\.html is the report of study x in sqlite:///.*a\.db"):
        build_report(b.options.storage, "x")
    assert page.read_bytes() == written
    assert build_report(b.options.storage, "x", tmp_path / "b.html").exists()


@pytest.mark.slow
def test_the_search_command_refuses_a_report_collision_before_any_trial(tmp_path: Path,
                                                                       tiny_space_file: Path) -> None:
    def search(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tianfeng.cli", "search", "--space", str(tiny_space_file),
                               "--trials", "1", "--workers", "1", *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=300)

    assert search("--storage", "sqlite:///a.db").returncode == 0
    report = tmp_path / "reports" / "tiny.html"
    written = report.read_bytes()
    out = search("--storage", "sqlite:///b.db", "--runs-dir", "b-runs")
    assert out.returncode == 2, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("tianfeng: error:")]
    assert len(errors) == 1 and "is the report of study tiny in sqlite:///a.db" in errors[0], out.stderr
    assert not (tmp_path / "b-runs").exists() and report.read_bytes() == written
    assert optuna.get_all_study_names("sqlite:///" + str(tmp_path / "b.db")) == []
