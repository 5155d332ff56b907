"""How well do the proxies rank recipes? Promote the top-k and a few random trials to full
fidelity and store the Spearman rank correlation of proxy and full scores."""

from __future__ import annotations

import logging
import math
import random
from pathlib import Path

from scipy.stats import spearmanr

from tianfeng.hpo.judge.scores import ranked, score
from tianfeng.promotion.options import PromoteOptions
from tianfeng.promotion.run import Launch, load_study, promote
from tianfeng.storage.runs import RunRecordStatus
from tianfeng.storage.study_attrs import StudyKey

log = logging.getLogger("tianfeng.calibrate")


def calibrate(storage: str, study_name: str | None, *, top_k: int, n_random: int, seed: int,
              runs_dir: Path, launch: Launch | None = None) -> dict:
    """With a submitting `launch` (Slurm, Ray) each chosen trial's full run is submitted and
    this returns at once; called again with the same choice, each promotion finds its run: a
    job that ended is collected, a live one is not submitted twice, and rho is computed once
    enough have finished."""
    study = load_study(storage, study_name)
    metric = study.user_attrs.get(StudyKey.METRIC, "val_top1")
    best_first = ranked(study)
    complete = best_first
    chosen = best_first[:top_k]
    rest = best_first[top_k:]
    chosen += random.Random(seed).sample(rest, min(n_random, len(rest)))
    if len(chosen) < 3:
        from tianfeng.core.errors import ConfigError

        raise ConfigError("--study", study.study_name,
                          f"has {len(complete)} complete trials; calibration needs at least 3")
    pairs = []
    for i, trial in enumerate(chosen, 1):
        seconds = (trial.datetime_complete - trial.datetime_start).total_seconds()
        log.info("calibration run %d of %d: trial %d (proxy %.4g)", i, len(chosen), trial.number, score(trial))
        out = promote(PromoteOptions(storage=storage, study=study.study_name, runs_dir=runs_dir), trial.number,
                      kind="calibrate", launch=launch)
        pairs.append({"trial": trial.number, "proxy": score(trial), "full": out.get(f"full_{metric}"),
                      "proxy_s": seconds, "status": out["status"], "run": out.get("run")})
    usable = [p for p in pairs if p["full"] is not None and math.isfinite(p["full"])]
    rho = None
    if len(usable) >= MIN_PAIRS:
        rho = float(spearmanr([p["proxy"] for p in usable], [p["full"] for p in usable]).statistic)
        rho = None if math.isnan(rho) else rho  # every full score equal: no ranking to compare
    result = {"study": study.study_name, "spearman_rho": rho, "pairs": pairs, "pairs_used": len(usable),
              "pending": sum(p["status"] == RunRecordStatus.SUBMITTED for p in pairs),
              "top_k": top_k, "random": n_random, "seed": seed}
    study.set_user_attr(StudyKey.CALIBRATION, result)
    return result


MIN_PAIRS = 3  # Spearman's rho on fewer (proxy, full) pairs says nothing
