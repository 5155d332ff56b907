"""The paths through the code that the development page shows, measured by running them: a tiny
search of the bundled digits from `tianfeng search --space` to the sampler, and its best trial's
promotion from `tianfeng promote` to the optimizer. For each path: the stops (tianfeng functions
on the call stack when the target is first called), the files they are in, and the climbs (a
stop in a file the path had left before: data going back up where it came from); and the work
on the way: every tianfeng function entered before the target (the side trips that returned),
how often the space file is read and how often a run config is built from a dict.
Each run stops at its target.

    python scripts/call_paths.py                    # the two paths, stop by stop
    python scripts/call_paths.py --json             # the figures, for programs
    python scripts/call_paths.py --results          # also docs/results/call_paths.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from common import add_results_argument, write_results  # noqa: E402

PACKAGE = REPO / "tianfeng"
SPACE = "large_batch.yaml"  # the shipped space, on the bundled digits


@dataclass
class CallPath:
    name: str
    start: str
    target: str
    stops: list[str] = field(default_factory=list)  # "file:function", outermost first
    called: set[str] = field(default_factory=set)  # every tianfeng function entered before the target
    space_reads: int = 0
    configs_built: int = 0

    @property
    def files(self) -> list[str]:
        return list(dict.fromkeys(s.split(":")[0] for s in self.stops))

    @property
    def climbs(self) -> int:
        left, previous, count = set(), None, 0
        for stop in self.stops:
            file = stop.split(":")[0]
            if file != previous:
                count += file in left
                if previous is not None:
                    left.add(previous)
            previous = file
        return count

    def summary(self) -> dict:
        return {"path": self.name, "from": self.start, "to": self.target, "stops": len(self.stops),
                "files": len(self.files), "climbs": self.climbs, "called": len(self.called),
                "called_files": len({c.split(":")[0] for c in self.called}), "space_reads": self.space_reads,
                "configs_built": self.configs_built, "chain": self.stops}


def _stop(code) -> str | None:
    file = Path(code.co_filename)
    if not file.is_relative_to(PACKAGE):
        return None
    return f"{file.relative_to(PACKAGE).as_posix()}:{code.co_qualname}"


class _Reached(BaseException):
    """Raised at the target: what comes after it is not on the path (and takes time)."""


@contextlib.contextmanager
def _watch(path: CallPath, target: Callable, space_file: Path | None) -> Iterator[None]:
    """Run to the first call of `target`, record the stack there and stop; count reads of
    `space_file` and run configs built from dicts on the way."""
    from tianfeng.core import run_config as config
    from tianfeng.core import yaml_input

    target_code, read_code, build_code = target.__code__, yaml_input.read_yaml.__code__, config.config_from_dict.__code__

    def profile(frame, event, _arg):
        if event != "call":
            return
        code = frame.f_code
        stop = _stop(code)
        if stop is not None:
            path.called.add(stop)
        if code is target_code and not path.stops:
            chain, f = [], frame
            while f is not None:
                stop = _stop(f.f_code)
                if stop is not None:
                    chain.append(stop)
                f = f.f_back
            path.stops = chain[::-1]
            sys.setprofile(None)
            raise _Reached
        if code is read_code and space_file is not None:
            if Path(frame.f_locals.get("path", "")).resolve() == space_file:
                path.space_reads += 1
        elif code is build_code:
            path.configs_built += 1

    sys.setprofile(profile)
    try:
        yield
    except _Reached:
        pass
    finally:
        sys.setprofile(None)


def measure(work: Path) -> list[CallPath]:
    """Run the search, then the promotion, in `work`, and return the two paths."""
    from tianfeng.cli import main
    from tianfeng.hpo.sampling.registry import make_sampler
    from tianfeng.hpo.space.shipped import resolve_space
    from tianfeng.trainers.optim import build_optimizer

    os.chdir(work)
    space_file = resolve_space(SPACE).resolve()
    search = CallPath("search", f"tianfeng search --space {SPACE}", "hpo/sampling/registry.py:make_sampler")
    with _watch(search, make_sampler, space_file), contextlib.redirect_stdout(sys.stderr):
        main(["search", "--space", SPACE, "--study", "paths-search", "--workers", "1"])
    if not search.stops:
        raise SystemExit("call_paths: the search did not reach the sampler")
    with contextlib.redirect_stdout(sys.stderr):  # one finished trial to promote, not measured
        main(["search", "--space", SPACE, "--study", "paths", "--trials", "1", "--workers", "1", "--objective",
              "accuracy", "--pruner", "none"])
    promote = CallPath("promote", "tianfeng promote TRIAL", "trainers/optim/__init__.py:build_optimizer")
    with _watch(promote, build_optimizer, None), contextlib.redirect_stdout(sys.stderr):
        main(["promote", "0", "--study", "paths"])
    if not promote.stops:
        raise SystemExit("call_paths: the promotion did not reach the optimizer")
    return [search, promote]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    add_results_argument(parser, REPO / "docs" / "results" / "call_paths.json", "the two paths")
    args = parser.parse_args(argv)
    results = args.results.resolve() if args.results else None  # the runs happen in a folder of their own
    here = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="tianfeng-paths-") as work:
        print("call_paths: a 2-trial search of the digits, then its best trial's promotion...", file=sys.stderr)
        try:
            paths = measure(Path(work))
        finally:
            os.chdir(here)
    rows = [p.summary() for p in paths]
    if results:
        write_results(results, {"paths": rows})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for p in paths:
        row = p.summary()
        print(f"{p.start} -> {p.target}: {row['stops']} stops in {row['files']} files, {row['climbs']} climbs; on "
              f"the way {row['called']} functions in {row['called_files']} files, the space file read "
              f"{p.space_reads} time(s), run configs built from dicts {p.configs_built}")
        for i, stop in enumerate(p.stops, 1):
            print(f"  {i:2d}. {stop}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
