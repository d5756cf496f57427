"""An NCCL_DEBUG=INFO log -> which transport NCCL chose between GPUs and hosts, and why (issue 20). Stdlib only,
pure: no torch, no machine access.

`parse(source)` reads a log as people paste it, from NCCL 2.3 on: the old `Ring 00 : 0[0] -> 1[1] via P2P/IPC`
and the new `Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read` forms; several hosts and processes interleaved,
even within one line (it splits at each `NCCL INFO`); anything before `host:pid:tid [dev] NCCL INFO` (mpirun's
`[1,0]<stdout>:`, pdsh's `host: `, timestamps, Python logging, Markdown quotes and fences, a TUI's box
characters, line numbers) or no prefix at all; CRLF, blank lines, the program's own output in between; fences and
a GitHub comment's HTML tags (`</details>`) wherever they stand. Lines a terminal cut at a fixed width or an
editor wrapped at spaces are joined back (a connection the way that makes it whole, a prefix a long host name
split, a variable's line and its value); a line cut at the end of a paste is read as far as it goes. Two lines
glued without a newline are split at the second's prefix when its host was seen before (`...GDRDMAnode2:...` is
node2's); when it was not, both halves are left out and counted ("damaged"), never read as a host of their own.
An excerpt `--markdown` kept says how many lines it left out, and the summary says its counts are the excerpt's.
A file is read as it streams, in memory that holds what the log says (distinct connections, the first lines for
--markdown), not the log, up to the bounds of MOST: past one the rest is counted ("unread") and a finding names
it. A line longer than LONGEST_LINE is cut there ("cut"), and the record the cut fell in is not read. A text
without one NCCL line is refused (BadInput); anything else is read for what it holds and never raises.

`summary(log, topology=None)` is the "nccl" object of `gputopo inspect --nccl-log --json` (docs/inspect.md):
  version         "2.18.5" from `NCCL version ...` (PyTorch's error spelling "21.0.3" read as 2.10.3), else null
  hosts           host names in the order first seen (log prefixes, nccl-tests' "Rank N ... on HOST" header)
  ranks_per_host  {host: ranks seen on it, or the GPUs its lines come from where no rank number is printed}
  nranks          the largest rank count an init line states, else null
  transports      {KIND: connection lines seen}, KIND as below
  gdrdma          true if a network connection used GPUDirect RDMA (`/GDRDMA`); false if there were network
                  connections and none did (NET/Socket never does); null if there were none
  channels        "N coll channels" (the largest), else the ring lists' channel count, else null
  nvls            true: NVLS set up (its lines, or "N nvls channels" > 0); false: 0 nvls channels,
                  NCCL_NVLS_ENABLE=0 or no multicast support; null: the log does not say
  nvls_available  "NVLS multicast support is (not) available" on any GPU, else null
  collnet         true: CollNet connections; false: "0 collnet channels", NCCL_COLLNET_ENABLE=0 or NCCL's
                  "CollNet is not supported" warning; null otherwise (a collnet channel count alone is not use)
  env             {NCCL_*: value} from "set by environment to", "set to", a plugin's "Setting NCCL_X to", and
                  `NCCL_X=value` on a pasted command line (NCCL's own lines win)
  settings        {NCCL_*: what it changes} for the variables set that change NCCL's choice of transport
  pairs           one entry per distinct connection: {"from", "to", "transport", "detail", "side", "gdr",
                  "lines"}; "from"/"to" are "HOST GPU d" (d: NVML's index, as nvidia-smi numbers GPUs, where the
                  log prints it, else the CUDA device), "HOST rank r" when the GPU is unknown, "rank r (GPU d)"
                  when the prefix with the host was stripped
  warnings        the distinct messages of NCCL WARN lines (the first 50)
  findings        sentences a person acts on
  cross_check     with a topology: {"hosts", "gpu_numbers": "nvml"|"cuda"|"mixed"|null, "pairs": [{"host", "from",
                  "to", "transport", "link", "expected"}]}, else null
  lines           {"nccl": NCCL lines read, "connections", "rings", "trees", "damaged": halves of glued lines
                  left out, "left_out": lines an excerpt says it left out, "cut": lines cut at LONGEST_LINE,
                  "unread": lines past a bound of MOST, counted, "nul": lines that held NUL bytes, skipped}

KIND (each connection line NCCL printed counts once; a cut last line counts once its transport's name is
whole, e.g. `via P2P/I`; NVLS and CollNet count their setup lines):
  P2P         P2P/IPC, P2P/CUMEM, P2P/direct pointer, P2P/MNNVL, P2P/indirect (with /read or /CE)
  SHM         SHM/direct/direct, and NCCL 2.7's "via direct shared memory"
  NET/IB      NET/IB, and the HPC-X plugin's NET/IBext, NET/IBext_v8, ... (the same verbs transport)
  NET/Socket  NET/Socket
  NVLS        NVLink SHARP prints no per-peer line: each "NVLS comm ... headRank" or "Connected NVLS tree"
  COLLNET     "CollNet 00/0 : 3 [send] via COLLNET/..." (and the older "Coll 00 :" form)
  NET/<name>  any other network plugin, under the name NCCL prints after NET/ ("NET/AWS Libfabric" of
              aws-ofi-nccl, "NET/OFI", "NET/FastSocket", ...): what it runs on is the plugin's business, so it is
              neither folded into NET/IB nor into NET/Socket.
Words that name a transport without being a connection ("P2P plugin IBext_v8", "use ring PXN 0 GDR 1",
"Using network IB") are not counted.
"""
from __future__ import annotations

import io
import itertools
import re
from collections import Counter
from dataclasses import dataclass, field

from .errors import BadInput
from .health import P2P_LEVELS, expected_transport, link_level, p2p_limit, switch_on
from .parse import ANSI
from .topology import Topology, kind_of, rank

KINDS = ("P2P", "SHM", "NET/IB", "NET/Socket", "NVLS", "COLLNET")
RUN_WITH = "run the job with NCCL_DEBUG=INFO and give its output (every rank's stdout and stderr)"

MARKER = re.compile(r"\bNCCL (INFO|WARN|TRACE|ABORT)\b ?")
# Numbers read are at most 9 digits (`\d{1,9}`; a count an excerpt left out, 18): a longer run is no rank, device or
# count NCCL prints, so its line is odd and left unread, never given to int() (which refuses 4,301 digits).
# What a process prints before its marker: host:pid:tid [cudaDev], and on WARN lines the source file:line.
PREFIX = re.compile(r"(?:(?P<host>[\w.<>-]+):(?P<pid>\w+):\w+\s+)?(?:\[(?P<dev>\d{1,9})\]\s+)?(?:[\w./-]+:\d+\s+)?$")
# A host's name starts where a run of its characters does (the look-behind): without it a long run of them is
# searched from each of its characters, time that grows with the square of the line's length.
HOST_PID = re.compile(r"(?<![\w.<>-])[\w.<>-]+:\w+:\w+\s+\[\d+\]")
# The common line, prefix from column 0 (one match instead of a search back from the marker); a longer prefix (a
# host name of 256 characters and more) is read the slow way, which looks PREFIX_REACH back.
STANDARD = re.compile(r"(?P<host>[\w.<>-]{1,255}):(?P<pid>\w{1,20}):\w{1,20}\s{1,8}\[(?P<dev>\d{1,9})\]\s{1,8}"
                      r"NCCL (INFO|WARN|TRACE|ABORT)\b ?")
PREFIX_REACH = 300  # a prefix is a few dozen characters: looking further back only costs time on junk
CONNECTION = re.compile(r"\b(Channel|Ring) (\d{1,9})(?:/\d+)? : (\d{1,9})(?:\[(\w{1,16})\])? -> (\d{1,9})"
                        r"(?:\[(\w{1,16})\])?(?:\s*\[(send|receive)\])?\s+via (.*)")
COLLNET_CONNECTION = re.compile(r"\b(?:CollNet|Coll) (\d{1,9})(?:/\d+)? : (\d{1,9}) \[(send|receive)\]"
                                r" via (COLLNET/.*)")
VERSION = re.compile(r"\bNCCL version (\d{1,9})\.(\d{1,9})\.(\d{1,9})(?!\d)")
ENV = re.compile(r"\b(NCCL_[A-Z0-9_]+) set (?:by environment )?to (.+)")
PLUGIN_ENV = re.compile(r"\bSetting (NCCL_[A-Z0-9_]+) (?:environment variable )?to (\S+)")
COMMAND_ENV = re.compile(r"(?<![\w$])(NCCL_[A-Z0-9_]+)=(\S+)")
# A pasted command line: it starts with VAR=value (after a shell prompt, `export` or `env`), or passes -x/-e NCCL_*
# to mpirun or docker. Prose that mentions NCCL_X=1 sets nothing.
COMMAND_LINE = re.compile(r"^\s*(?:\S*[$#]\s+)?(?:(?:export|env)\s+)?[A-Za-z_]\w*=\S|(?:^|\s)(?:-x|-e|--env)\s+NCCL_")
INIT = re.compile(r"\brank (\d{1,9}) nranks (\d{1,9}) cudaDev (\d{1,9})(?!\d)(?: nvmlDev (\d{1,9})(?!\d))?"
                  r"(?: busId ([0-9a-fA-F]{1,16})(?!\w))?")
