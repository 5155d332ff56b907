"""Two or three examples for each command's `--help`, each a command that parses as written."""

from __future__ import annotations

EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "train": (("tianfeng train", "the embedded digits recipe, here"),
              ("tianfeng train --config run.yaml --set optimizer.lr=0.2 --json", "a run config, one value changed"),
              ("torchrun --nproc-per-node 8 -m tianfeng.cli train --config run.yaml", "8 ranks on one node")),
    "search": (("tianfeng search --space large_batch.yaml", "the shipped space, on the bundled digits"),
               ("tianfeng search --space large_batch.yaml --study lb2 --objective accuracy --trials 60 --workers 4",
                "another study, accuracy alone"),
               ("tianfeng search --space imagenet_resnet50 --data imagefolder:/data/imagenet --launcher slurm "
                "--workers 8 --gpus-per-trial 1 --partition gpu --time 4:00:00 --dry-run",
                "print the Slurm job array it would submit")),
    "scale": (("tianfeng scale --space large_batch.yaml --batch-sizes 256,1024,4096", "a search per batch size"),
              ("tianfeng scale --space large_batch.yaml --batch-sizes 512,2048 --budget-per-batch 20 --resume", "go on with a scale run")),
    "promote": (("tianfeng promote --front --study large_batch", "list the Pareto front"),
                ("tianfeng promote --fastest-to 80 --study large_batch", "the fastest front trial reaching 80"),
                ("tianfeng promote 14 --study large_batch --nodes 16 --gpus-per-node 8 --launcher slurm "
                 "--partition gpu --time 2:00:00", "trial 14 on 128 GPUs through Slurm")),
    "runs": (("tianfeng runs", "every promoted run"),
             ("tianfeng runs --follow 3", "watch run 3 until it ends"),
             ("tianfeng runs --cancel 3", "cancel run 3's scheduler job")),
    "calibrate": (("tianfeng calibrate --study large_batch --top-k 3 --random 2", "how well proxies rank recipes"),
                  ("tianfeng calibrate --throughput --space large_batch.yaml -o cluster.json",
                   "measure this machine's step times")),
    "report": (("tianfeng report --study large_batch", "reports/large_batch.html"),
               ("tianfeng report --study large_batch -o /tmp/lb.html --json", "elsewhere, its path as JSON")),
    "launch": (("tianfeng launch --config run.yaml --nodes 2 --gpus-per-node 2 --device cpu", "4 gloo ranks here"),
               ("tianfeng launch --config run.yaml --nodes 16 --gpus-per-node 8 --master-addr node-a --dry-run",
                "print the plan for 16 GPU nodes")),
    "plan": (("tianfeng plan --config run.yaml --gpus 128", "predicted time part by part at 128 GPUs"),
             ("tianfeng plan --config run.yaml --gpus 512 --preset a100 --json", "on A100s, as JSON")),
    "export": (("tianfeng export --study large_batch > trials.csv", "every trial as CSV"),
               ("tianfeng export --study large_batch --format parquet -o trials.parquet", "as Parquet")),
    "dashboard": (("tianfeng dashboard", "serve optuna-dashboard on tianfeng.db"),
                  ("tianfeng dashboard --study large_batch --no-serve", "refresh one study's curves and exit")),
    "spaces": (("tianfeng spaces", "the shipped spaces and their per-GPU batch ranges"),
               ("tianfeng search --space imagenet_resnet50", "search one by its bare name")),
    "status": (("tianfeng status", "the studies in tianfeng.db"),
               ("tianfeng status --study large_batch --json", "one study's trials, as JSON"),
               ("tianfeng status --study large_batch --follow", "follow a search until it is over")),
}


def examples_text(verb: str) -> str:
    """The `examples:` section of a command's `--help`."""
    rows = EXAMPLES[verb]
    return "examples:\n" + "\n".join(f"  {command}\n      {what}" for command, what in rows)
