"""Ctrl-C that is never lost and never cuts a group of database writes in half.

Python raises KeyboardInterrupt wherever the main thread happens to be; when that is a weakref
callback or a finaliser run by the garbage collector, Python prints "Exception ignored" and
goes on as if nothing happened. The handler installed here also remembers the signal, so the
search's safe points (`raise_if_interrupted`) raise it again, and `deferred_interrupt` holds it
back while writes that belong together (a study and its attributes, the requeue of cut trials)
are made."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

_pending = False


def _on_interrupt(signum, frame) -> None:
    global _pending
    _pending = True
    raise KeyboardInterrupt


def install() -> None:
    """Use the remembering handler for Ctrl-C in this process (main thread only), and keep the
    "Exception ignored" report of a swallowed one off the screen: it is raised again later."""
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_interrupt)
        sys.unraisablehook = _quiet_about_interrupts(sys.unraisablehook)


def _quiet_about_interrupts(hook):
    def unraisable(info) -> None:
        if not (info.exc_type is KeyboardInterrupt and _pending):
            hook(info)

    return unraisable


def raise_if_interrupted() -> None:
    """Raise the KeyboardInterrupt a Ctrl-C should have raised, if something swallowed it."""
    if _pending:
        raise KeyboardInterrupt


def clear() -> None:
    """The interrupt has been handled: later safe points do not raise it again."""
    global _pending
    _pending = False


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Run the block whole; a Ctrl-C that came during it is raised when it ends."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread receives signals
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous in (signal.SIG_IGN, None) or getattr(previous, "deferring", False):
        yield  # no Ctrl-C to hold, or an enclosing block holds it until its own end
        return
    global _pending
    received: list[int] = []

    def hold(signum, frame) -> None:
        received.append(signum)

    hold.deferring = True
    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        _pending = True
        raise KeyboardInterrupt


@contextlib.contextmanager
def held_for_children() -> Iterator[None]:
    """Processes started in the block begin with Ctrl-C blocked (the signal mask survives exec):
    one that comes while such a child's interpreter is still starting waits for `run_quietly`
    instead of killing the start-up with "Fatal Python error". Here it waits for the block's end."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def run_quietly(module: str, function: str, payload: bytes) -> None:
    """A spawned process's entry: `module.function(*pickle.loads(payload))`. The imports and the
    unpickling happen here, under a handler, so a Ctrl-C that reaches the process while it is
    still starting (held until now by `held_for_children`) ends it with code 130 instead of a
    traceback from the middle of an import."""
    install()
    try:
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        import importlib
        import pickle

        target = getattr(importlib.import_module(module), function)
        args = pickle.loads(payload)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    target(*args)