COMM = re.compile(r"\brank (\d{1,9}) nRanks (\d{1,9}) nNodes (\d{1,9})(?!\d)")
CHANNELS = re.compile(r"\b(\d{1,9}) coll channels, (?:(\d{1,9}) collnet channels, )?(?:(\d{1,9}) nvls channels)?")
# A ring list: "Channel 00/08 :    0   1 ..." (the count has two digits, where a connection's index has one), or
# NCCL 2.4's "Channel 00 :    0   1 ..." without the count.
RING_LIST = re.compile(r"\bChannel (\d{1,9})(?:/(\d{2,9}) :(?:\s+\d+)+| :(?:\s+\d+){2,})\s*$")
RING_GRAPH = re.compile(r"\bRing \d+ : -?\d+ -> -?\d+ -> -?\d+")
TREE = re.compile(r"\bTrees? (?:\[\d+\]|\d+ : )")
NVLS_SUPPORT = re.compile(r"\bNVLS multicast support is (not )?available")
NVLS_SETUP = re.compile(r"\bConnected NVLS tree|\bNVLS comm 0x[0-9a-fA-F]+ headRank")
P2P_FAILED = re.compile(r"\bCould not enable P2P between dev (\d{1,9})\(=\w+\) and dev (\d{1,9})\(=\w+\)")
NETWORK = re.compile(r"\bUsing (?:internal )?[Nn]etwork (\w+)")
IB_DEVICES = re.compile(r"\bNET/IB ?: ?(?:Using \[\d|\[\d+\] \w)")
IB_ABSENT = re.compile(r"\bNET/IB ?: ?No device found|\bFailed to open libibverbs")
COLLNET_OFF = re.compile(r"\bCollNet is not supported")
TESTS_RANK = re.compile(r"^\s*#\s*Rank\s+(\d{1,9})\s+(?:Group\s+\d+\s+)?Pid\s+(\d{1,20})\s+on\s+(\S{1,255})\s+device\s+"
                        r"(\d{1,9})(?!\d)")
CONNECTION_HEAD = re.compile(r"(?:Channel|Ring|CollNet|Coll)\s+\d")
OLD_RING_LIST = re.compile(r"Ring \d+ :(?:\s+\d+)+\s*$")
# What follows "via" as NCCL prints it (a wrapped line is joined back the way that reads as one of these).
DETAIL = re.compile(r"P2P/(?:IPC|CUMEM|direct pointer|MNNVL|indirect/\d+\[\w+\])(?:/read|/CE)*|SHM/\w+/\w+"
                    r"|NET/(?:AWS Libfabric|[A-Za-z]\w*)/\d+(?:\(\d+\))?(?:/GDRDMA)?(?:/Shared)?|direct shared memory")
PIECE = re.compile(r"\s*\S{1,24}\s*")   # the rest of a name a wrap cut (`RDMA`, `/read`)
ENV_OPEN = re.compile(r"\b(Setting )?NCCL_[A-Z0-9_]+ ([a-z][a-z ]*)$")   # a variable's line, cut before its value
FULL_PREFIX = re.compile(r"(?<![\w.<>-])[\w.<>-]+:\w+:\w+\s+\[\d+\]\s+NCCL (?:INFO|WARN|TRACE|ABORT)\b")

LONGEST_LINE = 65_536      # the rest of a longer line is dropped, and said: no line of NCCL's is near it
LONGEST_DETAIL = 200       # what follows "via" kept: NCCL's is under 60 characters, the rest glued text
CHUNK = 1 << 18            # characters read at a time
WIDTH_SAMPLE = 2_000       # lines read to tell a hard-wrapped text's width
KEPT_CHARS = 40_000        # the log lines --markdown keeps: GitHub refuses comments over 65,536 characters
LEFT_OUT = "... {} more lines left out (attach the whole log)"
LEFT_OUT_LINE = re.compile(r"\s*\.\.\. (\d{1,18}) more lines left out \(attach the whole log\)")
MOST_WARNINGS = 50         # distinct WARN messages kept
# What memory holds, however long the log (docs/options.md, "Limits"): past a bound the rest is counted, not read, and
# a finding names the bound. 4,096 hosts is a 32,768-GPU job on 8-GPU machines.
MOST = {"hosts": 4096, "ranks": 131_072, "distinct connections": 100_000, "NCCL_* variables": 512, "networks": 64,
        "GPUs or processes on one host": 256, "P2P failures": 4096}
# Markdown fences and the HTML tags of a GitHub comment (`<details>`), wherever a paste left them: never NCCL's.
BACKTICKS, TILDES = re.compile("```+"), re.compile("~~~+")   # apart: a pattern opening with a literal is quick
TAG = re.compile(r"</?(?:details|summary|pre|code|br|p|div|span|b|i|em|strong|kbd|sub|sup|tt)\b[^<>\n]{0,200}>", re.I)


@dataclass
class Rank:
    """One rank as the log shows it: where it runs and on which GPU."""
    rank: int
    host: str | None = None
    pid: str | None = None
    cuda_dev: int | None = None   # the [d] after host:pid:tid, or an init line's cudaDev
    nvml_dev: int | None = None   # nvidia-smi's number: an init line's nvmlDev, or a new-format bracket
    bus_id: str | None = None     # "1a000", as NCCL prints it


@dataclass
class Connection:
    """One connection line, e.g. `Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA`."""
    kind: str
    detail: str                   # after "via", as printed: "P2P/CUMEM/read", "NET/IB/0/GDRDMA"
    src: int | None = None        # ranks (None where the line names none: NVLS, CollNet's far end)
    dst: int | None = None
    src_dev: str | None = None    # the brackets as printed: a device number or a bus id
    dst_dev: str | None = None
    channel: int | None = None
    side: str | None = None       # "send" or "receive", on network lines
    gdr: bool | None = None       # GPUDirect RDMA, on network lines
    host: str | None = None       # the host of the process that printed it
    old_form: bool = False        # `Ring NN :` (NCCL < 2.7): a small number in brackets is (mostly) the CUDA device
    lines: int = 1                # the connection lines that said the same (channels aside)


@dataclass
class NcclLog:
    """What a log says (see parse)."""
    version: str | None = None
    versions: dict = field(default_factory=dict)      # host -> the version its own line printed
    hosts: dict = field(default_factory=dict)         # host -> None, in the order first seen
    ranks: dict = field(default_factory=dict)         # rank -> Rank
    processes: dict = field(default_factory=dict)     # host -> {(pid, cuda dev)} of the lines it printed
    connections: list = field(default_factory=list)
    channels: int | None = None
    coll_channels: int | None = None
    ring_channels: int | None = None
    nvls_channels: int | None = None
    collnet_channels: int | None = None
    ring_lines: int = 0
    tree_lines: int = 0
    nvls: bool | None = None
    nvls_available: bool | None = None
    collnet: bool | None = None
    collnet_refused: bool = False
    env: dict = field(default_factory=dict)
    command_env: dict = field(default_factory=dict)   # NCCL_X=value on a pasted command line
    warnings: list = field(default_factory=list)
    networks: list = field(default_factory=list)      # "Using network X"
    ib_devices: bool = False                          # NET/IB listed devices
    ib_absent: str | None = None                      # NCCL's words for finding no IB
    p2p_failures: set = field(default_factory=set)    # (host, cuda dev, cuda dev): "Could not enable P2P"
    nranks: int | None = None
    nnodes: int | None = None
    lines: int = 0
    read: list = field(default_factory=list)          # the first lines that said something, as given (_keep)
    read_chars: int = 0
    read_left: int = 0                                # lines that said something, not kept in `read`
    left_out: int = 0                                 # lines an excerpt of the log says it left out
    damaged: int = 0                                  # halves of glued lines whose host could not be told
    cut: int = 0                                      # lines longer than LONGEST_LINE, cut there
    unread: int = 0                                   # lines past a bound of MOST, counted, not read
    holed: int = 0                                    # lines that held NUL bytes (a crash's hole), skipped
    full: dict = field(default_factory=dict)          # the bounds of MOST reached, in the order reached
    distinct: dict = field(default_factory=dict)      # connection key -> its Connection in `connections`


# ---------------------------------------------------------------- reading the text

