"""The code base stays ruff clean (run as part of the suite so CI enforces it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def test_ruff_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    out = subprocess.run([ruff, "check", "."], cwd=Path(__file__).resolve().parents[1],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
