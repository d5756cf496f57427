"""Output files: checked before the work starts, written atomically, never overwritten without --force; stdout
that cannot be written; caches read and written without following a link."""
from __future__ import annotations

import io
import os
import stat

from .errors import BadInput, WriteFailed

KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
         (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def not_replaceable(path: str) -> str | None:
    """What `path` is when an output may not replace it, else None (nothing there, or a regular file).

    An output replaces only a regular file, as coreutils and git do: a device, FIFO or socket is never replaced
    (`-o /dev/null` as root would make /dev/null a file), and neither is a symbolic link, whatever it points at:
    replacing the link would drop it, writing through it would write where the user did not name (/dev/stdout
    is a link to whatever stdout is)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    kind = next((name for test, name in KINDS if test(mode)), None)
    if kind is None or not stat.S_ISLNK(mode):
        return kind
    try:
        target = os.readlink(path)
    except OSError:
        return kind
    return f"{kind} to {target}"


def check_output(path: str | None, force: bool = False, what: str = "--output") -> None:
    """Refuse now, before any work, an output path that could not be written at the end: a temporary file is
    made and removed in its folder, as write_atomic will (a folder may be writable to the permission bits and
    still refuse files: /proc, a read-only mount)."""
    if not path:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise BadInput(f"{what} {path}: is a directory; give a file name")
    kind = not_replaceable(path)
    if kind:
        raise BadInput(f"{what} {path}: {kind}, not a regular file; gputopo replaces only regular files"
                       + (" (`-` is stdout)" if what == "--output" else ""))
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
    a failure leaves the old file or nothing, never half a file. A file replaced (--force) keeps its mode, and its
    owner and group where this process may give them (root; a group it is in), as `sed -i` keeps them: a private
    0600 file stays private, a file of another user stays theirs."""
    import tempfile  # here: inspect of a paste writes nothing and should not pay for it
    folder = os.path.dirname(os.path.abspath(path))
    old = _regular(path)
    kept = "the old file is kept as it was" if old else "nothing was left there"
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    except OSError as e:
        raise WriteFailed(f"{path}: not written ({e.strerror}); {kept}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        old = _regular(path) or old   # the file as it is now: replaced while the work ran, it is that one's
        os.chmod(tmp, _take_over(tmp, old) if old else 0o666 & ~_umask())   # mkstemp makes 0600
        kind = not_replaceable(path)   # checked before the work, and again: the work may have taken minutes
        if kind:
            raise WriteFailed(f"{path}: not written: it is {kind} now, and gputopo replaces only regular files")
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise WriteFailed(f"{path}: not written ({e.strerror}); {kept}") from None
        raise


def _regular(path: str) -> os.stat_result | None:
    """The stat of the regular file at `path` (not followed through a link), else None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def _take_over(tmp: str, old: os.stat_result) -> int:
    """Give `tmp` the owner and group of the file it replaces, where allowed (chown first: it clears the set-id
    bits); the mode to give it: the old one, without set-user/group-ID where the owner could not be kept."""
    mine = True
    if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
        for uid, gid in ((old.st_uid, old.st_gid), (-1, old.st_gid)):   # root gives both; a user, a group of theirs
            try:
                os.chown(tmp, uid, gid)
                mine = uid != -1 or old.st_uid == os.geteuid()
                break
            except OSError:
                mine = False
    mode = stat.S_IMODE(old.st_mode)
    return mode if mine else mode & ~(stat.S_ISUID | stat.S_ISGID)


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


def read_own(path, most: int) -> bytes | None:
    """A file gputopo writes for itself (a cache): its bytes when it is a regular file of at most `most` bytes,
    else None. A link is not followed, a FIFO not waited on, a device not read (/dev/zero never ends), a folder
    not opened as a file (fdopen refuses one: it is checked first)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(most + 1)
    except OSError:   # unreadable after all (an I/O error, a file system gone): no cache, never a failure
        return None
    finally:
        os.close(fd)
    return data if len(data) <= most else None


class Stdout:
    """sys.stdout whose failures are one line and exit 1, as any output that could not be written: a full disk
    (`> /dev/full`), a closed pipe (`| head -1`) or a stdout closed before the start (`>&-`), instead of an
    OSError the command line would call a bug, or output silently dropped. After a failure fd 1 points at
    /dev/null, so nothing more is tried and the interpreter's last flush says nothing (the handling Python's
    documentation recommends for SIGPIPE)."""

    def __init__(self, stream):
        self._stream = stream
        self.encoding, self.errors = getattr(stream, "encoding", "utf-8"), getattr(stream, "errors", "strict")

    def __getattr__(self, name):
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()

    def write(self, text):
        if self._stream is None:
            raise WriteFailed("stdout is closed: nothing written (redirect it to a file, or to /dev/null)")
        if not text:   # click writes "" to test the stream; unbuffered, /dev/full refuses even that
            return 0 if isinstance(text, str) else self._stream.write(text)
        return self._do(self._stream.write, text)

    def flush(self):
        if self._stream is not None:
            self._do(self._stream.flush)

    @staticmethod
    def _do(call, *args):
        try:
            return call(*args)
        except OSError as e:
            _to_null(1)   # what is still buffered goes there, at the next flush or the interpreter's last
            raise WriteFailed(f"stdout: not written ({e.strerror or e}); what was printed is incomplete") from None


def _to_null(fd: int) -> None:
    null = os.open(os.devnull, os.O_WRONLY)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)


def guard_stdout() -> None:
    """Put Stdout in place for the process (the command line's main); a closed fd 1 gets /dev/null at once, so no
    file opened later takes its number."""
    import sys
    if sys.stdout is None:
        try:
            os.fstat(1)
        except OSError:
            _to_null(1)
    stream = sys.stdout
    if stream is not None and isinstance(getattr(stream, "buffer", None), io.RawIOBase):
        # PYTHONUNBUFFERED / -u: the text layer writes straight to the file, and a short write (a disk filling up)
        # drops the rest unsaid; the buffered stdout Python gives by default retries it, then raises (Stdout).
        unbuffered = stream
        stream = io.TextIOWrapper(io.BufferedWriter(stream.buffer), encoding=stream.encoding, errors=stream.errors,
                                  line_buffering=stream.line_buffering)
        stream.unbuffered = unbuffered   # kept alive: collected, it would close the file under the new one
    sys.stdout = Stdout(stream)
