"""A newcomer's first hour, timed: a fresh clone of this checkout's HEAD, `bash
scripts/setup.sh`, the venv activated, then the README's commands and the tutorial's, one after
another in the clone as typed, with empty tianfeng and kernel caches (pip's cache is the
machine's). Each step's wall seconds and its share of the whole; any step that fails ends the
run (exit 1) and nothing is written. Run it alone on the machine: the figure is a wall time.

    python benchmarks/platform/first_hour.py                 # print the table
    python benchmarks/platform/first_hour.py --results       # also write docs/results/first_hour.json
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

from common import ROOT, add_results_argument, print_table, write_results
from doc_commands import commands

PAGES = ("README.md", "docs/tutorial.md")


def _step(label: str, argv: list[str], cwd: Path, env: dict[str, str]) -> dict:
    print(f"first hour: {label} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit(f"first hour: `{label}` exited {out.returncode} after {seconds:.0f} s:\n{out.stderr[-2000:]}")
    print(f"first hour: {label}: {seconds:.1f} s", file=sys.stderr, flush=True)
    return {"step": label, "seconds": round(seconds, 1)}


def first_hour(clone: Path) -> list[dict]:
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    # a newcomer's tianfeng and kernel caches are empty (pip's own cache is this machine's)
    env = {**{k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")},
           "TIANFENG_CACHE": str(clone.parent / "cache"), "TORCH_EXTENSIONS_DIR": str(clone.parent / "extensions")}
    steps = [_step("bash scripts/setup.sh", ["bash", "scripts/setup.sh"], clone, env)]
    venv = clone / ".venv"
    activated = {**env, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"}
    for page in PAGES:
        for cmd in commands((clone / page).read_text()):
            steps.append({"page": page, **_step(f"tianfeng {cmd}", ["tianfeng", *shlex.split(cmd)], clone,
                                                activated)})
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", type=Path, default=None, help="clone here and keep it (default: a temporary folder)")
    add_results_argument(parser, ROOT / "docs" / "results" / "first_hour.json", "the steps' seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tianfeng-first-hour-") as tmp:
        clone = (args.keep or Path(tmp)) / "tianfeng"
        steps = first_hour(clone)
        cloned = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True,
                                text=True, check=True).stdout.strip()
    total = sum(s["seconds"] for s in steps)
    print_table("A fresh clone's first hour: each step's wall time and share of the whole",
                [(s["step"][:70], f"{s['seconds']:.1f} s", f"{s['seconds'] / total:.2f}") for s in steps],
                headers=("step", "wall", "share"))
    print(f"total: {total / 60:.1f} min")
    if args.results:
        # the commit timed is the clone's: what the checkout's work tree holds besides took no part
        write_results(args.results, {"commit": cloned, "steps": steps, "total_s": round(total, 1)})


if __name__ == "__main__":
    main()
