"""Every benchmark script starts: it imports what it uses and parses its arguments (`--help`),
so a module the code moved or renamed fails here, not on the day someone reruns a benchmark.
The benchmarks with a test file of their own here also run at their smallest size."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# run by another benchmark, not by a person: no --help to ask
HELPERS = {"comm_worker": "torchrun's worker of comm_hooks.py",
           "lcbench_smac": "SMAC3 behind a pipe, in an environment of its own",
           "lcbench_surrogate": "the YAHPO surrogate behind a pipe, in an environment of its own",
           "lcbench_synetune": "Syne Tune behind a pipe, in an environment of its own"}
FAMILIES = {"search", "lcbench", "cost", "engine", "platform"}  # search efficiency, LCBench, cost model, engine speed, the product's own overheads
PATHS = {p.stem: p for p in BENCHMARKS.glob("*/*.py")}
SCRIPTS = sorted(name for name, p in PATHS.items()
                 if '__name__ == "__main__"' in p.read_text() and name not in HELPERS)


def test_the_list_holds_every_script() -> None:
    assert len(SCRIPTS) >= 25 and "lcbench" in SCRIPTS and "time_to_target" in SCRIPTS
    assert all(name in PATHS for name in HELPERS)


def test_every_benchmark_sits_in_its_family_folder() -> None:
    """A folder per family, and at the top only the helpers every family shares."""
    assert {p.name for p in BENCHMARKS.iterdir() if p.is_dir() and any(p.glob("*.py"))} == FAMILIES
    assert sorted(p.name for p in BENCHMARKS.glob("*.py")) == ["common.py"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_benchmark_starts(name: str) -> None:
    out = subprocess.run([sys.executable, str(PATHS[name]), "--help"], capture_output=True, text=True,
                         timeout=300, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr[-1500:]
    assert "usage:" in out.stdout
