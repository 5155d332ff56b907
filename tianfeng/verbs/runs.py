"""`tianfeng runs`: the promoted runs of a study database."""

from __future__ import annotations

from dataclasses import dataclass

from tianfeng.defaults import DEFAULT_STORAGE, STORAGE_HELP
from tianfeng.options import option
from tianfeng.verbs import Verb


@dataclass(frozen=True)
class RunsOptions:
    study: str | None = option(None, "one study's runs (default: every study)")
    follow: int | None = option(None, "follow run RUN until it ends: its job's state, and each epoch as it is "
                                "recorded (with --json, one JSON object a line)", metavar="RUN")
    interval: float = option(2.0, "with --follow: seconds between looks at the run", metavar="S")
    cancel: int | None = option(None, "cancel submitted run RUN's scheduler job (promoting the trial again resumes "
                                "it)", metavar="RUN")
    storage: str = option(DEFAULT_STORAGE, STORAGE_HELP, show_default=False)


VERB = Verb(
    "runs", "list promoted runs", "List the promoted runs recorded in a study database.",
    "tianfeng.commands.promote_command:run_runs_command",
    (("tianfeng runs", "every promoted run"),
     ("tianfeng runs --follow 3", "watch run 3 until it ends"),
     ("tianfeng runs --cancel 3", "cancel run 3's scheduler job")),
    options=RunsOptions, json=True)
