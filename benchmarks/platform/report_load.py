"""Report of a 200-trial study: file size (target < 10 MB) and time for headless Chromium to
load it and draw every figure (target < 3 s), against the same browser loading a blank page."""

from __future__ import annotations

import argparse
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import optuna
from common import ROOT, print_table
from null_trainer import empty_trainer

from tianfeng.hpo.running.objective import ProxyObjective
from tianfeng.hpo.running.study import open_study
from tianfeng.hpo.space.read import load_space
from tianfeng.hpo.spec import SearchSpec
from tianfeng.reporting.build import build_report

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def load_seconds(url: str, profile: Path, height: int = 900) -> float:
    """Chromium start to DOM dump, the window `height` px tall: figures are drawn as they come
    into view, so 900 px is the report opening and 20,000 px draws every figure."""
    start = time.perf_counter()
    out = subprocess.run([shutil.which("chromium"), *FLAGS, f"--window-size=1300,{height}",
                          f"--user-data-dir={profile}", "--dump-dom", url], capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - start
    assert out.returncode == 0, out.stderr[-500:]
    if "blank" not in url:  # the first figure drew; in the tall window, every one
        html = out.stdout
        ids = re.findall(r'<div class="figure[^"]*" id="(fig-\d+)"', html)
        drawn = [i for i in ids if "<svg" in html[html.index(f'id="{i}"'):].split("<h2>")[0]]
        assert drawn == ids if height > 900 else drawn[:1] == ids[:1], (drawn, ids)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=200)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("tianfeng").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        space_path = ROOT / "search_spaces" / "large_batch.yaml"
        spec = SearchSpec.of(objective="accuracy", space_path=str(space_path), data=None, storage=f"sqlite:///{tmp}/r.db",
                          study="big", sampler="tpe", pruner="asha", seed=0, trials=args.trials,
                          timeout_s=None, runs_dir=str(tmp / "runs"), rung="proxy")
        space = load_space(space_path)
        study = open_study(spec, space, resume=False)
        study.optimize(ProxyObjective(space, "big", tmp / "runs", "proxy", trainer=empty_trainer),
                       n_trials=args.trials)
        start = time.perf_counter()
        report = build_report(spec.options.storage, "big", tmp / "big.html")
        build_s = time.perf_counter() - start
        blank = tmp / "blank.html"
        blank.write_text("<!doctype html><title>blank</title>")
        base = min(load_seconds(blank.as_uri(), tmp / f"p{i}") for i in range(3))
        loaded = min(load_seconds(report.as_uri(), tmp / f"q{i}") for i in range(3))
        everything = min(load_seconds(report.as_uri(), tmp / f"r{i}", height=20000) for i in range(3))
        size_mb = report.stat().st_size / 2**20
    print_table(f"report of a {args.trials}-trial study (built in {build_s:.1f} s), best of 3 loads",
                [("blank page", f"{base:.2f} s", "1.00"),
                 ("study report opened (first screen's figures drawn)", f"{loaded:.2f} s", f"{loaded / base:.2f}"),
                 ("study report, every figure drawn (20,000 px window)", f"{everything:.2f} s",
                  f"{everything / base:.2f}")],
                headers=("page", "headless Chromium load", "ratio"))
    print(f"\n  report size {size_mb:.1f} MB (target < 10 MB); opens in {loaded:.2f} s (target < 3 s), "
          f"every figure drawn in {everything:.2f} s")


if __name__ == "__main__":
    main()