def parse(source) -> NcclLog:
    """Read an NCCL_DEBUG=INFO log (see the module docstring): `source` is its text or a text stream (a file, read
    as it streams: memory holds what the log says, not the log). BadInput if it holds no NCCL line."""
    log = NcclLog()
    printed: dict = {}   # a prefix as printed -> (where, level, host kept): a process prints many lines, read once
    for line in _lines(source):
        if type(line) is Holed:   # part of it may be lost in the hole: a half record is never read
            log.holed += 1
            continue
        m = STANDARD.match(line) if type(line) is str else None
        end = m.end() if m is not None else 0
        if end and line.find("NCCL ", end) < 0:   # most lines: one process's, its prefix from column 0
            known = printed.get(m[0])
            if known is None:
                if len(printed) > 2_000:   # a log of ever new processes: memory stays bounded
                    printed.clear()
                where = (m["host"], m["pid"], int(m["dev"]))
                known = printed[m[0]] = (where, m[4], _process(log, where))
            log.lines += 1
            if not known[2]:   # a host past MOST's bound
                log.unread += 1
                continue
            text = line[end:].strip()
            if known[1] == "WARN":
                _warn(log, text)
            _message(log, known[0], text)
            said = True
        else:
            said = False
            records = _records(log, line)
            if type(line) is Cut:   # the last record is the one the cut fell in: never read as a connection
                log.cut += 1
                records = records[:-1]
            for where, level, message in records:
                said = _read(log, where, level, message) or said
        if said:
            if log.read_left:
                log.read_left += 1
            else:
                _keep(log, line)
    if not log.lines:
        cut = f" (in what is left of {log.cut} line(s) cut at {LONGEST_LINE:,} characters)" if log.cut else ""
        raise BadInput(f"no NCCL_DEBUG=INFO lines{cut}: {RUN_WITH}")
    _finish(log)
    return log


def _keep(log: NcclLog, line: str) -> None:
    """The first KEPT_CHARS characters of the lines that said something, for --markdown; the rest counted."""
    if log.read_left or log.read_chars + len(line) + 1 > KEPT_CHARS:
        log.read_left += 1
    else:
        log.read.append(line)
        log.read_chars += len(line) + 1


def excerpt(log: NcclLog) -> list[str]:
    """The lines kept, and a last line saying how many more the log held (`parse` reads it back as such)."""
    left = log.read_left + log.left_out
    return log.read + ([LEFT_OUT.format(left)] if left else [])


class Cut(str):
    """A physical line longer than LONGEST_LINE, kept that long (parse says so, and reads no connection from the
    record the cut fell in)."""


class Holed(str):
    """A physical line that held NUL bytes: the hole a crash, a full disk or a truncating writer leaves in a log
    file. What was written before and after the hole is not whole, so parse skips the line and counts it."""


def _holed(lines: list[str]) -> list[str]:
    """`lines` with those holding a NUL marked Holed (their NULs dropped: a quoted line stays printable)."""
    return [Holed(line.replace("\x00", "")) if "\x00" in line else line for line in lines]


def _bounded(line: str) -> str:
    """`line`, or its first LONGEST_LINE characters as a Cut."""
    return line if len(line) <= LONGEST_LINE else Cut(line[:LONGEST_LINE])


def _raw(source):
    """Lists of physical lines without their ends (\\n, \\r\\n or \\r), escapes and markup, read CHUNK characters
    at a time (a line that held NULs marked Holed); a line longer than LONGEST_LINE is kept that long, as a Cut (a
    file without a newline is read in bounded memory too)."""
    stream = io.StringIO(source, newline=None) if isinstance(source, str) else source
    carry, skipping, first = "", False, True
    for chunk in iter(lambda: stream.read(CHUNK), ""):
        if first:
            chunk, first = chunk.lstrip("\ufeff"), False
        end = chunk.rfind("\n")
        if end < 0:   # no line ends here: the line goes on (kept up to LONGEST_LINE)
            if not skipping:
                carry += chunk
                if len(carry) > LONGEST_LINE:
                    yield [Cut(_clean(carry[:LONGEST_LINE]).replace("\x00", ""))]
                    carry, skipping = "", True
            continue
        text, carry = carry + chunk[:end], chunk[end + 1:]
        if skipping:   # the rest of a line already given in part, up to its end
            cut, skipping = text.find("\n"), False
            if cut < 0:
                continue
            text = text[cut + 1:]
        lines = _clean(text).split("\n")
        lines = _holed(lines) if "\x00" in text else lines
        yield lines if max(map(len, lines)) <= LONGEST_LINE else [_bounded(line) for line in lines]
    if carry and not skipping:
        yield _holed([_bounded(_clean(carry))])


def _clean(text: str) -> str:
    """Without ANSI escapes, Markdown fences and HTML tags (a paste from a GitHub issue: "```" or `</details>`
    after a connection would end up in its transport)."""
    if "\x1b" in text:
        text = ANSI.sub("", text)
    if "```" in text:
        text = BACKTICKS.sub("", text)
    if "~~~" in text:
        text = TILDES.sub("", text)
    if "<" in text:
        text = TAG.sub("", text)
    return text


def _lines(source):
    """Logical lines: a line a terminal or editor wrapped is joined back (see _joined)."""
    raw = _raw(source)
    first = next(raw, [])
    width = _fold_width(first[:WIDTH_SAMPLE])
    pending, last = None, 0
    for lines in itertools.chain([first], raw):
        for line in lines:
            if type(line) in (Cut, Holed):   # read (or skipped) on its own: never joined, nor joined to
                if pending is not None:
                    yield pending.rstrip()
                pending = None
                yield line
                continue
            if pending is not None:
                # A line with NCCL's marker is one of its own, unless the line before is a prefix a wrap cut; a line
                # joined up to LONGEST_LINE goes no further (a text of pieces must not become one long line).
                if len(pending) >= LONGEST_LINE:
                    joined = None
                elif "NCCL " not in line:
                    joined = _joined(pending, last, line, width)
                elif "NCCL INFO" not in pending and "NCCL WARN" not in pending:
                    joined = _prefix_joined(pending, line)
                else:
                    joined = None
                if joined is not None:
                    pending, last = joined, len(line)
                    continue
                yield pending.rstrip()
            pending, last = line, len(line)
    if pending is not None:
        yield pending.rstrip()


def _starts_line(line: str) -> bool:
    """A physical line that is a log line of its own (or a blank or a comment), not the rest of the one before."""
    return (not line.strip() or "NCCL " in line or line.lstrip().startswith("#") or HOST_PID.search(line) is not None
            or LEFT_OUT_LINE.match(line) is not None)


def _fold_width(head: list[str]) -> int | None:
    """The width a terminal or `fold` cut every long line at, if the text was hard-wrapped: most lines of NCCL's
    followed by a piece of their own have one length. A line of exactly that length that goes on is then joined
    whatever it holds, a variable's value as well as a connection."""
    pairs = [len(a) for a, b in zip(head, head[1:])
             if len(a) >= 40 and ("NCCL " in a or HOST_PID.search(a)) and not _starts_line(b)]
    if not pairs:
        return None
    width, n = Counter(pairs).most_common(1)[0]
    return width if n >= 3 and n * 5 >= len(pairs) * 4 else None


def _joined(previous: str, last: int, line: str, width: int | None) -> str | None:
    """`previous` with `line` joined to it, if `line` is a piece a wrap cut from it (`last`: the length of its last
    physical line); else None. A piece starts no log line of its own; it is joined to a prefix cut short (a long
    host name); to a connection line that is not whole, or is whole but a short piece of a name follows
    (`.../GD` + `RDMA`), in the way that reads best (a terminal cuts as it is, an editor wraps at a space it
    drops); to a variable's line cut before its value; and to anything cut at the text's fold width."""
    if ":" in previous and "NCCL INFO" not in previous and "NCCL WARN" not in previous:
        joined = _prefix_joined(previous, line)
        if joined is not None:
            return joined
    fold = width is not None and last == width
    if not fold and not _may_go_on(previous) or _starts_line(line):
        return None
    message = _message_of(previous).strip()
    if not message and MARKER.search(previous):   # wrapped right after `NCCL INFO`: the message follows
        return previous.rstrip() + " " + line.lstrip()
    if _connection_like(message):
        if not fold and _whole(message) and not PIECE.fullmatch(line):
            return None   # a whole connection line, then the program's own output
        return _best(previous, line, fold)
    spaced = _env_open(message)
    if spaced is not None:
        return previous.rstrip() + " " + line.lstrip() if spaced else previous + line
    return previous + line if fold else None


CUT_IN_A_WORD = frozenset("ChanelRigoN")   # the last letter of a cut inside `Channel`, `Ring` or `CollNet`


def _may_go_on(previous: str) -> bool:
    """A cheap first test of what _joined reads closely: a connection or a variable's line, a line that ends with
    NCCL's marker, or one cut inside `Channel`, `Ring` or `CollNet` (most lines fail it: a long log is quick)."""
    tail = previous.rstrip()
    return ("Channel" in previous or "Ring" in previous or "Coll" in previous or "NCCL_" in previous
            or tail.endswith(("NCCL INFO", "NCCL WARN")) or tail[-1:] in CUT_IN_A_WORD)


