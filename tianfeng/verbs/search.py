"""`tianfeng search`: a study over a search space with cheap proxy runs."""

from __future__ import annotations

from tianfeng.commands.search_command import add_search_arguments
from tianfeng.verbs import Verb

VERB = Verb(
    "search", "search a space with cheap proxy runs (Optuna)",
    "Search a space of large-batch recipes with cheap proxy runs, pruning losers early. Trials are stored in an "
    "Optuna study (SQLite by default); per-trial lines go to stderr, the summary and the promote command to stdout.",
    "tianfeng.commands.search_command:run_search_command",
    (("tianfeng search --space large_batch.yaml", "the shipped space, on the bundled digits"),
     ("tianfeng search --space large_batch.yaml --study lb2 --objective accuracy --trials 60 --workers 4",
      "another study, accuracy alone"),
     ("tianfeng search --space imagenet_resnet50 --data imagefolder:/data/imagenet --launcher slurm --workers 8 "
      "--gpus-per-trial 1 --partition gpu --time 4:00:00 --dry-run", "print the Slurm job array it would submit")),
    arguments=add_search_arguments, source="space", storage="creates")
