"""The live view of a running search on an interactive terminal: trials finished against the
budget, best so far, pruned and failed counts, the running trials with the epoch each reached,
elapsed time and ETA, refreshed every few seconds. Per-trial log lines scroll above it. Not a
terminal: nothing but the per-trial lines."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

import optuna
from optuna.trial import FrozenTrial, TrialState

from tianfeng.hpo.judge.outcomes import Outcome, count_outcomes
from tianfeng.hpo.judge.scores import best_trial, epochs_reported, score
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.terminal.run_progress import progress_bar


class StudyProgress:
    def __init__(self, total: int | None, metric: str, *, enabled: bool = True) -> None:
        self.metric = metric
        self.enabled = enabled and sys.stderr.isatty()
        self._progress = progress_bar("search", enabled=self.enabled)
        self._task = self._progress.add_task("", total=total)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> StudyProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._progress.stop()

    def follow(self, study: optuna.Study, every_s: float = 3.0) -> None:
        """Refresh from the study every `every_s` seconds (running trials' epochs move between
        trial ends), on a terminal only."""
        if not self.enabled or self._thread is not None:
            return

        def refresh() -> None:
            while not self._stop.wait(every_s):
                with contextlib.suppress(Exception):  # a busy database: the next refresh tries again
                    self.update(study)

        self._thread = threading.Thread(target=refresh, name="tianfeng-progress", daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def hidden(self) -> Iterator[None]:
        """The bar off the terminal while another live view (a promoted run's) has it."""
        self._progress.stop()
        try:
            yield
        finally:
            self._progress.start()

    def update(self, study: optuna.Study, *_: object) -> None:
        """Also usable as an Optuna callback: `(study, trial)`."""
        if not self.enabled:
            return
        trials = study.get_trials(deepcopy=False)
        count = count_outcomes(trials)
        top = best_trial(study)
        best = f"best {score(top):.4g} (#{top.number})" if top else "no result yet"
        interrupted = f"  interrupted {count[Outcome.INTERRUPTED]}" if count[Outcome.INTERRUPTED] else ""
        # the budget counts failed trials; interrupted ones continue as new trials
        self._progress.update(self._task,
                              completed=count[Outcome.COMPLETED] + count[Outcome.PRUNED] + count[Outcome.FAILED],
                              description=f"{best}  pruned {count[Outcome.PRUNED]}  failed {count[Outcome.FAILED]}"
                                          f"{interrupted}  {running_text(trials)}")


def running_text(trials: list[FrozenTrial], shown: int = 3) -> str:
    """`running #12 ep 3/8, #13 ep 1/8`: the running trials and the epoch each reached."""
    running = [t for t in trials if t.state == TrialState.RUNNING]
    if not running:
        return "running 0"
    parts = []
    for t in running[:shown]:
        phases = (t.user_attrs.get(TrialKey.CONFIG) or {}).get("phases") or []
        total = sum(p.get("epochs", 0) for p in phases)
        parts.append(f"#{t.number} ep {epochs_reported(t)}/{total}" if total else f"#{t.number}")
    more = f" +{len(running) - shown}" if len(running) > shown else ""
    return "running " + ", ".join(parts) + more