def _env_open(message: str) -> bool | None:
    """A variable's line cut before its value (`NCCL_X set by environment to`, `... set by envir`): True if the
    cut fell between words (the value follows a space), False inside one; None for any other message."""
    m = ENV_OPEN.search(message)
    if m is None:
        return None
    rest = m.group(2)
    for phrase in (("environment variable to", "to") if m.group(1) else ("set by environment to", "set to")):
        if phrase.startswith(rest):
            return len(rest) == len(phrase) or phrase[len(rest)] == " "
    return None


def _best(previous: str, line: str, fold: bool) -> str:
    """`previous` and `line` joined as they are or with a space, whichever makes the connection read as NCCL prints
    one (a whole transport, a detail of the form NCCL prints); on a tie, as they are after a fold, else spaced."""
    direct, spaced = previous + line, previous.rstrip() + " " + line.lstrip()
    score = lambda text: _whole(_message_of(text)) + bool(_detail_known(text))   # noqa: E731
    a, b = score(direct), score(spaced)
    return direct if a > b or (a == b and (fold or direct == spaced)) else spaced


def _detail_known(text: str) -> bool:
    """The line's connection has a detail of a form NCCL prints."""
    m = CONNECTION.search(_message_of(text))
    return m is not None and DETAIL.fullmatch(m.group(8).strip()) is not None


def _prefix_joined(previous: str, line: str) -> str | None:
    """`previous` and `line` joined when a wrap cut a prefix (a long host name): `host:pid:tid [0] NCCL IN` + `FO
    Channel ...`, or `... [0]` + `NCCL INFO ...`; None otherwise."""
    if ":" not in previous or MARKER.search(previous) or HOST_PID.search(line[:line.find("NCCL ")]):
        return None
    cut = len(previous.rstrip())
    for joined in (previous + line, previous.rstrip() + " " + line.lstrip()):
        m = FULL_PREFIX.search(joined)
        if m and m.start() < cut < m.end():
            return joined
    return None


def _message_of(line: str) -> str:
    """The last process's message on a line (all of it where there is no NCCL marker)."""
    marks = list(MARKER.finditer(line)) if "NCCL " in line else []
    return line[marks[-1].end():] if marks else line


def _whole(message: str) -> bool:
    """The message is a connection whose transport's name is whole."""
    m = CONNECTION.search(message)
    return m is not None and transport_kind(m.group(8).strip()) is not None


def _connection_like(message: str) -> bool:
    """A connection line, whole or cut (down to a cut inside `Channel`), not a ring list or graph."""
    if not message or (not CONNECTION_HEAD.match(message)
                       and not any(word.startswith(message) for word in ("Channel", "Ring", "CollNet"))):
        return False
    return not (COLLNET_CONNECTION.search(message) or RING_LIST.search(message) or RING_GRAPH.search(message)
                or OLD_RING_LIST.match(message))


# Glued lines: a log line written right after another without a newline. What may stand before a host name
# (pdsh's `host: `, mpirun's `<stdout>:`, a TUI's box): another character means the host name holds the end of
# the line before it.
BEFORE_HOST = set(" \t:>])|│\"'`")
DAMAGED = ("damaged",)


def _records(log: NcclLog, line: str) -> list:
    """(where, level, message) of each process's output on the line: `where` is (host, pid, cuda dev), DAMAGED for
    the two halves of lines glued together where the host's name cannot be told from the end of the line before
    it. A line is split at each `NCCL INFO`, the prefix of the next process cut from the end of the text before
    it."""
    m = STANDARD.match(line)
    if m and "NCCL " not in line[m.end():]:   # the common case: one process's line, its prefix from column 0
        return [((m["host"], m["pid"], int(m["dev"])), m[4], line[m.end():])]
    marks = list(MARKER.finditer(line)) if "NCCL " in line else []
    if not marks:
        return [((None, None, None), None, line)]
    _, where = _owner(log, line[:marks[0].start()])
    out = []
    for i, mark in enumerate(marks):
        if where is not DAMAGED and where[0]:
            _add_host(log, where[0])   # known before the next prefix on the line is judged
        body = line[mark.end():marks[i + 1].start() if i + 1 < len(marks) else len(line)]
        following = None
        if i + 1 < len(marks):
            body, following = _owner(log, body)
            if following is DAMAGED:
                where = DAMAGED
        out.append((where, mark.group(1), body))
        where = following
    return out


def _owner(log: NcclLog, text: str) -> tuple[str, tuple]:
    """`text` without the `host:pid:tid [dev]` prefix at its end, and (host, pid, dev) (None where absent), or
    DAMAGED. A host name that runs on from the text before it is split at the end of a host already seen
    (`...GDRDMAnode2` is node2's); without one it is DAMAGED."""
    p = PREFIX.search(text[-PREFIX_REACH:])
    host, pid, dev = p.group("host"), p.group("pid"), p.group("dev")
    before = text[:len(text) - len(p.group(0))]
    where = (host, pid, int(dev) if dev else None)
    if host and host not in log.hosts and before.strip():
        known = next((host[i:] for i in range(1, len(host)) if host[i:] in log.hosts), None)   # the longest
        if known:
            return before + host[:-len(known)], (known, pid, where[2])
        if before[-1] not in BEFORE_HOST:
            return before, DAMAGED
    return before, where


def _read(log: NcclLog, where: tuple, level: str | None, message: str) -> bool:
    """One process's message into `log`; True if the line said something NCCL or job related."""
    if where is DAMAGED:
        log.lines += 1
        log.damaged += 1
        return True
    text = message.strip()
    if level:
        log.lines += 1
        if not _process(log, where):   # a host past MOST's bound
            log.unread += 1
            return True
        if level == "WARN":
            _warn(log, text)
        _message(log, where, text)
        return True
    if _message(log, where, text):
        log.lines += 1
        return True
    return _job_line(log, message)


def _process(log: NcclLog, where: tuple) -> bool:
    """The host of a line, and the GPU (or the process, where the prefix names no GPU) it comes from; False for a
    host past MOST's bound."""
    host, pid, dev = where
    if not host:
        return True
    if not _add_host(log, host):
        return False
    seen, one = log.processes.setdefault(host, set()), dev if dev is not None else f"pid {pid}"
    if one not in seen and _room(log, seen, "GPUs or processes on one host"):
        seen.add(one)
    return True


def _warn(log: NcclLog, text: str) -> None:
    """A WARN line's message, once, the first MOST_WARNINGS of them."""
    if text and text not in log.warnings and len(log.warnings) < MOST_WARNINGS:
        log.warnings.append(text)


def _message(log: NcclLog, where: tuple, message: str) -> bool:
    """Dispatch a message to the first handler whose pattern it holds; only handlers whose words it holds are
    tried (one search for the words first: a long log is mostly lines few handlers want)."""
    found = WORDS.findall(message)
    if not found:
        return False
    key = found[0] if len(found) == 1 else frozenset(found)   # a set: a line of many words keys as few
    order = ORDERS.get(key)
    if order is None:
        if len(ORDERS) > 10_000:
            ORDERS.clear()
        order = ORDERS[key] = [(HANDLERS[i][1].search, HANDLERS[i][2])
                               for i in sorted({i for w in ([key] if len(found) == 1 else key) for i in BY_WORD[w]})]
    for search, handle in order:
        m = search(message)
        if m:
            handle(log, where, m)
            return True
    return False


def _job_line(log: NcclLog, line: str) -> bool:
    """Not NCCL's: nccl-tests' device list, a command line setting NCCL_* variables, or the line an excerpt of
    the log (`--markdown`'s) ends with, saying how many lines it left out."""
    if "Rank" in line:
        m = TESTS_RANK.search(line)
        if m and _add_host(log, m.group(3)):
            r = _rank(log, int(m.group(1)))
            _fill(r, host=m.group(3), pid=m.group(2), cuda_dev=int(m.group(4)))
            return True
    if "more lines left out" in line:
        m = LEFT_OUT_LINE.match(line)
        if m:   # counted here, so not kept: an excerpt of this says how many lines in all were left out
            log.left_out += int(m.group(1))
            return False
    if "NCCL_" not in line or not COMMAND_LINE.search(line):
        return False
    found = False
    for m in COMMAND_ENV.finditer(line):
        if m.group(1) in log.command_env or _room(log, log.command_env, "NCCL_* variables"):
            log.command_env.setdefault(m.group(1), m.group(2).strip("'\"`"))
        found = True
    return found


# ---------------------------------------------------------------- handlers, one per kind of message

def transport_kind(detail: str) -> str | None:
    """A connection's KIND from the text after "via"; None when its name is not whole (a cut line)."""
    if detail.startswith("direct shared memory"):
        return "SHM"
    head, slash, rest = detail.partition("/")
    if not slash:
        return None
    if head in ("P2P", "SHM", "NVLS", "COLLNET"):
        return head
    name, slash, _ = rest.partition("/")
    if head != "NET" or not slash or not name:
        return None
    if name.startswith("IB"):  # IB, and the HPC-X plugin's IBext, IBext_v8, ...: the same verbs transport
        return "NET/IB"
    return f"NET/{name}"


