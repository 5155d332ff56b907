"""Run under torchrun by test_engine_ddp.py: the engine's run where only rank 1's loss turns
non-finite (its model's output times inf from its 3rd training step); each rank writes how
its run ended to <dir>/rank<r>.json."""

import json
import os
import sys
from pathlib import Path

from tianfeng.core.run_config import load_config
from tianfeng.trainers import distributed, engine

real_build = engine.build_model


def build_model(cfg, channels, classes):
    model = real_build(cfg, channels, classes)
    rank, steps = int(os.environ["RANK"]), {"n": 0}

    def poison(module, inputs, output):
        if module.training:
            steps["n"] += 1
            if rank == 1 and steps["n"] >= 3:
                return output * float("inf")
        return None

    model.register_forward_hook(poison)
    return model


def main() -> None:
    out = Path(sys.argv[1])
    engine.build_model = build_model
    cfg = load_config(None, ["device=cpu", "phases.0.epochs=2", "phases.0.resolution=8",
                             f"run_dir={out / 'run'}", "precision.mode=fp32", "checkpoint.every_steps=1",
                             "noise_scale_every=0"])  # one forward per step: the poison counts them
    result = engine.train(cfg)
    (out / f"rank{os.environ['RANK']}.json").write_text(json.dumps(
        {"status": result.status, "message": result.message, "epochs": len(result.epochs)}))
    distributed.shutdown()
    distributed.exit_rank(0)


if __name__ == "__main__":
    main()
