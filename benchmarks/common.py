"""Helpers shared by the benchmarks: the dev data set, medians of interleaved repeats, tables.

Every benchmark times its baseline in the same run and prints ratios: absolute times on these
shared machines are not comparable between runs.
"""

from __future__ import annotations

import statistics
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_ARCHIVE = ROOT.parent / "shared" / "data" / "cifar5-dev.tar.gz"
SHARED_CACHE = ("datasets", "decoded", "scans")  # the data set's folders of a tianfeng cache
sys.path.insert(0, str(ROOT))


def provenance() -> dict[str, str]:
    """What a results file says of where its figures come from: the commit (with `+changes` when
    the work tree differs from it), the date, the machine."""
    import datetime
    import os
    import platform
    import subprocess

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    # the docs and README aside: what they say does not change a figure
    if git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs", ":!README.md"):
        commit += "+changes"
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return {"commit": commit, "date": datetime.date.today().isoformat(),
            "machine": f"{os.cpu_count()} cores, {cpu or platform.machine()}"}


def add_results_argument(parser, default: Path, what: str) -> None:
    """`--results [PATH]`: also write `what` to a results file the docs quote (default `default`)."""
    parser.add_argument("--results", nargs="?", const=default, type=Path, default=None, metavar="PATH",
                        help=f"also write {what} with commit, date and machine (default {default.relative_to(ROOT)})")


def write_results(path: Path, figures: dict) -> None:
    """A results file: the figures with the commit, date and machine they come from."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**provenance(), **figures}, indent=2) + "\n")


def own_cache(path: Path, shared: Path) -> Path:
    """A tianfeng cache at `path` with measurements of its own (compile and layout records,
    inductor's kernels), whose data set folders are those of the cache `shared`: a run given it
    pays every first compile and layout timing itself, and no data set is decoded twice."""
    if not path.exists():
        path.mkdir(parents=True)
        for sub in SHARED_CACHE:
            (shared / sub).mkdir(parents=True, exist_ok=True)
            (path / sub).symlink_to((shared / sub).resolve())
    return path


def cifar5_dir() -> Path:
    """cifar5-dev extracted once into the cache (TIANFENG_CACHE or ~/.cache/tianfeng)."""
    from tianfeng.trainers.data.sources import default_cache_dir

    out = default_cache_dir() / "datasets"
    if not (out / "cifar5-dev" / "val").is_dir():
        if not SHARED_ARCHIVE.exists():
            sys.exit(f"benchmark needs {SHARED_ARCHIVE}: the development data, a folder beside the checkout")
        out.mkdir(parents=True, exist_ok=True)
        with tarfile.open(SHARED_ARCHIVE) as tar:
            tar.extractall(out, filter="data")
    return out / "cifar5-dev"


def data_source(name: str) -> str | None:
    """--data of a benchmark: cifar5 (the dev archive, extracted once), digits (the space's own:
    None) or any data source as given; only cifar5 needs the archive."""
    if name == "cifar5":
        return f"imagefolder:{cifar5_dir()}"
    return None if name == "digits" else name


def interleaved(variants: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """Median of each variant's measurement, the variants run in turn so drift hits all alike."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, measure in variants.items():
            samples[name].append(measure())
    return {name: statistics.median(values) for name, values in samples.items()}


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def print_table(title: str, rows: list[tuple[str, ...]], headers=("variant", "value", "ratio")) -> None:
    width = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    print(f"\n{title}")
    for row in [headers, *rows]:
        print("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, width, strict=True)))