def _connection(log: NcclLog, where: tuple, m) -> None:
    """A `Channel`/`Ring` connection line; the ranks at both ends learn their host and GPU from it."""
    word, channel, a, a_dev, b, b_dev, side, detail = m.groups()
    detail = detail.strip().rstrip("│|").strip()[:LONGEST_DETAIL]
    key = (detail, a, a_dev, b, b_dev, side, where[0], word)
    if _again(log, key):
        return
    kind = transport_kind(detail)
    if kind is None:
        return
    gdr = ("/GDRDMA" in detail) if kind.startswith("NET/") else None
    c = _add(log, key, Connection(kind, detail, int(a), int(b), a_dev, b_dev, int(channel), side, gdr, where[0],
                                  word == "Ring"))
    printer, own, peer, peer_dev = (c.dst, b_dev, c.src, a_dev) if side == "receive" else (c.src, a_dev, c.dst, b_dev)
    r = _rank(log, printer)
    _fill(r, host=where[0], pid=where[1], cuda_dev=where[2])
    _device(r, own, c.old_form)
    if kind in ("P2P", "SHM") and "MNNVL" not in detail:  # within one host (multi-node NVLink aside)
        p = _rank(log, peer)
        _fill(p, host=where[0])
        _device(p, peer_dev, c.old_form)


def _again(log: NcclLog, key: tuple) -> bool:
    """A connection line seen before (another channel, or another run of the same job) counts one line more and
    says nothing new, and so does a new one past MOST's bound, counted as not read: memory holds the distinct
    connections, however long the log."""
    seen = log.distinct.get(key)
    if seen is not None:
        seen.lines += 1
        return True
    if not _room(log, log.distinct, "distinct connections"):
        log.unread += 1
        return True
    return False


def _add(log: NcclLog, key: tuple, c: Connection) -> Connection:
    """A connection not seen before."""
    log.distinct[key] = c
    log.connections.append(c)
    return c


def _collnet(log: NcclLog, where: tuple, m) -> None:
    """A CollNet connection: one rank to the network's collective engine."""
    channel, r, side, detail = m.groups()
    detail = detail.strip()[:LONGEST_DETAIL]
    key = ("COLLNET", detail, r, side, where[0])
    if _again(log, key):
        return
    _add(log, key, Connection("COLLNET", detail, int(r), None, channel=int(channel), side=side,
                              gdr="/GDRDMA" in detail, host=where[0]))
    _fill(_rank(log, int(r)), host=where[0], pid=where[1], cuda_dev=where[2])


def _version(log: NcclLog, where: tuple, m) -> None:
    """`NCCL version 2.18.5+cuda12.2`: the first one is the log's; each host keeps its own."""
    major, minor, patch = (int(x) for x in m.groups())
    if major >= 20:  # PyTorch's errors split NCCL_VERSION_CODE wrongly: "20.9.9" is 2.9.9, "21.0.3" is 2.10.3
        major, minor = major // 10, (major % 10) * 10 + minor
    v = f"{major}.{minor}.{patch}"
    log.version = log.version or v
    if where[0]:
        log.versions.setdefault(where[0], v)


def _env(log: NcclLog, where: tuple, m) -> None:
    """`NCCL_X set by environment to Y`, `NCCL_X set to Y`, a plugin's `Setting NCCL_X to Y`."""
    value = m.group(2).strip().rstrip("│|").strip()
    if re.fullmatch(r"-?\d+\.", value):  # NCCL prints integers as "%lld."
        value = value[:-1]
    if value and (m.group(1) in log.env or _room(log, log.env, "NCCL_* variables")):
        log.env[m.group(1)] = value
    elif value:
        log.unread += 1


def _init(log: NcclLog, where: tuple, m) -> None:
    """`comm 0x.. rank R nranks N cudaDev C [nvmlDev V] [busId B]`: where rank R runs."""
    r = _rank(log, int(m.group(1)))
    _fill(r, host=where[0], pid=where[1], cuda_dev=int(m.group(3)))
    _fill(r, nvml_dev=int(m.group(4)) if m.group(4) else None, bus_id=(m.group(5) or "").lower() or None)
    log.nranks = max(log.nranks or 0, int(m.group(2)))


def _comm(log: NcclLog, where: tuple, m) -> None:
    """`comm 0x.. rank R nRanks N nNodes K ...` (2.19+)."""
    _fill(_rank(log, int(m.group(1))), host=where[0], pid=where[1], cuda_dev=where[2])
    log.nranks = max(log.nranks or 0, int(m.group(2)))
    log.nnodes = max(log.nnodes or 0, int(m.group(3)))


def _channels(log: NcclLog, where: tuple, m) -> None:
    """`N coll channels, [N collnet channels, ][N nvls channels, ]N p2p channels`."""
    coll, collnet, nvls = (int(x) if x else None for x in m.groups())
    log.coll_channels = max(log.coll_channels or 0, coll)
    if collnet is not None:
        log.collnet_channels = max(log.collnet_channels or 0, collnet)
    if nvls is not None:
        log.nvls_channels = max(log.nvls_channels or 0, nvls)


def _ring_list(log: NcclLog, where: tuple, m) -> None:
    """A ring list `Channel 00/08 :    0   1 ...`: the channel count."""
    log.ring_lines += 1
    count = int(m.group(2)) if m.group(2) else int(m.group(1)) + 1  # NCCL 2.4 lists without "/NN"
    log.ring_channels = max(log.ring_channels or 0, count)


def _flag(attr: str):
    """A handler that only notes that the line was seen (IB devices listed, CollNet refused)."""
    def handle(log: NcclLog, where: tuple, m) -> None:
        """Note it."""
        setattr(log, attr, True)
    return handle


def _count(attr: str):
    """A handler that only counts the line (ring and tree layouts)."""
    def handle(log: NcclLog, where: tuple, m) -> None:
        """Count one more line."""
        setattr(log, attr, getattr(log, attr) + 1)
    return handle


def _nvls_support(log: NcclLog, where: tuple, m) -> None:
    """`NVLS multicast support is (not) available on dev N`: available if any GPU says so."""
    log.nvls_available = bool(log.nvls_available) or not m.group(1)


def _nvls_setup(log: NcclLog, where: tuple, m) -> None:
    """An NVLS setup line counts as one NVLS connection (NCCL prints none per peer)."""
    key = ("NVLS", m.group(0), where[0])
    if not _again(log, key):
        _add(log, key, Connection("NVLS", m.group(0), host=where[0]))


def _p2p_failed(log: NcclLog, where: tuple, m) -> None:
    """`Could not enable P2P between dev a(=bus) and dev b(=bus)` (CUDA device numbers)."""
    failure = (where[0], int(m.group(1)), int(m.group(2)))
    if failure in log.p2p_failures or _room(log, log.p2p_failures, "P2P failures"):
        log.p2p_failures.add(failure)


def _network(log: NcclLog, where: tuple, m) -> None:
    """`Using network IB|Socket|IBext_v8|...`: the network NCCL picked."""
    if m.group(1) not in log.networks and _room(log, log.networks, "networks"):
        log.networks.append(m.group(1))


def _ib_absent(log: NcclLog, where: tuple, m) -> None:
    """Why NCCL has no InfiniBand/RoCE, in words a person can act on."""
    log.ib_absent = log.ib_absent or ("NCCL found no InfiniBand/RoCE device" if "No device" in m.group(0)
                                      else "libibverbs could not be loaded")


# (words every match holds, pattern, handler): the first whose pattern a message holds reads it.
HANDLERS = [(("via ",), CONNECTION, _connection), (("COLLNET/",), COLLNET_CONNECTION, _collnet),
            (("NCCL version",), VERSION, _version), ((" set ",), ENV, _env), (("Setting NCCL_",), PLUGIN_ENV, _env),
            (("cudaDev",), INIT, _init), (("nRanks",), COMM, _comm), (("coll channels",), CHANNELS, _channels),
            (("Channel",), RING_LIST, _ring_list), (("Ring",), RING_GRAPH, _count("ring_lines")),
            (("Tree",), TREE, _count("tree_lines")), (("NVLS multicast",), NVLS_SUPPORT, _nvls_support),
            (("Connected NVLS", "NVLS comm"), NVLS_SETUP, _nvls_setup),
            (("Could not enable P2P",), P2P_FAILED, _p2p_failed),
            (("Using ",), NETWORK, _network), (("NET/IB",), IB_DEVICES, _flag("ib_devices")),
            (("NET/IB", "libibverbs"), IB_ABSENT, _ib_absent),
            (("CollNet is not",), COLLNET_OFF, _flag("collnet_refused"))]
BY_WORD: dict = {}   # word -> the handlers that need it
for _i, (_words, _, _) in enumerate(HANDLERS):
    for _w in _words:
        BY_WORD.setdefault(_w, []).append(_i)
