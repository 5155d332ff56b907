"""`tianfeng calibrate`: how well the proxies rank recipes, or a cluster's measured throughput."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tianfeng.defaults import DEFAULT_STORAGE, STORAGE_HELP
from tianfeng.launch.submit_options import SubmitOptions
from tianfeng.options import SCHEDULER_FLAGS, option
from tianfeng.verbs import Verb


@dataclass(frozen=True)
class CalibrateOptions(SubmitOptions):
    """The scheduler's flags are every submitting verb's (`SubmitOptions`)."""
    FLAG_GROUPS: ClassVar[dict[str, tuple[str, ...]]] = {
        "which trials": ("study", "storage", "top_k", "random", "seed", "runs_dir", "nodes", "gpus_per_node",
                         "device"),
        "--throughput: measure step times": ("throughput", "space", "data", "resolutions", "batches", "threads",
                                             "processes", "output"),
        "--from-run: refine a profile": ("from_run", "profile"),
        "scheduler (with --launcher slurm or ray)": SCHEDULER_FLAGS,
    }
    study: str | None = option(None, "study name (default: the only study in the storage)")
    storage: str = option(DEFAULT_STORAGE, STORAGE_HELP, show_default=False)
    top_k: int = option(3, "best trials to promote")
    random: int = option(2, "further random complete trials")
    seed: int = option(0, "seed of the random trials' choice", show_default=False)
    runs_dir: Path = option(Path("runs"), "where promoted runs' directories go")
    throughput: bool = option(False, "instead: measure this machine's training step time for --space's "
                              "full-fidelity model per resolution and batch, and write the fit a cluster section "
                              "with `device: measured` reads")
    space: Path | None = option(None, "with --throughput: the search space")
    data: str | None = option(None, "with --throughput: replace the space's data source")
    resolutions: str | None = option(None, "with --throughput: e.g. 8,16,32 (default: those the space's full runs "
                                     "use)")
    batches: str | None = option(None, "with --throughput: per-process batches (default 32,128,512)")
    threads: int | None = option(None, "with --throughput: torch threads per process (default: all, or 1 with "
                                 "--processes)")
    processes: int = option(1, "with --throughput: time this many processes at once (emulated GPUs sharing the "
                            "machine, as `launch --device cpu` runs them) and fit gloo's allreduce links",
                            show_default=False)
    nodes: int | None = option(None, "with --throughput: measure on this many nodes of --processes each, and fit "
                               "the links between nodes too (default 1); with --launcher slurm|ray: each full "
                               "run's")
    gpus_per_node: int | None = option(None, "with --launcher slurm|ray (not --throughput): each full run's GPUs "
                                       "per node")
    device: str | None = option(None, "what the processes train on (default: this machine's GPU if it has one "
                                "with --throughput, cuda on a scheduler)", choices=("cuda", "cpu"))
    from_run: int | None = option(None, "instead: refine a throughput profile with promoted run RUN's measured step "
                                  "times (each phase's, less the exchange predicted exposed at its world)",
                                  metavar="RUN")
    profile: Path | None = option(None, "with --from-run: the profile to refine (default: the study's "
                                  "cluster.throughput; none: a new profile from the run alone)", metavar="FILE")
    output: Path | None = option(None, "with --throughput: where to write it (default $TIANFENG_CACHE/throughput/); "
                                 "with --from-run: default the profile refined", short="-o")


VERB = Verb(
    "calibrate", "measure how well the proxies rank recipes",
    "Promote the top-k and some random complete trials to full fidelity and store the Spearman rank correlation "
    "between their proxy and full scores in the study.",
    "tianfeng.commands.calibrate_command:run_calibrate_command",
    (("tianfeng calibrate --study large_batch --top-k 3 --random 2", "how well proxies rank recipes"),
     ("tianfeng calibrate --throughput --space large_batch.yaml -o cluster.json",
      "measure this machine's step times")),
    options=CalibrateOptions, json=True, storage="writes")
