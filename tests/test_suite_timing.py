"""The suite's own timing: the plugin counts each outcome once per test and the gathered file adds
the parts up, so the README's figure of the suite is what pytest ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import suite_results  # noqa: E402

TESTS = '''
import pytest

def test_a(): pass
def test_b(): pass
def test_c(): assert False
@pytest.mark.skip(reason="shown")
def test_d(): pass
@pytest.fixture
def broken(): raise RuntimeError
def test_e(broken): pass
'''


def _part(tmp_path: Path, name: str, folder: Path) -> dict:
    (tmp_path / "test_sample.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {**os.environ, "TIANFENG_SUITE_RESULTS": str(folder), "TIANFENG_SUITE_PART": name,
           "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.suite_timing", "-p", "no:cacheprovider",
                    "-c", str(tmp_path / "pytest.ini"), str(tmp_path)], cwd=tmp_path, env=env,
                   capture_output=True, timeout=120)
    return json.loads((folder / f"{name}.json").read_text())


def test_each_outcome_is_counted_once_per_test_and_the_parts_add_up(tmp_path: Path) -> None:
    folder = tmp_path / "timing"
    part = _part(tmp_path, "parallel", folder)
    assert part["counts"] == {"passed": 2, "failed": 1, "error": 1, "skipped": 1, "xfailed": 0, "xpassed": 0}
    assert part["tests"] == 5 and part["seconds"] >= 0
    (folder / "alone.json").write_text(json.dumps({**part, "seconds": 120.0}))
    summary = suite_results.gather(folder, "quick")
    assert summary["tests"] == 10 and summary["failed"] == 4
    assert summary["minutes"] == round((part["seconds"] + 120.0) / 60, 1)
    assert list(summary["parts"]) == ["parallel", "alone"] and summary["commit"] and summary["machine"]


def test_without_the_variable_nothing_is_written(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TIANFENG_SUITE_RESULTS"}
    (tmp_path / "test_one.py").write_text("def test_one(): pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.suite_timing", "-p", "no:cacheprovider",
                    "-c", str(tmp_path / "pytest.ini"), str(tmp_path)], cwd=tmp_path,
                   env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, timeout=120)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pytest.ini", "test_one.py"]