ORDERS: dict = {}    # the words a message holds -> the handlers to try, in order
# Longest first, so that no word hides another it contains (they overlap nowhere else).
WORDS = re.compile("|".join(re.escape(w) for w in sorted(BY_WORD, key=len, reverse=True)))


def _add_host(log: NcclLog, host: str) -> bool:
    """Hosts in the order they first appear; False for a new one past MOST's bound."""
    if host in log.hosts:
        return True
    if not _room(log, log.hosts, "hosts"):
        return False
    log.hosts[host] = None
    return True


def _rank(log: NcclLog, n: int) -> Rank:
    """Rank `n`, created on first sight (past MOST's bound, one that is not kept)."""
    r = log.ranks.get(n)
    if r is None:
        r = Rank(n)
        if _room(log, log.ranks, "ranks"):
            log.ranks[n] = r
    return r


def _room(log: NcclLog, kept, what: str) -> bool:
    """Whether `kept` (what the log said so far) may hold one more of `what`; at its bound in MOST it may not, and the
    summary names the bound: memory holds what the log says up to these bounds, whatever the log's size."""
    if len(kept) < MOST[what]:
        return True
    log.full.setdefault(what, MOST[what])
    return False


def _fill(r: Rank, **known) -> None:
    """Set what is not known yet: with several communicators a rank number can name other GPUs; the first wins."""
    for k, v in known.items():
        if v is not None and getattr(r, k) is None:
            setattr(r, k, v)


def _is_index(token: str) -> bool:
    """A device number in brackets (a bus id such as 1a000 or 7000 is longer)."""
    return token.isdecimal() and len(token) <= 3 and int(token) < 256


def _device(r: Rank, token: str | None, old_form: bool) -> None:
    """What a bracket says about the rank's GPU: a bus id, NVML's index (NCCL 2.12+) or the CUDA device (< 2.7)."""
    if token is None:
        return
    if not _is_index(token):
        _fill(r, bus_id=token.lower())
    elif old_form:
        _fill(r, cuda_dev=int(token))
    else:
        _fill(r, nvml_dev=int(token))


def _finish(log: NcclLog) -> None:
    """What follows from everything read: the variables in effect, channel count, NVLS and CollNet use."""
    log.env = {**log.command_env, **log.env}
    log.channels = log.coll_channels or log.ring_channels
    kinds = {c.kind for c in log.connections}
    if "NVLS" in kinds or (log.nvls_channels or 0) > 0:
        log.nvls = True
    elif log.nvls_channels == 0 or log.env.get("NCCL_NVLS_ENABLE") == "0" or log.nvls_available is False:
        log.nvls = False
    if "COLLNET" in kinds:
        log.collnet = True
    elif log.collnet_refused or log.collnet_channels == 0 or log.env.get("NCCL_COLLNET_ENABLE") == "0":
        log.collnet = False


# ---------------------------------------------------------------- the summary

def transports(log: NcclLog) -> dict:
    """{KIND: connection lines}, the six KINDs first, then other networks by name."""
    counts: Counter = Counter()
    for c in log.connections:
        counts[c.kind] += c.lines
    return {k: counts[k] for k in sorted(counts, key=lambda k: (k not in KINDS, KINDS.index(k) if k in KINDS
                                                                 else 0, k))}


def gdrdma(log: NcclLog) -> bool | None:
    """GPUDirect RDMA on any network connection (sockets never use it: a Socket-only log is False); None without
    network connections."""
    network = [c.gdr for c in log.connections if c.gdr is not None]
    return any(network) if network else None


def summary(log: NcclLog, topology: Topology | None = None) -> dict:
    """The JSON object the module docstring describes; a topology adds the cross-check."""
    check = cross_check(log, topology) if topology is not None else None
    return {"version": log.version, "hosts": list(log.hosts), "ranks_per_host": ranks_per_host(log),
            "nranks": log.nranks, "transports": transports(log), "gdrdma": gdrdma(log), "channels": log.channels,
            "nvls": log.nvls, "nvls_available": log.nvls_available, "collnet": log.collnet, "env": dict(log.env),
            "settings": settings(log.env), "pairs": pairs(log), "warnings": list(log.warnings),
            "findings": (check.pop("findings") if check else []) + findings(log, checked=check is not None),
            "cross_check": check,
            "lines": {"nccl": log.lines, "connections": sum(c.lines for c in log.connections),
                      "rings": log.ring_lines, "trees": log.tree_lines, "damaged": log.damaged,
                      "left_out": log.left_out, "cut": log.cut, "unread": log.unread, "nul": log.holed}}


def ranks_per_host(log: NcclLog) -> dict:
    """{host: ranks seen there}; where a host's lines name fewer ranks than GPUs, the GPUs they come from."""
    out = {}
    for h in log.hosts:
        ranks = {r.rank for r in log.ranks.values() if r.host == h}
        out[h] = max(len(ranks), len(log.processes.get(h, ())))
    return out


def _host_of(log: NcclLog, c: Connection, r: int) -> str | None:
    """The host of rank `r` of connection `c`: the printer's, the same for P2P and SHM, else the rank's."""
    printer = c.dst if c.side == "receive" else c.src
    if c.host and (r == printer or (c.kind in ("P2P", "SHM") and "MNNVL" not in c.detail)):
        return c.host
    known = log.ranks.get(r)
    return known.host if known else None


def _bus_index(log: NcclLog) -> dict:
    """(host, bus id) -> (nvidia-smi's GPU number, certain): NVML's index where known, else the CUDA device."""
    out = {}
    for r in log.ranks.values():
        if r.bus_id and r.nvml_dev is not None:
            out[(r.host, r.bus_id)] = (r.nvml_dev, True)
        elif r.bus_id and r.cuda_dev is not None:
            out.setdefault((r.host, r.bus_id), (r.cuda_dev, False))
    return out


def gpu_number(log: NcclLog, host: str | None, r: int, token: str | None, old_form: bool,
               index: dict | None = None) -> tuple[int | None, bool]:
    """The GPU of rank `r` on `host` as nvidia-smi numbers it, and whether that is certain (NVML's index) or the
    CUDA device, which CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER renumber."""
    if token is not None and _is_index(token):
        return int(token), not old_form
    if token is not None:
        return (index if index is not None else _bus_index(log)).get((host, token.lower()), (None, False))
    known = log.ranks.get(r)
    if known is None:
        return None, False
    return (known.nvml_dev, True) if known.nvml_dev is not None else (known.cuda_dev, False)


def _label(host: str | None, gpu: int | None, r: int) -> str:
    """'HOST GPU d', or 'HOST rank r' when the GPU is unknown; 'rank r (GPU d)' where the prefix was stripped
    (a GPU number alone would not say which host)."""
    if not host:
        return f"rank {r}" + (f" (GPU {gpu})" if gpu is not None else "")
    return f"{host} GPU {gpu}" if gpu is not None else f"{host} rank {r}"


def pairs(log: NcclLog) -> list[dict]:
    """One entry per distinct (from, to, transport, detail, side), with how many lines set it up."""
    index, out = _bus_index(log), {}
    for c in log.connections:
        if c.src is None or c.dst is None:
            continue
        ends = []
        for r, token in ((c.src, c.src_dev), (c.dst, c.dst_dev)):
            host = _host_of(log, c, r)
            ends.append(_label(host, gpu_number(log, host, r, token, c.old_form, index)[0], r))
        key = (*ends, c.kind, c.detail, c.side)
        if key in out:
            out[key]["lines"] += c.lines
        else:
            out[key] = {"from": ends[0], "to": ends[1], "transport": c.kind, "detail": c.detail, "side": c.side,
                        "gdr": c.gdr, "lines": c.lines}
    return list(out.values())


# ---------------------------------------------------------------- what the variables change

def settings(env: dict) -> dict:
    """{variable: what it changes} for the variables set that change NCCL's choice of transport."""
    out = {}
    level, var = p2p_limit(env)
    if var:
        out[var.split("=")[0]] = ("no P2P over NVLink or PCIe between any GPUs" if level == 0 else
                                  f"P2P only between GPUs at most {P2P_LEVELS[level]} apart (LOC: none, NVL: NVLink,"
                                  " PIX/PXB: through PCIe switches, PHB: one CPU, SYS: any)")
    if switch_on(env.get("NCCL_SHM_DISABLE")):
        out["NCCL_SHM_DISABLE"] = "no shared memory: GPUs of one host without P2P talk through the network"
    if switch_on(env.get("NCCL_IB_DISABLE")):
        out["NCCL_IB_DISABLE"] = "no InfiniBand/RoCE: hosts talk through TCP sockets (NET/Socket)"
    if env.get("NCCL_NET"):
        out["NCCL_NET"] = f"only the {env['NCCL_NET']} network"
    if env.get("NCCL_NET_GDR_LEVEL"):
        out["NCCL_NET_GDR_LEVEL"] = (f"GPUDirect RDMA only for GPUs at most {env['NCCL_NET_GDR_LEVEL']} from their"
                                     " NIC (default PXB)")
    if env.get("NCCL_NVLS_ENABLE") == "0":
        out["NCCL_NVLS_ENABLE"] = "no NVLink SHARP (NVLS)"
    if env.get("NCCL_COLLNET_ENABLE") == "0":
        out["NCCL_COLLNET_ENABLE"] = "no CollNet (SHARP in the network)"
    return out


