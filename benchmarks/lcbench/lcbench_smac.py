"""SMAC3's multi-fidelity facade (Hyperband's brackets with a random-forest model proposing the
configurations, Lindauer et al. 2022) behind a pipe, as an ask-and-tell peer for
benchmarks/lcbench/lcbench.py. It runs in an environment of its own (smac 2.4.1 needs ConfigSpace >= 1.0,
the surrogate's environment pins <= 0.6.1), made by lcbench.py on first use. One JSON request a
line on stdin, one JSON answer a line on stdout:

    {"op": "start", "space": {name: {type, low, high, log}}, "seed": S, "epochs": 52}
                                      -> {"ok": true}   (a new optimizer; any earlier one is dropped)
    {"op": "ask"}                     -> {"config": {...}, "epochs": E}   (train from scratch for E)
    {"op": "tell", "accuracy": A, "seconds": T}
                                      -> {"ok": true}   (the result of the last configuration asked)

Usage: lcbench_smac.py (run by the smac environment's Python)"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile


def _optimizer(space: dict, seed: int, epochs: int, folder: str):
    from ConfigSpace import ConfigurationSpace, Float, Integer
    from smac import MultiFidelityFacade, Scenario

    cs = ConfigurationSpace(seed=seed)
    cs.add([(Integer if p["type"] == "int" else Float)(name, (p["low"], p["high"]), log=p["log"])
            for name, p in space.items()])
    scenario = Scenario(cs, deterministic=True, n_trials=10**9, min_budget=1, max_budget=epochs, seed=seed,
                        output_directory=folder)

    def never_called(config, seed: int = 0, budget: float = 0.0) -> float:  # ask and tell train elsewhere
        raise RuntimeError("the benchmark trains each configuration itself")

    return MultiFidelityFacade(scenario, never_called, overwrite=True, logging_level=40,
                               intensifier=MultiFidelityFacade.get_intensifier(scenario, eta=3))


def main() -> None:
    from smac.runhistory.dataclasses import TrialValue

    folder = tempfile.TemporaryDirectory()
    smac, asked = None, None
    for line in sys.stdin:
        request = json.loads(line)
        with contextlib.redirect_stdout(sys.stderr):  # SMAC prints: stdout is the pipe
            if request["op"] == "start":
                smac = _optimizer(request["space"], request["seed"], request["epochs"], folder.name)
                answer = {"ok": True}
            elif request["op"] == "ask":
                asked = smac.ask()
                config = {k: v.item() if hasattr(v, "item") else v for k, v in dict(asked.config).items()}
                answer = {"config": config, "epochs": max(1, round(asked.budget))}
            else:
                smac.tell(asked, TrialValue(cost=-request["accuracy"], time=request["seconds"]))
                answer = {"ok": True}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    folder.cleanup()


if __name__ == "__main__":
    main()
