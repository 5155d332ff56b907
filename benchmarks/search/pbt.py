"""Population Based Training (Jaderberg et al. 2017) as a time-to-target method on a space.

A population of random recipes trains at full fidelity, one member at a time with every core,
`interval` epochs per round. After each round the members are ranked by their last validation
score; each member of the bottom quantile takes over a member of the top quantile (exploit: its
checkpoint, so its weights, optimizer state and position, and its recipe) and moves the
recipe's continuous optimizer settings (explore: each multiplied by 0.8 or 1.2 within its
range; label smoothing redrawn with probability 0.25). The schedule a member ends with is the
path of its settings. Every member trains the same number of epochs: truncation selection
compares members at the same epoch, so members of different lengths would be judged at
different points of their schedules (a short recipe's decayed LR looks better early, and the
population would converge on it). When a population ends, a new one is drawn, until stopped.

Each member is one Optuna trial of a study at the space's target rung (random sampler, no
priors), told its lineage's last score when it ends; its `pbt` attribute records each take-over.
The rounds are synchronous, the paper's truncation selection. Ray Tune's
PopulationBasedTraining makes the same choices asynchronously over trials that Ray places side by
side; this loop trains one member at a time on every core, as `--promote leader` trains its
full runs, so the two methods get the cores alike.
"""

from __future__ import annotations

import logging
import math
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import torch

from tianfeng.core.run_config import RunConfig, config_to_dict, stopping_after
from tianfeng.core.states import RunStatus
from tianfeng.hpo.running.objective import prepare_trial
from tianfeng.hpo.space.materialize import build_config
from tianfeng.hpo.space.read import SearchSpace
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.trainers import checkpoint
from tianfeng.trainers.engine import train

log = logging.getLogger("tianfeng.search")
PERTURBED = ("base_lr", "weight_decay", "trust_coefficient")  # multiplied by 0.8 or 1.2
REDRAWN = ("label_smoothing",)  # drawn again from its choices with probability RESAMPLE
FACTORS = (0.8, 1.2)
RESAMPLE = 0.25


@dataclass
class Member:
    trial: optuna.Trial
    values: dict[str, Any]
    cfg: RunConfig
    score: float = -math.inf  # the last epoch's metric; -inf until trained, or once diverged
    history: list[dict[str, Any]] = field(default_factory=list)


def explore(values: dict[str, Any], space: SearchSpace, rng: random.Random) -> dict[str, Any]:
    """`values` with each perturbed setting it has multiplied by 0.8 or 1.2 (kept in its range)
    and each redrawn one drawn again with probability 0.25."""
    params = {p.name: p for p in space.parameters}
    moved = dict(values)
    for name in PERTURBED:
        if name in moved:
            p = params[name]
            moved[name] = min(p.high, max(p.low, moved[name] * rng.choice(FACTORS)))
    for name in REDRAWN:
        if name in moved and rng.random() < RESAMPLE:
            moved[name] = rng.choice(params[name].choices)
    return moved


def take_over(donor: RunConfig, member: RunConfig) -> None:
    """`member`'s checkpoint folder becomes a copy of `donor`'s last checkpoint, recorded as
    written by `member`'s config (so the engine resumes it), with the optimizer's weight decay
    and trust coefficient set to `member`'s: the optimizer state holds them per parameter group,
    and loading it would otherwise bring back the donor's. The learning rate needs nothing: the
    engine sets it every step from the config's schedule."""
    source, target = donor.resolved_checkpoint_dir, member.resolved_checkpoint_dir
    shutil.rmtree(target, ignore_errors=True)
    checkpoint.copy_files(source, target)
    saved = checkpoint.load(target)
    saved["config"] = config_to_dict(member)
    for group in saved["optimizer"]["param_groups"]:
        if group.get("weight_decay", 0.0) > 0.0:  # the BN and bias group stays without decay
            group["weight_decay"] = member.optimizer.weight_decay
        if "trust_coefficient" in group:
            group["trust_coefficient"] = member.optimizer.lars.trust_coefficient
    checkpoint.save(target, saved)


def _train_to(member: Member, epoch: int, metric: str) -> None:
    result = train(stopping_after(member.cfg, epoch), lambda m: None)
    last = result.final
    if result.status == RunStatus.DIVERGED or last is None or not math.isfinite(getattr(last, metric)):
        member.score = -math.inf
        member.trial.set_user_attr("message", result.message)
    else:
        member.score = getattr(last, metric)


def _new_member(study: optuna.Study, space: SearchSpace, runs_root: Path, epochs: int, cores: float) -> Member:
    study.enqueue_trial({"epochs": epochs}, skip_if_exists=False)
    trial = study.ask()
    cfg = prepare_trial(trial, space, study.study_name, runs_root, "target", cores=cores)
    return Member(trial, dict(trial.user_attrs[TrialKey.VALUES]), cfg)


def _select(members: list[Member], space: SearchSpace, epoch: int, rng: random.Random, quantile: float) -> None:
    """The bottom `quantile` of the members, and every member that diverged, take over members of
    the top `quantile` (the best first, in turn)."""
    ranked = sorted(members, key=lambda m: m.score, reverse=True)
    count = min(len(ranked) // 2, max(1, int(len(ranked) * quantile)))  # no member takes over itself
    donors = [m for m in ranked[:count] if math.isfinite(m.score)]
    losers = [m for i, m in enumerate(ranked)
              if i >= count and (i >= len(ranked) - count or not math.isfinite(m.score))]
    for i, loser in enumerate(losers if donors else []):
        donor = donors[i % len(donors)]
        log.info("after epoch %d: trial %d (%.2f) takes over trial %d (%.2f)", epoch, loser.trial.number,
                 loser.score, donor.trial.number, donor.score)
        values = explore(donor.values, space, rng)
        cfg = build_config(space, values, "target", name=loser.cfg.name, run_dir=str(loser.cfg.resolved_run_dir))
        take_over(donor.cfg, cfg)
        loser.values, loser.cfg = values, cfg
        loser.history.append({"epoch": epoch, "from": donor.trial.number,
                              **{k: values[k] for k in PERTURBED + REDRAWN if k in values}})
        loser.trial.set_user_attr("pbt", loser.history)
        loser.trial.set_user_attr("config", config_to_dict(cfg))


def run_pbt(study: optuna.Study, space: SearchSpace, runs_root: Path, *, population: int = 4, interval: int = 2,
            epochs: int = 12, quantile: float = 0.25, seed: int = 0, populations: int | None = None) -> None:
    """Populations of `population` random `epochs`-epoch recipes, one after another until
    stopped (or `populations` of them); each trained `interval` epochs a round, its bottom
    `quantile` taking over its top."""
    rng = random.Random(seed)
    metric = space.objective.metric
    cores = torch.get_num_threads() / population  # one member at a time: the population shares the cores
    drawn = 0
    while populations is None or drawn < populations:
        drawn += 1
        members = [_new_member(study, space, runs_root, epochs, cores) for _ in range(population)]
        for upto in range(interval, epochs + interval, interval):
            upto = min(upto, epochs)
            for member in members:
                _train_to(member, upto, metric)
                if upto == epochs:  # its full run is whole: a full-fidelity score now
                    if math.isfinite(member.score):
                        study.tell(member.trial, member.score)
                    else:
                        study.tell(member.trial, state=optuna.trial.TrialState.PRUNED)
            if upto < epochs:
                _select(members, space, upto, rng, quantile)
