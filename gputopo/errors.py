"""Errors the CLI turns into one line on stderr and an exit code (one code per cause)."""


class GputopoError(Exception):
    """Anything gputopo reports as `Error: <message>` without a traceback; `details` are printed before it,
    one per line (each blocking doctor check before "N blocking problems")."""
    exit_code = 1

    def __init__(self, message: str = "", details: tuple[str, ...] = ()):
        super().__init__(message)
        self.details = tuple(details)


class BadInput(GputopoError):
    """A file, a paste or an option that cannot be used as given."""
    exit_code = 2


class NvmlUnavailable(GputopoError):
    """NVML could not be loaded (no driver, or driver/library mismatch)."""
    exit_code = 3


class TooFewGpus(GputopoError):
    """The request needs more GPUs than the machine (or the selection) has."""
    exit_code = 4


class DoesNotFit(GputopoError):
    """No strategy holds the model on the layout."""
    exit_code = 1


class Interrupted(GputopoError):
    """Ctrl-C, SIGTERM or SIGHUP: says what was stopped and what was kept; 128 + the signal, as a shell reports
    it (130 Ctrl-C, 129 SIGHUP, 143 SIGTERM)."""
    exit_code = 130

    def __init__(self, message: str = "", details: tuple[str, ...] = (), signum: int = 2):
        super().__init__(message, details)
        self.exit_code = 128 + signum


class InternalError(GputopoError):
    """A bug: an exception gputopo did not expect. Its own status, so a script never reads it as "nothing fits"
    (1) or a refusal (2); 70 is sysexits' EX_SOFTWARE."""
    exit_code = 70


class WriteFailed(GputopoError):
    """An output could not be written after the work (a full disk, a file system that refuses files); nothing
    half-written is left."""
    exit_code = 1


class BenchmarkFailed(GputopoError):
    """A launched benchmark process failed or hung."""
    exit_code = 5


def exclusive(**given) -> None:
    """Options that exclude each other: exclusive(example=..., from_file=...) refuses both at once."""
    names = [f"--{k.replace('_', '-')}" for k, v in given.items() if v]
    if len(names) > 1:
        raise BadInput(f"{' and '.join(names)} exclude each other: give one")
