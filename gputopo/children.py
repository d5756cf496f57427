"""Every child ends with its parent: one place for the signals that stop a command and the processes it started.

A scheduler's kill (SIGTERM) or a dropped SSH session (SIGHUP) stops gputopo as Ctrl-C does: `stoppable()` turns
either into `Stopped`, a KeyboardInterrupt, in the main thread, so the same cleanup runs for all three (the
`finally` that ends a run's children and removes its folders). Children are started in their own session
(`spawn`), so a terminal's SIGINT does not reach them behind their parent's back, and `end` stops each one with
everything it started (torchrun and its workers, a compiler), SIGTERM first, then SIGKILL.
"""
from __future__ import annotations

import contextlib
import os
import signal

NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the main thread is, as Ctrl-C raises KeyboardInterrupt."""

    def __init__(self, signum: int):
        super().__init__(NAMES.get(signum, f"signal {signum}"))
        self.signum = signum


def signal_of(e: BaseException) -> int:
    """The signal behind an interruption: Stopped's own, else Ctrl-C (SIGINT)."""
    return getattr(e, "signum", signal.SIGINT)


def exit_status(e: BaseException) -> int:
    """128 + the signal, as a shell reports a process a signal stopped: Ctrl-C 130, SIGHUP 129, SIGTERM 143."""
    return 128 + signal_of(e)


@contextlib.contextmanager
def stoppable():
    """SIGTERM and SIGHUP raise Stopped, and Ctrl-C KeyboardInterrupt, while the block runs (in the main thread
    only; elsewhere a no-op). The first one raises; any that follow during the cleanup are ignored, so the
    cleanup finishes and the status is the first signal's."""
    import threading
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    import sys
    raised = []

    def handler(signum, frame):
        if raised:
            return
        raised.append(signum)
        raise KeyboardInterrupt() if signum == signal.SIGINT else Stopped(signum)

    def dropped(unraisable, previous=sys.unraisablehook):
        """Raised while a finalizer ran (__del__, a GC callback), the signal's exception is dropped ("Exception
        ignored in ..."), and the command would run on to exit 0: deliver the signal again, to land after it."""
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and raised:
            # from another thread, so the handler runs in the main thread once it is out of the finalizer
            threading.Timer(0.05, os.kill, (os.getpid(), raised.pop())).start()
        else:
            previous(unraisable)
    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    old_hook, sys.unraisablehook = sys.unraisablehook, dropped
    try:
        yield
    finally:
        sys.unraisablehook = old_hook
        if not raised:   # once stopped, repeats stay ignored until the process exits with the first one's status
            for s, h in old.items():
                signal.signal(s, h)


def spawn(cmd: list[str], **kwargs):
    """Popen in a session of its own, so `end` can stop it with everything it starts."""
    import subprocess  # here: the CLI's fast paths start nothing
    return subprocess.Popen(cmd, start_new_session=True, **kwargs)


def end(proc, grace: float = 10) -> None:
    """Stop a child started by `spawn` and everything in its session: SIGTERM, then SIGKILL after `grace` s."""
    import subprocess
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