# ---------------------------------------------------------------- findings from the log alone

def findings(log: NcclLog, checked: bool = False) -> list[str]:
    """What a person would act on, from the log alone. `checked`: a topology cross-check judged every pair of
    GPUs already, so the log-only sentence about SHM pairs is left out."""
    out = ([] if checked else _shm_findings(log)) + _p2p_failure_findings(log) + _same_host_network(log)
    out += _socket_findings(log) + _gdr_findings(log) + _nvls_findings(log) + _host_findings(log)
    out += [f"NCCL warned: {w}" for w in log.warnings[:3]]
    return list(dict.fromkeys(_reading_findings(log) + out))


def _reading_findings(log: NcclLog) -> list[str]:
    """What the counts rest on: glued lines left out, an excerpt rather than the log."""
    out = []
    if log.damaged:
        out.append(f"{log.damaged} log lines were glued to the one before or after without a newline, and where the"
                   " host's name ran on from the line before it could not be told: they were left out of everything"
                   " here (several processes writing one file without line buffering does this)")
    if log.cut:
        out.append(f"{log.cut} line(s) were longer than {LONGEST_LINE:,} characters (no line of NCCL's is near that):"
                   " each was cut there and the record the cut fell in was not read; lines glued without newlines,"
                   " or not a log?")
    if log.holed:
        out.append(f"{log.holed} line(s) held NUL bytes (the hole a crash or a full disk leaves in a log file): what"
                   " was written around the hole is not whole, so those lines were skipped and the rest read")
    if log.full:
        out.append(f"The log goes past what gputopo holds ({', '.join(f'{n:,} {w}' for w, n in log.full.items())}):"
                   f" {log.unread:,} lines beyond that were counted, not read (docs/options.md, Limits)")
    if log.left_out:
        out.append(f"This is an excerpt: {log.left_out} more lines of the log were left out of it, so the counts and"
                   " pairs above are the excerpt's; give the whole log for all of them")
    return out


def _where(log: NcclLog, host: str | None) -> str:
    """'HOST: ' before a sentence about one host of several."""
    return f"{host}: " if host and len(log.hosts) > 1 else ""


def _listed(items: list, most: int = 4) -> str:
    """'a, b and c', or the first few and how many more."""
    items = [str(i) for i in items]
    if len(items) > most:
        return f"{', '.join(items[:most])} and {len(items) - most} more"
    return " and ".join(filter(None, [", ".join(items[:-1]), items[-1]])) if items else ""


def _same_host(log: NcclLog, c: Connection) -> str | None:
    """The host both ends of `c` are on, if the log shows they share one (P2P and SHM always do)."""
    if c.src is None or c.dst is None or "MNNVL" in c.detail:
        return None
    a, b = _host_of(log, c, c.src), _host_of(log, c, c.dst)
    if c.kind in ("P2P", "SHM"):
        return a or b or ""
    return a if a and a == b else None


def _shm_findings(log: NcclLog) -> list[str]:
    """Pairs of one host that went through SHM, and the variable or failure that explains it."""
    _, var = p2p_limit(log.env)
    by_host: dict = {}
    for c in log.connections:
        if c.kind == "SHM" and c.src is not None and c.dst is not None:
            by_host.setdefault(c.host, set()).add(frozenset((c.src, c.dst)))
    out = []
    for host, found in by_host.items():
        text = f"{_where(log, host)}{len(found)} pair(s) of GPUs went through SHM (host memory), not P2P: "
        if var:
            text += f"{var} was set; without it NCCL uses NVLink or PCIe P2P where the GPUs allow it"
        elif any(f[0] == host for f in log.p2p_failures):
            text += "CUDA could not enable P2P between some of them"
        else:
            text += ("NCCL does so for GPUs further apart than a PCIe switch (PXB) or where P2P fails; `inspect"
                     " --nccl-log` with `--from-file` and this machine's `nvidia-smi topo -m` checks each pair")
        out.append(text)
    return out


def _p2p_failure_findings(log: NcclLog) -> list[str]:
    """NCCL's "Could not enable P2P between dev a and dev b" lines, per host."""
    by_host: dict = {}
    for host, a, b in log.p2p_failures:
        by_host.setdefault(host, set()).add(tuple(sorted((a, b))))
    return [f"{_where(log, host)}CUDA could not enable P2P between devices"
            f" {_listed([f'{a}-{b}' for a, b in sorted(ps)])}: NCCL falls back to SHM for them; `nvidia-smi topo"
            " -p2p r` shows which pairs support it (IOMMU or ACS on PCIe switches, or GPUs split across"
            " containers, block it)"
            for host, ps in sorted(by_host.items(), key=lambda x: str(x[0]))]


def _same_host_network(log: NcclLog) -> list[str]:
    """Ranks of one host that connect through the network, as if on different machines."""
    found: dict = {}
    for c in log.connections:
        host = _same_host(log, c) if c.kind.startswith("NET/") else None
        if host:
            found.setdefault((host, c.kind), set()).update((c.src, c.dst))
    _, var = p2p_limit(log.env)
    shm_off = switch_on(log.env.get("NCCL_SHM_DISABLE"))
    why = (f"{var} and NCCL_SHM_DISABLE=1 leave them only the network" if var and shm_off
           else "NCCL does so when going through the NIC beats SHM across CPU sockets (NCCL_NET_DISABLE_INTRA=1"
                " stops it), or when the processes cannot share memory (separate containers or pods without a"
                " shared /dev/shm and IPC namespace); or two machines have the same hostname")
    return [f"Ranks {_listed(sorted(ranks), 6)} on host {host} connect through {kind}: {why}"
            for (host, kind), ranks in found.items()]


def _socket_findings(log: NcclLog) -> list[str]:
    """Hosts that talk over TCP sockets, and why NCCL did not use InfiniBand/RoCE."""
    socket = [c for c in log.connections if c.kind == "NET/Socket"]
    several = len(log.hosts) > 1 or (log.nnodes or 0) > 1
    nets = [c for c in log.connections if c.kind.startswith("NET/")]
    if not socket and not (several and "Socket" in log.networks and not nets):
        return []
    env = log.env
    if switch_on(env.get("NCCL_IB_DISABLE")):
        why = "NCCL_IB_DISABLE=1 was set"
    elif "SOCKET" in (env.get("NCCL_NET") or "").upper():
        why = f"NCCL_NET={env['NCCL_NET']} was set"
    elif log.ib_devices or any(n.startswith("IB") for n in log.networks):
        why = "InfiniBand/RoCE devices were listed, yet not used (ports down, or NCCL_IB_HCA naming none active?)"
    elif log.ib_absent:
        why = f"{log.ib_absent}; if the hosts have InfiniBand or RoCE, check its driver and rdma-core"
    else:
        why = "no InfiniBand/RoCE network was used"
    lead = ("Traffic between hosts went through NET/Socket (TCP)" if socket else
            "NCCL chose TCP sockets (Socket) as the network between hosts")
    return [f"{lead}: {why}; InfiniBand or RoCE with GPUDirect RDMA carries several times more"]


def _count_lines(connections: list) -> int:
    """The connection lines behind distinct connections."""
    return sum(c.lines for c in connections)


def _gdr_findings(log: NcclLog) -> list[str]:
    """Network connections without GPUDirect RDMA: all of them, one direction, some hosts or some GPUs."""
    rdma = [c for c in log.connections if c.gdr is not None and "Socket" not in c.kind]
    without = [c for c in rdma if not c.gdr]
    if not without:
        return []
    level = log.env.get("NCCL_NET_GDR_LEVEL")
    if len(without) == len(rdma):
        nets = "/".join(sorted({c.kind for c in without}))
        return [f"No GPUDirect RDMA on the {_count_lines(without)} {nets} connection lines: data is staged through host"
                " memory; " + (f"NCCL_NET_GDR_LEVEL={level} was set" if level else
                               "load the nvidia-peermem kernel module (nv_peer_mem before driver 470), and check that"
                               " GPUs and NICs share a PCIe switch (`nvidia-smi topo -m`: PIX or PXB)")]
    with_ = [c for c in rdma if c.gdr]
    sides, others = {c.side for c in with_}, {c.side for c in without}
    if len(sides) == len(others) == 1 and sides != others:
        side, other = sides.pop(), others.pop()
        return [f"GPUDirect RDMA on {side} only: {_count_lines(without)} {other} connection lines stage through host"
                " memory"
                + (" (NCCL_NET_GDR_READ=1 lets the NIC read GPU memory when sending)" if other == "send" else "")]
    hosts, bare = {c.host for c in with_}, {c.host for c in without}
    if None not in hosts | bare and not hosts & bare:
        return [f"GPUDirect RDMA on {_listed(sorted(hosts))} but not on {_listed(sorted(bare))}: load nvidia-peermem"
                " there, or compare NCCL_NET_GDR_LEVEL"]
    return [f"GPUDirect RDMA on {_count_lines(with_)} of {_count_lines(rdma)} network connection lines; the others"
            f" ({_listed(sorted({c.detail for c in without}))}) probably come from GPUs further from their NIC than"
            f" NCCL_NET_GDR_LEVEL allows ({level or 'PXB by default'}): `--from-file` with `nvidia-smi topo -m`"
            " checks"]


