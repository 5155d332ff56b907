"""A submitted worker of a search whose spec holds more than its command-line options (a scale
study's search: the batch pinned, extra `set:` entries, an epoch budget): the submitting process
writes the spec to a file beside the job's script and each task runs
`python -m tianfeng.hpo.running.spec_worker PLAN` with it, joining the study as one local worker."""

from __future__ import annotations

import dataclasses
import pickle
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from tianfeng.hpo.running.runner import run_search
    from tianfeng.hpo.running.submitted import worker_options
    from tianfeng.terminal.logs import setup_logging

    setup_logging()
    spec = pickle.loads(Path((argv or sys.argv[1:])[0]).read_bytes())  # written by this user's own search
    spec = dataclasses.replace(spec, options=worker_options(spec))
    try:
        run_search(spec, 1, resume=True)
    except KeyboardInterrupt:  # the batch shell's trap: the trial is queued again
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
