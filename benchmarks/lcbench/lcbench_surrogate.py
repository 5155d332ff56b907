"""The YAHPO Gym LCBench surrogate behind a pipe, run by the Python of its own environment
(yahpo-gym 1.0.2 pins numpy<2 and ConfigSpace<=0.6.1). One JSON request per line on stdin, one
JSON answer per line on stdout:

    {"op": "describe"}                      -> {"tasks": [...], "space": {name: {type, low, high, log}}}
    {"op": "curves", "task": T, "configs": [{...}, ...]}
                                            -> {"curves": [{"val_accuracy": [52], "time": [52]}, ...]}
    {"op": "dehb", "task": T, "seed": S, "budget": B}
                                            -> {"spent": [...], "best": [...]}

"dehb" runs DEHB (Awad et al. 2021: differential evolution inside Hyperband's brackets, a
model-based multi-fidelity peer; the `dehb` package, installed beside yahpo-gym) on a task until
it has spent B surrogate training seconds: each evaluation trains a configuration from scratch
for the epochs of its rung (1.9 to 52) and costs their time; "best" is the best 52-epoch
accuracy after each evaluation, as the other methods report it.

Usage: lcbench_surrogate.py DATA_DIR   (DATA_DIR holds lcbench/ with the three files)"""

from __future__ import annotations

import contextlib
import json
import sys

EPOCHS = 52


def run_dehb(bench, space: dict, task: str, seed: int, budget: float) -> dict:
    import tempfile

    import ConfigSpace as CS
    from dehb import DEHB

    cs = CS.ConfigurationSpace(seed=seed)
    for name, p in space.items():
        kind = CS.UniformIntegerHyperparameter if p["type"] == "int" else CS.UniformFloatHyperparameter
        cs.add_hyperparameter(kind(name, p["low"], p["high"], log=p["log"]))
    bench.set_instance(task)
    with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(sys.stderr):  # DEHB logs to stdout
        optimizer = DEHB(cs=cs, dimensions=len(space), min_fidelity=1, max_fidelity=EPOCHS, eta=3, n_workers=1,
                         seed=seed, output_path=out, save_freq="end", log_level="ERROR")
        spent, best, trace = 0.0, float("-inf"), {"spent": [], "best": []}
        while spent < budget:
            job = optimizer.ask()
            config = job["config"]  # a Configuration already (DEHB converts with a ConfigSpace given)
            config = (config if isinstance(config, CS.Configuration) else optimizer.vector_to_configspace(config))
            config = config.get_dictionary()
            epochs = max(1, min(EPOCHS, round(job["fidelity"])))
            [value] = bench.objective_function([{**config, "OpenML_task_id": task, "epoch": epochs}])
            accuracy, seconds = float(value["val_accuracy"]), float(value["time"])
            spent += seconds
            if epochs == EPOCHS:
                best = max(best, accuracy)
            optimizer.tell(job, {"fitness": -accuracy, "cost": seconds})
            trace["spent"].append(spent)
            trace["best"].append(best)
    return trace


def main() -> None:
    with contextlib.redirect_stdout(sys.stderr):  # yahpo prints its citation notes: stdout is the pipe
        from yahpo_gym import benchmark_set, local_config

        local_config.init_config()
        local_config.set_data_path(sys.argv[1])
        bench = benchmark_set.BenchmarkSet("lcbench")
    space = None
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "describe":
            bench.set_instance(bench.instances[0])
            cs = bench.get_opt_space(drop_fidelity_params=True)
            space = {}
            for hp in cs.get_hyperparameters():
                if hp.name == "OpenML_task_id":
                    continue
                space[hp.name] = {"type": "int" if "Integer" in type(hp).__name__ else "float",
                                  "low": hp.lower, "high": hp.upper, "log": bool(hp.log)}
            answer = {"tasks": list(bench.instances), "space": space, "epochs": EPOCHS}
        elif request["op"] == "dehb":
            answer = run_dehb(bench, space, request["task"], request["seed"], request["budget"])
        else:
            bench.set_instance(request["task"])
            points = [{**c, "OpenML_task_id": request["task"], "epoch": e}
                      for c in request["configs"] for e in range(1, EPOCHS + 1)]
            values = bench.objective_function(points)
            curves = []
            for i in range(len(request["configs"])):
                chunk = values[i * EPOCHS:(i + 1) * EPOCHS]
                curves.append({"val_accuracy": [float(v["val_accuracy"]) for v in chunk],
                               "time": [float(v["time"]) for v in chunk]})
            answer = {"curves": curves}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
