"""Every child ends with its parent: one place for the signals that stop a command and the processes it started.

A scheduler's kill (SIGTERM) or a dropped SSH session (SIGHUP) stops gputopo as Ctrl-C does: `stoppable()` turns
either into `Stopped`, a KeyboardInterrupt, in the main thread, so the same cleanup runs for all three (the
`finally` that ends a run's children and removes its folders). Children are started in their own session
(`spawn`), so a terminal's SIGINT does not reach them behind their parent's back, and `end` stops each one with
everything it started (torchrun and its workers, a compiler), SIGTERM first, then SIGKILL. While the parent
waits on one, a `Heartbeat` says on stderr what it waits for, at least every 15 s.
"""
from __future__ import annotations

import contextlib
import os
import signal
from time import monotonic  # bound at import: a test faking time.monotonic leaves a heartbeat's clock alone

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


# A long step is never silent on stderr for 15 s (issue 43: `plan --measure` said nothing for 3 min 21 s,
# set-up's async_io build for 529 s); it beats every 12 s, as a loaded machine wakes a 15.0 s beat at 15.x s.
HEARTBEAT_SECONDS = 12.0


def heartbeat_seconds() -> float:
    """Seconds between a heartbeat's lines: GPUTOPO_HEARTBEAT_SECONDS (tests shorten it), else HEARTBEAT_SECONDS."""
    try:
        return float(os.environ.get("GPUTOPO_HEARTBEAT_SECONDS") or HEARTBEAT_SECONDS)
    except ValueError:
        return HEARTBEAT_SECONDS


def on_stderr(line: str) -> None:
    """A progress line where progress goes (stderr: stdout stays the command's data, `--json` included)."""
    import sys
    print(line, file=sys.stderr, flush=True)


class Heartbeat:
    """While a long wait lasts (a child, a compile), a line every `every` seconds that says what is going on and
    for how long: "measuring: the model's step in a child process (45 s so far)". `what` is the text, or a
    function of the seconds so far that returns the line; `said()` restarts the count when the caller has just
    said something itself. A context manager (`with Heartbeat(...):` around the wait), or start() and stop()."""

    def __init__(self, what, say=None, every: float | None = None):
        import threading
        self.what, self.say = what, say or on_stderr
        self.every = heartbeat_seconds() if every is None else every
        self.started = self.last = monotonic()
        self._stop, self._thread = threading.Event(), threading.Thread(target=self._run, daemon=True)

    def line(self, seconds: float) -> str:
        return self.what(seconds) if callable(self.what) else f"{self.what} ({seconds:.0f} s so far)"

    def said(self) -> None:
        """A line was just said another way: the next beat comes `every` seconds from now."""
        self.last = monotonic()

    def _run(self) -> None:
        while not self._stop.wait(max(0.0, self.last + self.every - monotonic())):
            now = monotonic()
            if now - self.last >= self.every:
                self.last = now
                self.say(self.line(now - self.started))

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
