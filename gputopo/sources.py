"""Where a topology comes from: pasted nvidia-smi texts (files or stdin), a bundled example, or this machine."""
from __future__ import annotations

import codecs
import contextlib
import io
import os
import re
import stat
import sys
from dataclasses import dataclass, field

from . import parse
from .errors import BadInput, NvmlUnavailable, exclusive

# A saved `inspect --markdown` report, or an issue that quotes one: fenced blocks, maybe e-mail quoted.
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)")
QUOTE = re.compile(r"^[ \t]*(?:>[ \t]?)+")


@dataclass
class Inputs:
    """A topology (None when no GPU is visible: `status` says why), its sources, and the pasted texts."""
    topology: object = None
    sources: list = field(default_factory=list)
    status: str | None = None
    pasted: list = field(default_factory=list)  # (name, text) of each nvidia-smi text read


def examples() -> dict:
    """The bundled real machines: name -> {file, gpu_model, description} (names starting "_" are internal)."""
    import json
    from importlib import resources
    index = json.loads(resources.files("gputopo.examples").joinpath("index.json").read_text())
    return {k: v for k, v in index.items() if not k.startswith("_")}


# Tabs, line ends and ESC (nvidia-smi's underline escape) are text; other control characters are not.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x19\x1c-\x1f\x7f-\x9f]")
# A paste or a saved report is kilobytes; more is not one (and /dev/zero on stdin would never end).
MOST_TEXT = 64 * 2**20
SNIFF = 1 << 16   # bytes looked at to tell text from binary data and its encoding


def _open(path: str):
    """(name, binary stream) of a file or '-' (stdin); one line for what cannot be read: a missing file, a folder,
    a device (/dev/zero, /dev/urandom: a terminal is fine), a closed stdin."""
    if path == "-":
        if sys.stdin is None or sys.stdin.closed:
            raise BadInput("stdin is closed: give a file, or pipe the text in")
        buffer = sys.stdin.buffer
        return "stdin", buffer if hasattr(buffer, "peek") else io.BufferedReader(buffer, SNIFF)   # a test runner's
    try:
        f = open(path, "rb", buffering=SNIFF)
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a directory, not a text file") from None
    except OSError as e:
        raise BadInput(f"{path}: cannot read ({e.strerror})") from None
    mode = os.fstat(f.fileno()).st_mode
    if (stat.S_ISCHR(mode) and not f.isatty()) or stat.S_ISBLK(mode):
        f.close()
        raise BadInput(f"{path}: a device, not a file")
    return path, f


def _head(f) -> bytes:
    """The first SNIFF bytes of `f` (a buffered stream: what _open gives), left to be read."""
    return f.peek(SNIFF)[:SNIFF]


def _sniff(name: str, head: bytes, expect: str, holes: bool = False) -> str:
    """The encoding of a text that starts with `head` (a character cut at its end is no error); one line if it is
    empty or binary. `holes`: NUL bytes are let through when text is left around them (a crash or a full disk
    leaves a run of them in a log: its reader skips the lines that hold them, and says so); all NULs is binary."""
    if not head:
        raise BadInput(f"{name}: empty; paste the output of `nvidia-smi topo -m`" if expect == "nvidia-smi text"
                       else f"{name}: empty, not {expect}")
    encoding = "utf-16" if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else "utf-8-sig"
    try:
        text = codecs.getincrementaldecoder(encoding)().decode(head)
    except UnicodeDecodeError:
        encoding, text = ("latin-1", head.decode("latin-1")) if encoding != "utf-16" else (encoding, "\x00")
    if holes and encoding != "utf-16":
        text = text.replace("\x00", "") or "\x00"
    if CONTROL.search(text):
        raise BadInput(f"{name}: binary file, not {expect}")
    return encoding


