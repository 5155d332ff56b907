"""Gathers the parts the suite-timing plugin wrote (tests/suite_timing.py) into one results file
with the commit, date and machine: what the README says of the suite comes from it.

    python scripts/suite_results.py DIR --selection quick|all [--out docs/results/test_suite.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from common import provenance  # noqa: E402

RESULTS = ROOT / "docs" / "results" / "test_suite.json"
PARTS = ("parallel", "alone")


def gather(folder: Path, selection: str) -> dict:
    """The parts in the order the suite runs them, their totals and where they were measured."""
    parts = {name: json.loads((folder / f"{name}.json").read_text()) for name in PARTS
             if (folder / f"{name}.json").exists()}
    if not parts:
        raise SystemExit(f"suite_results: {folder} holds none of {', '.join(p + '.json' for p in PARTS)}")
    failed = sum(p["counts"]["failed"] + p["counts"]["error"] for p in parts.values())
    return {**provenance(), "selection": selection, "parts": parts,
            "tests": sum(p["tests"] for p in parts.values()), "failed": failed,
            "minutes": round(sum(p["seconds"] for p in parts.values()) / 60, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where TIANFENG_SUITE_RESULTS pointed")
    parser.add_argument("--selection", choices=("quick", "all"), required=True,
                        help="quick: the tests not marked slow; all: every test")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    summary = gather(args.folder, args.selection)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{summary['tests']} tests ({summary['failed']} failed) in {summary['minutes']} min: {args.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
