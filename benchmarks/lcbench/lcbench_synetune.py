"""Syne Tune's model-based multi-fidelity schedulers behind a pipe, as ask-and-tell peers for
benchmarks/lcbench/lcbench.py: MOBSTER (Klein et al. 2020: asynchronous successive halving with a
Gaussian process proposing the configurations) and DyHPO (Wistuba et al. 2022: a Gaussian process
deciding epoch by epoch whether to resume a paused trial or start a new one). Syne Tune 0.13.0 is
the last release that ships them; it pins numpy < 1.27, so it runs in an environment of its own,
made by lcbench.py on first use. One JSON request a line on stdin, one JSON answer a line on stdout:

    {"op": "start", "method": "mobster" | "dyhpo", "space": {name: {type, low, high, log}},
     "seed": S, "epochs": 52}          -> {"ok": true}   (a new scheduler; any earlier one is dropped)
    {"op": "ask"}                      -> {"trial": T, "new": bool, "config": {...}}
                                          (a new trial, or a paused one the scheduler resumes)
    {"op": "train", "accuracy": [...], "time": [...]}
                                       -> {"epoch": E, "seconds": S}
        the asked trial's whole curve (accuracy and cumulative seconds after each epoch): it is
        reported to the scheduler epoch by epoch from where the trial stood until the scheduler
        stops or pauses it or it reaches the epochs it was given; E is where it stands then and S
        the seconds those epochs cost (a resumed trial continues from its checkpoint)

Usage: lcbench_synetune.py (run by the Syne Tune environment's Python)"""

from __future__ import annotations

import contextlib
import datetime
import json
import sys


def _scheduler(method: str, space: dict, seed: int, epochs: int):
    from syne_tune.config_space import lograndint, loguniform, randint, uniform
    from syne_tune.optimizer.baselines import MOBSTER, DyHPO

    def domain(p: dict):
        if p["type"] == "int":
            return (lograndint if p["log"] else randint)(int(p["low"]), int(p["high"]))
        return (loguniform if p["log"] else uniform)(p["low"], p["high"])

    config_space = {name: domain(p) for name, p in space.items()} | {"epochs": epochs}
    # max_resource_attr: a resumed trial is told the epoch of its next milestone in its config
    common = {"metric": "val_accuracy", "mode": "max", "resource_attr": "epoch", "max_resource_attr": "epochs",
              "grace_period": 1, "random_seed": seed}
    if method == "mobster":
        return MOBSTER(config_space, reduction_factor=3, **common)
    if method == "dyhpo":  # rungs every 2 epochs from the second, as Syne Tune recommends for it
        return DyHPO(config_space, **(common | {"grace_period": 2}), rung_increment=2)
    raise SystemExit(f"lcbench_synetune: unknown method {method!r}; one of mobster, dyhpo")


class Session:
    """One scheduler on one task and seed: its trials, where each stands, the one asked last."""

    def __init__(self, method: str, space: dict, seed: int, epochs: int) -> None:
        self.scheduler = _scheduler(method, space, seed, epochs)
        self.names, self.epochs = list(space), epochs
        self.trials: dict[int, object] = {}
        self.at: dict[int, int] = {}
        self.asked: int | None = None

    def ask(self) -> dict:
        from syne_tune.backend.trial_status import Trial

        suggestion = self.scheduler.suggest(trial_id=len(self.trials))
        if suggestion is None:
            raise SystemExit("lcbench_synetune: the scheduler suggested nothing")
        if suggestion.spawn_new_trial_id:
            trial_id = len(self.trials)
            self.trials[trial_id] = Trial(trial_id, dict(suggestion.config), datetime.datetime.now())
            self.at[trial_id] = 0
            self.scheduler.on_trial_add(trial=self.trials[trial_id])
        else:
            trial_id = suggestion.checkpoint_trial_id
            if suggestion.config is not None:
                self.trials[trial_id].config = dict(suggestion.config)
        self.asked = trial_id
        config = self.trials[trial_id].config
        return {"trial": trial_id, "new": suggestion.spawn_new_trial_id,
                "config": {k: v.item() if hasattr(v, "item") else v for k, v in config.items() if k in self.names}}

    def train(self, accuracy: list[float], seconds: list[float]) -> dict:
        from syne_tune.optimizer.scheduler import SchedulerDecision

        trial = self.trials[self.asked]
        start = self.at[self.asked]
        until = min(self.epochs, int(trial.config.get("epochs", self.epochs)))
        epoch, decision, result = start, SchedulerDecision.CONTINUE, None
        while epoch < until and decision == SchedulerDecision.CONTINUE:
            epoch += 1
            result = {"epoch": epoch, "val_accuracy": accuracy[epoch - 1]}
            decision = self.scheduler.on_trial_result(trial=trial, result=result)
        if result is None:  # nothing left to train: asked again at the epochs it was given
            self.scheduler.on_trial_remove(trial=trial)
        elif decision == SchedulerDecision.CONTINUE:  # ran to the epochs it was given
            self.scheduler.on_trial_complete(trial=trial, result=result)
        else:  # stopped or paused: no longer running
            self.scheduler.on_trial_remove(trial=trial)
        self.at[self.asked] = epoch
        spent = seconds[epoch - 1] - (seconds[start - 1] if start else 0.0)
        return {"epoch": epoch, "seconds": spent}


def main() -> None:
    session = None
    for line in sys.stdin:
        request = json.loads(line)
        with contextlib.redirect_stdout(sys.stderr):  # the schedulers may print: stdout is the pipe
            if request["op"] == "start":
                session = Session(request["method"], request["space"], request["seed"], request["epochs"])
                answer = {"ok": True}
            elif request["op"] == "ask":
                answer = session.ask()
            else:
                answer = session.train(request["accuracy"], request["time"])
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
