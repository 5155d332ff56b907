"""The search spaces ship inside the package: found by bare name, listed by `tianfeng spaces`,
and a wheel installed into a fresh environment runs the mission's command from an empty folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tianfeng.cli import main
from tianfeng.core.errors import ConfigError
from tianfeng.hpo.space.shipped import SPACES_DIR, resolve_space, shipped_spaces

REPO = Path(__file__).resolve().parents[2]


def test_a_bare_name_resolves_to_the_shipped_space(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_space("large_batch.yaml") == SPACES_DIR / "large_batch.yaml"
    assert resolve_space("imagenet_resnet50") == SPACES_DIR / "imagenet_resnet50.yaml"
    (tmp_path / "large_batch.yaml").write_text("name: mine\n")
    assert resolve_space("large_batch.yaml") == Path("large_batch.yaml")  # a local file wins
    with pytest.raises(ConfigError, match="no shipped space of that name; shipped: imagenet_resnet50.yaml, large_batch.yaml"):
        resolve_space("nope.yaml")
    # a path with folders is never looked up among the shipped: reading it says it is missing
    assert resolve_space("somewhere/large_batch.yaml") == Path("somewhere/large_batch.yaml")


def test_the_checkout_folder_is_the_shipped_one() -> None:
    assert (REPO / "search_spaces").resolve() == SPACES_DIR
    assert {p.name for p in shipped_spaces()} == {"large_batch.yaml", "imagenet_resnet50.yaml"}


def test_spaces_command_lists_them_and_a_missing_space_exits_2(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COLUMNS", raising=False)  # a narrow terminal's width folds the names, as it should
    assert main(["spaces"]) == 0
    out = capsys.readouterr().out
    assert "large_batch.yaml" in out and "imagenet_resnet50.yaml" in out and "pareto" in out
    from tianfeng import api

    rows = {r["name"]: r for r in api.spaces()}  # what the table shows, from Python
    assert set(rows) == {p.name for p in SPACES_DIR.glob("*.yaml")}
    assert all(r["parameters"] > 0 and "GPU" in r["cluster"] for r in rows.values()), rows
    assert main(["spaces", "--json"]) == 0
    assert {r["name"]: r["parameters"] for r in json.loads(capsys.readouterr().out)} == \
        {name: r["parameters"] for name, r in rows.items()}
    assert main(["search", "--space", "missing.yaml", "--trials", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tianfeng: error: missing.yaml: no such file")


def _copy_of_the_repository(tmp_path: Path) -> Path:
    """A copy to install from: building writes build/ and egg-info beside the sources."""
    source = tmp_path / "source"
    shutil.copytree(REPO, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "runs", "*.html", "*.db", "__pycache__", "*.egg-info", ".pytest_cache"))
    return source


def _fresh_environment(env_dir: Path) -> tuple[Path, Path]:
    """A new virtual environment whose only other packages are this one's installed dependencies
    (torch, optuna, ...); tianfeng itself is installed into it by the test. (python, site dir)"""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python, site


@pytest.mark.slow
def test_the_wheel_runs_the_mission_command_from_an_empty_folder(tmp_path: Path) -> None:
    """Built as a wheel and installed (not editable) into a fresh virtual environment whose only
    other packages are this one's installed dependencies."""
    source = _copy_of_the_repository(tmp_path)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
                    str(source)], check=True, capture_output=True)
    wheel = next(wheels.glob("tianfeng-*.whl"))
    with zipfile.ZipFile(wheel) as z:  # one import root: nothing but tianfeng and its metadata
        assert {n.split("/")[0] for n in z.namelist()} == {"tianfeng", "tianfeng-0.1.0.dist-info"}
        assert "tianfeng/reporting/jinja/study.html.j2" in z.namelist()
    env_dir = tmp_path / "fresh"
    python, fresh_site = _fresh_environment(env_dir)
    # --ignore-installed: the dependencies' folder also holds this checkout's editable tianfeng, which
    # pip must neither take for this wheel nor try to uninstall
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                                "--ignore-installed", str(wheel)], capture_output=True, text=True)
    assert installed.returncode == 0 and (fresh_site / "tianfeng" / "__init__.py").exists(), \
        installed.stdout[-2000:] + installed.stderr[-2000:]
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    imported = subprocess.run([str(python), "-c", "import tianfeng; print(tianfeng.__file__)"], cwd=empty, env=env,
                              capture_output=True, text=True)
    assert imported.returncode == 0, (imported.stderr[-2000:], installed.stdout[-2000:])
    assert str(fresh_site) in imported.stdout and str(REPO) not in imported.stdout
    bare = subprocess.run([str(python), "-c", "import trainers"], cwd=empty, env=env, capture_output=True, text=True)
    assert "No module named 'trainers'" in bare.stderr
    done = subprocess.run([str(env_dir / "bin" / "tianfeng"), "search", "--space", "large_batch.yaml", "--trials", "2"],
                          cwd=empty, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "2 trials (" in done.stdout and "objective pareto" in done.stdout
    assert (empty / "tianfeng.db").exists()


@pytest.mark.slow
def test_an_editable_install_imports_one_root_and_finds_the_report_templates(tmp_path: Path) -> None:
    """`pip install -e .` of a copy into a fresh environment: the engine is tianfeng.trainers, the
    templates load as package data from any folder, and no bare `trainers` is installed."""
    source = _copy_of_the_repository(tmp_path)
    python, _ = _fresh_environment(tmp_path / "fresh")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                    "--no-build-isolation", "-q", "-e", str(source)], check=True, capture_output=True)
    empty = tmp_path / "empty"
    (empty / "reports").mkdir(parents=True)  # a folder of generated reports does not shadow anything
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = ("import tianfeng.trainers.engine as e; from tianfeng.reporting.templates import environment; "
            "environment().get_template('study.html.j2'); print(e.__file__)")
    where = subprocess.run([str(python), "-c", code], cwd=empty, env=env, check=True, capture_output=True,
                           text=True).stdout
    assert where.startswith(str(source / "tianfeng" / "trainers"))
    bare = subprocess.run([str(python), "-c", "import trainers"], cwd=empty, env=env, capture_output=True, text=True)
    assert "No module named 'trainers'" in bare.stderr
