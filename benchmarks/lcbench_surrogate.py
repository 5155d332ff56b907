"""The YAHPO Gym LCBench surrogate behind a pipe, run by the Python of its own environment
(yahpo-gym 1.0.2 pins numpy<2 and ConfigSpace<=0.6.1). One JSON request per line on stdin, one
JSON answer per line on stdout:

    {"op": "describe"}                      -> {"tasks": [...], "space": {name: {type, low, high, log}}}
    {"op": "curves", "task": T, "configs": [{...}, ...]}
                                            -> {"curves": [{"val_accuracy": [52], "time": [52]}, ...]}

Usage: lcbench_surrogate.py DATA_DIR   (DATA_DIR holds lcbench/ with the three files)"""

from __future__ import annotations

import contextlib
import json
import sys

EPOCHS = 52


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
