"""A run its scheduler asks to stop: SIGTERM (a preemption, `scancel`, a requeue, torchrun
ending its workers) or SIGUSR1 (Slurm's warning before the time limit). The handler only notes
the signal; the engine agrees with every rank at its next check, writes a checkpoint after that
step and raises `Signalled`, so the restarted run repeats no step. Where no check would come soon
and waiting saves nothing new (starting up, a step that compiles), the run leaves at once instead
(`Left`): a scheduler kills what outlives its grace period (Slurm's KillWait, 30 s by default).
Installed by `tianfeng train` (what torchrun and Slurm start), not inside a search's trials,
whose workers have their own Ctrl-C handling."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
_received: list[int] = []
_leaving_at_once: list[str] = []  # where the run is while a stop signal ends it at once


class Signalled(Exception):  # noqa: N818 (a way a run ends, as StopIteration is)
    """The run stopped on a signal after writing its checkpoint; it resumes from it."""

    def __init__(self, signum: int, where: str) -> None:
        super().__init__(f"stopped on {signal.Signals(signum).name} {where}: checkpoint written, the run "
                         f"resumes from it")
        self.signum = signum


class Left(BaseException):  # noqa: N818 (a BaseException, so that no library's `except Exception` keeps the run)
    """The run left on a signal where nothing was trained since its last checkpoint: it resumes
    from that checkpoint, or starts again if it has none."""

    def __init__(self, signum: int, where: str) -> None:
        super().__init__(f"stopped on {signal.Signals(signum).name} {where}: nothing trained since the last "
                         f"checkpoint, so none written; the run resumes from the last one")
        self.signum = signum


def ignore_in_loader_worker(_worker_id: int) -> None:
    """A DataLoader's `worker_init_fn`: a scheduler signals every process of the job, and torch's
    own SIGTERM handler ends a loader worker not signalled by its parent, which would end the
    epoch with an error before the run could checkpoint. The workers still end with the run."""
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # held since the fork (held_while_forking)


@contextmanager
def held_while_forking() -> Iterator[None]:
    """Stop signals held, not lost, while a DataLoader forks its workers: a worker inherits the
    mask, so a signal cannot reach it before `ignore_in_loader_worker` runs; this process gets
    any that came once the workers exist."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def received() -> int | None:
    """The first stop signal since the handlers were installed, if any."""
    return _received[0] if _received else None


@contextmanager
def leaving_at_once(where: str) -> Iterator[None]:
    """While inside, a stop signal (or one that came before) raises `Left` where the process is:
    for stretches with nothing to save and no check to wait for, such as starting up or a step
    that compiles (torch.compile takes minutes and cannot stop halfway with a consistent state)."""
    if _received:
        raise Left(_received[0], where)
    _leaving_at_once.append(where)
    try:
        yield
    finally:
        _leaving_at_once.pop()


def _note(signum: int, _frame: object) -> None:
    _received.append(signum)
    if _leaving_at_once:
        raise Left(signum, _leaving_at_once[-1])


@contextmanager
def checkpoint_on_stop_signals() -> Iterator[None]:
    """While inside, a stop signal is noted for the engine instead of ending the process."""
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    _received.clear()
    for s in STOP_SIGNALS:
        signal.signal(s, _note)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _received.clear()