def read_text(path: str, expect: str = "nvidia-smi text") -> str:
    """A pasted text from a file or '-' (stdin), at most MOST_TEXT bytes; bad files get one clear line saying what
    was expected."""
    name, f = _open(path)
    try:
        _sniff(name, _head(f), expect)   # binary junk is refused before it is read
        data = f.read(MOST_TEXT + 1)
    except OSError as e:
        raise BadInput(f"{name}: cannot read ({e.strerror})") from None
    finally:
        if path != "-":
            f.close()
    if len(data) > MOST_TEXT:
        raise BadInput(f"{name}: larger than {MOST_TEXT // 2**20} MiB, not {expect}")
    text = decode(data)
    if text is None:
        raise BadInput(f"{name}: binary file, not {expect}")
    if not text.strip():
        raise BadInput(f"{name}: empty; paste the output of `nvidia-smi topo -m`" if expect == "nvidia-smi text"
                       else f"{name}: empty, not {expect}")
    return text


@contextlib.contextmanager
def streamed_text(path: str, expect: str):
    """(name, text stream) of a file or '-' of any size, read as it is used (`inspect --nccl-log`): refused in one
    line as read_text refuses, from its first SNIFF bytes (NUL bytes amid text aside: a log's crash hole, which its
    reader skips); undecodable bytes further on read as U+FFFD."""
    name, f = _open(path)
    try:
        stream = io.TextIOWrapper(f, encoding=_sniff(name, _head(f), expect, holes=True), errors="replace",
                                  newline=None)
        try:
            yield name, stream
        finally:
            stream.detach()
    finally:
        if path != "-":
            f.close()


def decode(data: bytes) -> str | None:
    """Text as saved by a shell: UTF-8 (BOM or not), UTF-16 with a BOM (PowerShell's `>`), or latin-1;
    None for binary data (NUL or control bytes in what should be text)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError:
            return None
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            text = data.decode("latin-1")
    return None if CONTROL.search(text) else text


def example(name: str, gpu_model: str | None) -> Inputs:
    """A bundled example by name; an unknown one is refused naming how to list them."""
    index = examples()
    if name not in index:
        raise BadInput(f"--example {name}: unknown; `gputopo inspect --example list` lists them")
    e = index[name]
    from importlib import resources
    text = resources.files("gputopo.examples").joinpath(e["file"]).read_text()
    label = f"example:{name}"
    return Inputs(parse.texts([text], gpu_model or e["gpu_model"]), [label], None, [(label, text)])


def pasted(paths, gpu_model: str | None) -> Inputs:
    """Saved nvidia-smi texts, or a saved `inspect --markdown` report / issue (its fenced blocks)."""
    texts = [(("stdin" if p == "-" else p), t) for p in paths for t in unwrap(read_text(p))]
    return Inputs(parse.texts([t for _, t in texts], gpu_model, names=[n for n, _ in texts]), list(paths), None, texts)


def live() -> Inputs:
    """This machine through NVML; no GPU is an answer (status says why), not an error."""
    from . import probe
    try:
        return Inputs(probe.topology())
    except NvmlUnavailable as e:
        return Inputs(None, status=str(e))


def topology(from_file=(), example_name: str | None = None, gpu_model: str | None = None) -> Inputs:
    """The topology inspect looks at: --example, else --from-file, else this machine."""
    exclusive(example=example_name, from_file=from_file)
    if example_name:
        return example(example_name, gpu_model)
    if from_file:
        return pasted(from_file, gpu_model)
    return live()


def unquote(text: str) -> str:
    """Drop e-mail/GitHub quote marks ("> ", "> > ") at the start of every line."""
    return "\n".join(QUOTE.sub("", line) for line in text.replace("\r\n", "\n").split("\n"))


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced code block; an unclosed fence runs to the end (CommonMark)."""
    blocks, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, body = m.group(1), m.group(2), []
        i += 1
        while i < len(lines) and not re.match(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[i]):
            body.append(lines[i])
            i += 1
        blocks.append((info, "\n".join(body)))
        i += 1
    return blocks


def unwrap(text: str) -> list[str]:
    """The nvidia-smi texts inside a markdown report or issue (its fenced blocks), else the text itself."""
    plain = unquote(text)
    found = []
    for info, body in fenced_blocks(plain):
        if info.lower() == "mermaid" or not body.strip():
            continue
        try:
            parse.kind(body)
        except BadInput:
            continue
        found.append(body)
    return found or [plain]
