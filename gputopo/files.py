"""Output files: checked before the work starts, written atomically, never overwritten without --force."""
from __future__ import annotations

import os

from .errors import BadInput, WriteFailed


def check_output(path: str | None, force: bool = False, what: str = "--output") -> None:
    """Refuse now, before any work, an output path that could not be written at the end: a temporary file is
    made and removed in its folder, as write_atomic will (a folder may be writable to the permission bits and
    still refuse files: /proc, a read-only mount)."""
    if not path:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise BadInput(f"{what} {path}: is a directory; give a file name")
    if not os.path.isdir(folder):
        said = os.path.dirname(path) or folder
        raise BadInput(f"{what} {path}: {said} is a file, not a folder" if os.path.exists(folder) else
                       f"{what} {path}: folder {said} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise BadInput(f"{what} {path}: folder {os.path.dirname(path) or folder} is not writable")
    if os.path.exists(path) and not force:
        raise BadInput(f"{path} exists; pass --force to overwrite it")
    import tempfile
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".probe")
    except OSError as e:
        raise BadInput(f"{what} {path}: files cannot be created in {os.path.dirname(path) or folder}"
                       f" ({e.strerror})") from None
    os.close(fd)
    os.unlink(tmp)


def write_atomic(path: str, data: str | bytes) -> None:
    """Write to a temporary file in the same folder, then os.replace it into place (as pip's adjacent_tmp_file):
    a failure leaves the old file or nothing, never half a file."""
    import tempfile  # here: inspect of a paste writes nothing and should not pay for it
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    except OSError as e:
        raise WriteFailed(f"{path}: not written ({e.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        mode = 0o666 & ~_umask()
        os.chmod(tmp, mode)  # mkstemp makes 0600; a config is as readable as any file the user writes
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise WriteFailed(f"{path}: not written ({e.strerror}); nothing was left there") from None
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_picture(path: str | None, force: bool, what: str = "--plot", suffixes=(".png", ".svg")) -> None:
    """An output picture: a file name with a suffix matplotlib writes, checked like any output, and matplotlib."""
    import importlib.util
    if not path:
        return
    if path == "-" or not path.lower().endswith(suffixes):
        raise BadInput(f"{what} {path}: give a {' or '.join(suffixes)} file name")
    check_output(path, force, what)
    if importlib.util.find_spec("matplotlib") is None:
        raise BadInput(f"{what} needs matplotlib: pip install matplotlib")
