"""`tianfeng status`: the studies of a database, or one study's trials."""

from __future__ import annotations

from dataclasses import dataclass

from tianfeng.defaults import DEFAULT_STORAGE, STORAGE_HELP
from tianfeng.options import option
from tianfeng.verbs import Verb


@dataclass(frozen=True)
class StatusOptions:
    study: str | None = option(None, "one study's trials (default: list the studies)")
    follow: bool = option(False, "follow the study until it is over: a line each time its trial counts or best "
                          "trial change (with --json, one JSON object a line); re-attaches to a submitted search")
    interval: float = option(5.0, "with --follow: seconds between looks", metavar="S")
    storage: str = option(DEFAULT_STORAGE, STORAGE_HELP, show_default=False)


VERB = Verb(
    "status", "show studies or one study's trials",
    "Without --study (and with several studies), list the studies in the database; otherwise list one study's "
    "trials.",
    "tianfeng.commands.status_command:run_status_command",
    (("tianfeng status", "the studies in tianfeng.db"),
     ("tianfeng status --study large_batch --json", "one study's trials, as JSON"),
     ("tianfeng status --study large_batch --follow", "follow a search until it is over")),
    options=StatusOptions, json=True)
