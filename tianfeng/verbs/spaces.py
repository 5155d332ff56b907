"""`tianfeng spaces`: the search spaces shipped with tianfeng."""

from __future__ import annotations

from tianfeng.verbs import Verb

VERB = Verb(
    "spaces", "list the search spaces shipped with tianfeng",
    "List the shipped search spaces: --space takes each by its bare name (e.g. --space large_batch.yaml) when no "
    "such file is in the working directory.",
    "tianfeng.commands.spaces_command:run_spaces_command",
    (("tianfeng spaces", "the shipped spaces and their per-GPU batch ranges"),
     ("tianfeng search --space imagenet_resnet50", "search one by its bare name")),
    json=True)
