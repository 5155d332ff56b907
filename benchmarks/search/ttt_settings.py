"""The settings `time_to_target.py` compares search methods in, each a search space.

near-best: `large_batch.yaml` as shipped (a whole run on cifar5-dev costs 33-110 s on two CPU
cores, a few times a proxy), scored against targets near the best whole runs.

costly: the same space with whole runs that cost what an ImageNet-class user's do against their
proxies: the target trains at 32 px (the data's own resolution, where the shipped space trains
at 16) for 30-40 epochs (6-30 shipped), on a wider net (width 24, 16 shipped), while the rungs
keep their shares of it, so the cheapest useful proxy (`lowres_half`: half the epochs, half the
resolution, half the data, half the width) costs a small fraction of a whole run. A budget of a
few whole runs then gives plain TPE at full fidelity a handful of trials. Progressive resolution
starts at 16 or 24 px; the published recipes keep their shape at 30 epochs."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import yaml
from common import ROOT

SHIPPED = ROOT / "search_spaces" / "large_batch.yaml"
SETTINGS = ("near-best", "costly")
# each setting's targets (val top-1): levels that few random recipes trained whole reach, read
# from whole_run_share.py's results of that setting (docs/results/whole_run_share*.json)
TARGETS = {"near-best": (80.0, 82.0), "costly": (84.0, 86.0)}


def costly(raw: dict) -> dict:
    """`large_batch.yaml`'s mapping moved to the costly setting (see the module doc)."""
    raw = {**raw, "name": "costly_full_runs",
           "description": "large_batch.yaml at 32 px and 30-40 epochs on a wider net: whole runs far dearer than proxies"}
    raw["base"] = {**raw["base"], "model": {**raw["base"]["model"], "width": 24},
                   "phases": [{**raw["base"]["phases"][0], "epochs": 30, "resolution": 32}]}
    raw["parameters"] = {**raw["parameters"], "epochs": {"type": "int", "low": 30, "high": 40},
                         "start_resolution": {**raw["parameters"]["start_resolution"], "choices": [16, 24]}}
    raw["phases"] = {**raw["phases"], "start_resolution": "start_resolution if stages > 1 else 32", "end_resolution": 32}
    raw["priors"] = [{**p, "params": {**p["params"], "epochs": 30,
                                      **({"start_resolution": 16} if "start_resolution" in p["params"] else {})}}
                     for p in raw["priors"]]
    return raw


def space_for(setting: str, folder: Path) -> Path:
    """The space file of `setting`: the shipped one, or the costly one written into `folder` (the
    same bytes every time, so kept results and a rerun agree on what was searched)."""
    if setting == "near-best":
        return SHIPPED
    if setting != "costly":
        raise SystemExit(f"time_to_target: unknown setting {setting!r}; one of {', '.join(SETTINGS)}")
    path = folder / "costly_full_runs.yaml"
    text = yaml.safe_dump(costly(yaml.safe_load(SHIPPED.read_text())), sort_keys=False)
    folder.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path
