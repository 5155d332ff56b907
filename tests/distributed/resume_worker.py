"""Run under torchrun (4 ranks as 2 nodes x 2) by test_engine_ddp.py: for each compression kind
(fp16 casts, top-k residuals, PowerSGD flat and across nodes), one uninterrupted run and one
stopped after 15 steps then resumed from its checkpoint; and a plain one stopped after the epoch's
last step, before its evaluation (each rank's BatchNorm statistics then differ from rank 0's,
which the checkpoint holds); rank 0 writes both runs' metrics."""

import json
import sys
from pathlib import Path

import torch

from tianfeng.core.run_config import load_config
from tianfeng.trainers import distributed, engine

VARIANTS = {
    "fp16+hier": ["distributed.compression=fp16", "distributed.hook=hierarchical"],
    "topk+hier": ["distributed.compression=topk", "distributed.hook=hierarchical", "distributed.topk_ratio=0.05"],
    "powersgd": ["distributed.compression=powersgd", "distributed.powersgd_start_step=4"],
    "powersgd+hier": ["distributed.compression=powersgd", "distributed.hook=hierarchical",
                      "distributed.powersgd_start_step=4"],
    "plain, cut at the epoch's end": ["checkpoint.every_steps=1"],  # a checkpoint at the cut
}
EPOCH_END = "plain, cut at the epoch's end"


def config(run_dir: Path, sets: list[str]):
    return load_config(None, ["device=cpu", "phases.0.epochs=1", "phases.0.resolution=8",
                              "phases.0.batch_size=64", "data.augment=none", "precision.mode=fp32",
                              "optimizer.lr=0.2", "distributed.local_size=2", "distributed.bucket_mb=1",
                              "checkpoint.every_steps=5", f"run_dir={run_dir}", *sets])


def main() -> None:
    out = Path(sys.argv[1])
    results = {}
    for name, sets in VARIANTS.items():
        whole = engine.train(config(out / name / "whole", sets))
        cut_at = 15
        if name == EPOCH_END:  # the epoch's steps, from the uninterrupted run's last checkpoint
            torch.distributed.barrier()  # rank 0 may still be writing it when the others return
            saved = torch.load(out / name / "whole" / "checkpoints" / "last.pt", weights_only=False)
            cut_at = saved["position"]["global_step"]
        cut = config(out / name / "cut", sets)
        stopped = engine.train(cut, max_steps=cut_at)
        resumed = engine.train(cut)
        results[name] = {"whole": [m.__dict__ for m in whole.epochs], "stopped": stopped.status,
                         "resumed": [m.__dict__ for m in resumed.epochs]}
    if distributed.context_from_env().is_main:
        (out / "resume.json").write_text(json.dumps(results))
    distributed.shutdown()
    distributed.exit_rank(0)


if __name__ == "__main__":
    main()