def _nvls_findings(log: NcclLog) -> list[str]:
    """NVLink SHARP available but left unused."""
    if not log.nvls_available or log.nvls is not False:
        return []
    if log.env.get("NCCL_NVLS_ENABLE") == "0":
        return ["NVLS multicast (NVLink SHARP) is available but NCCL_NVLS_ENABLE=0 turns it off"]
    algo = log.env.get("NCCL_ALGO")
    why = (f"NCCL_ALGO={algo} leaves NVLS out" if algo and "NVLS" not in algo.upper() else
           "too few GPUs per node, or NCCL_ALGO/NCCL_NVLS_ENABLE")
    return [f"NVLS multicast (NVLink SHARP) is available but NCCL set up no NVLS channels: {why}"]


def _host_findings(log: NcclLog) -> list[str]:
    """Hosts that differ: NCCL versions, or the transports between their own GPUs."""
    out = []
    versions: dict = {}
    for h, v in log.versions.items():
        versions.setdefault(v, []).append(h)
    if len(versions) > 1:
        out.append("Hosts run different NCCL versions (" + "; ".join(f"{v} on {_listed(hs, 3)}" for v, hs in
                                                                      versions.items())
                   + "): use one NCCL everywhere; mismatched versions hang or fail at init")
    inside: dict = {}
    for c in log.connections:
        host = _same_host(log, c)
        if host:
            inside.setdefault(host, set()).add(c.kind)
    groups: dict = {}
    for h, kinds in inside.items():
        groups.setdefault(" and ".join(sorted(kinds)), []).append(h)
    if len(groups) > 1:
        out.append("Hosts connect their own GPUs differently in this log: " + "; ".join(
            f"{k} on {_listed(hs, 3)}" for k, hs in groups.items()) + ". On identical machines the same pairs should"
            " use the same transport: compare NCCL_P2P_* and NCCL_SHM_* settings, IOMMU/ACS and containers")
    return out


# ---------------------------------------------------------------- the log against the machine's topology

def cross_check(log: NcclLog, topo: Topology) -> dict:
    """Each connection between two GPUs of one host against `topo`, that machine's `nvidia-smi topo -m` (every
    host taken to be alike): {"hosts", "gpu_numbers", "pairs", "findings"}."""
    index, by_number = _bus_index(log), {g.index: g for g in topo.gpus}
    rows: dict = {}
    certain, missing = set(), set()
    for c in log.connections:
        host = _same_host(log, c)
        if host is None:
            continue
        (a, sure_a), (b, sure_b) = (gpu_number(log, host or None, r, t, c.old_form, index)
                                    for r, t in ((c.src, c.src_dev), (c.dst, c.dst_dev)))
        if a is None or b is None or a == b:
            continue
        if a not in by_number or b not in by_number:
            missing |= {x for x in (a, b) if x not in by_number}
            continue
        link = topo.link(by_number[a].name, by_number[b].name)
        if link is None or link.type is None:
            continue
        certain.add(sure_a and sure_b)
        rows.setdefault((host, a, b, c.kind), {"host": host or None, "from": by_number[a].name,
                                               "to": by_number[b].name, "transport": c.kind, "link": link.type,
                                               "expected": expected_transport(link.type, log.env)})
    found = _pair_findings(log, list(rows.values())) + _nic_findings(log, topo, index) + _nvls_topology(log, topo)
    if missing:
        found.append(f"The log names GPU(s) {_listed(sorted(missing))} that this topology lacks (GPUs"
                     f" {_listed([g.index for g in topo.gpus], 8)}): is `nvidia-smi topo -m` from another machine?")
    if False in certain:
        found.append("GPU numbers above are CUDA device numbers (this NCCL prints no NVML index): they are"
                     " nvidia-smi's only without CUDA_VISIBLE_DEVICES and with CUDA_DEVICE_ORDER=PCI_BUS_ID")
    checked = [h for h in log.hosts if any(r["host"] == h for r in rows.values())]
    if len(checked) > 1:
        found.append(f"The topology is taken as every host's ({len(checked)} hosts checked)")
    numbers = None if not certain else {frozenset({True}): "nvml", frozenset({False}): "cuda"}.get(
        frozenset(certain), "mixed")
    return {"hosts": checked, "gpu_numbers": numbers, "pairs": list(rows.values()), "findings": found}


def _pair_findings(log: NcclLog, rows: list[dict]) -> list[str]:
    """Sentences for the pairs whose transport differs from what their link allows by NCCL's default."""
    level, var = p2p_limit(log.env)
    groups: dict = {}
    for r in rows:
        used, t, host = r["transport"], r["link"], r["host"]
        default_p2p = expected_transport(t, {}) == "P2P"
        if used != "P2P" and default_p2p:
            what = f"went through {used} although they share {t}"
            why = (f"{var} was set" if var else
                   "CUDA could not enable P2P between them" if any(f[0] == host for f in log.p2p_failures) else
                   "nothing in the log explains it: check `nvidia-smi topo -p2p r`, IOMMU/ACS, and whether the"
                   " processes share one container")
        elif used == "P2P" and not default_p2p:
            what = f"used P2P across {t}"
            why = ((f"{var} allowed it" if var and level is not None and level >= link_level(t) else
                    "NCCL does this by default only on AMD CPUs with two GPUs")
                   + "; through the CPUs P2P can be slower than SHM: measure both")
        elif used.startswith("NET/"):
            what = f"went through {used} on one host"
            why = f"{r['expected']} was expected over {t}: NCCL_SHM_DISABLE, or processes in separate containers"
        else:
            continue
        listed = groups.setdefault((host, what, why), [])
        if f"{r['to'][3:]} -> {r['from'][3:]}" not in listed:
            listed.append(f"{r['from'][3:]} -> {r['to'][3:]}")
    return [f"{_where(log, host)}GPU {_listed(ps)} {what}: {why}" for (host, what, why), ps in groups.items()]


def _nic_findings(log: NcclLog, topo: Topology, index: dict) -> list[str]:
    """Network connections without GPUDirect RDMA against how far each GPU is from its nearest NIC."""
    nics = {n.name for n in topo.nics}
    groups: dict = {}
    for c in log.connections:
        if not nics or c.gdr is not False or "Socket" in c.kind:
            continue
        printer, token = (c.dst, c.dst_dev) if c.side == "receive" else (c.src, c.src_dev)
        number, _ = gpu_number(log, c.host, printer, token, c.old_form, index)
        g = next((g for g in topo.gpus if g.index == number), None)
        near = [l.type for l in topo.links if g is not None and g.name in (l.a, l.b) and {l.a, l.b} & nics and l.type]
        if near:
            best = max(near, key=rank)
            groups.setdefault((c.host, best, c.kind), set()).add(g.index)
    out, level = [], log.env.get("NCCL_NET_GDR_LEVEL")
    for (host, best, kind), gpus in groups.items():
        one = len(gpus) == 1
        who = f"{_where(log, host)}GPU{'' if one else 's'} {_listed(sorted(gpus))}"
        if kind_of(best) in ("PIX", "PXB"):
            out.append(f"{who} share{'s' * one} {best} with a NIC, yet {kind} used no GPUDirect RDMA: " + (
                f"NCCL_NET_GDR_LEVEL={level} was set" if level else
                "is nvidia-peermem loaded (`lsmod | grep peermem`)?"))
        else:
            out.append(f"{who} {'is' if one else 'are'} {best} from the nearest NIC: NCCL uses GPUDirect RDMA only"
                       " up to PXB by default (NCCL_NET_GDR_LEVEL=PHB or SYS allows it, not always faster)")
    return out


def _nvls_topology(log: NcclLog, topo: Topology) -> list[str]:
    """NVLS missing on GPUs that all share NV18 (an NVSwitch system of the Hopper generation or newer)."""
    links = topo.gpu_links()
    if log.nvls_available is False and len(topo.gpus) >= 4 and links and all(l.nvlinks >= 18 for l in links):
        return ["NVLS multicast is not available although every pair of GPUs shares NV18 (NVSwitch): NVLS needs"
                " the fabric manager running, CUDA 12.1+ and driver 530+"]
    return []
