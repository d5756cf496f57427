"""nvidia-smi text -> Topology. Pure: no machine access.

Reads `nvidia-smi topo -m`, `nvidia-smi topo -p2p r|w|rw|n|a`, `nvidia-smi nvlink -s` and `nvidia-smi -L`
as people paste them: prompt lines, tabs or spaces, CRLF, ANSI escapes, indentation, trailing commands.
A paste too damaged to read raises BadInput naming what is missing; nothing is guessed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache

from .errors import BadInput
from .topology import MAX_NVLINKS, Gpu, Link, Nic, NvLink, Topology, link_type
from .units import shown

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# Device labels in the header end in a digit (GPU0, NIC3, mlx5_0, bnxt_re1); trailing column titles do not.
# ASCII digits throughout (re.A): int() would read a digit of another script as a GPU index or an NV count. A label
# is short (mlx5_bond_0): a longer token is no device's.
LABEL = re.compile(r"^(?:GPU\d{1,20}|NIC\d{1,20}|[A-Za-z][\w.:-]{0,62}\d)$", re.A)
TRAILERS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
# Cell values, longest first so that cells run together by a lost tab ("NV12SYS") still split.
LINK_CELL = re.compile(r"\s*(NV\d+|NODE|SYS|PHB|PXB|PIX|SOC|CPU|CNS|GNS|TNS|N/A|OK|NS|X|U)(?![a-z])", re.A)
LINK_WORDS = ("NODE", "SYS", "PHB", "PXB", "PIX", "SOC", "CPU", "CNS", "GNS", "TNS", "OK", "NS", "NV")
P2P_VALUES = {"OK", "CNS", "GNS", "TNS", "NS", "U", "X"}
P2P_ONLY = P2P_VALUES - {"X"}
TOPO_ONLY = {"SYS", "NODE", "PHB", "PXB", "PIX", "SOC", "CPU"}
P2P_EXPLAIN = {"OK": "supported", "CNS": "chipset not supported", "GNS": "GPU not supported",
               "TNS": "topology not supported", "NS": "not supported", "U": "unknown"}
P2P_MODE = re.compile(r"-p2p\s+(rw|r|w|n|a)\b")
GPU_LINE = re.compile(r"^\s*GPU (\d+): (.*?)(?: \(UUID: ([^)]*)\))?\s*$", re.A)
MIG_LINE = re.compile(r"^\s*MIG\s+(\S+)\s+Device\s+\d+:")   # `nvidia-smi -L`: an instance under its GPU
NVLINK_LINE = re.compile(r"^\s*Link (\d+):\s*(.*?)\s*$", re.A)
RUN_ON_ROW = re.compile(r"X(?:NV\d|NODE|SYS|PH|PX|PI|SOC|CPU|OK|CNS|GNS|TNS|NS|U)")
QUOTE = re.compile(r"^>+ ?")
CPULIST = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$", re.A)
# nvidia-smi's legend lines, every wording seen across drivers (old ones say SOC and "PCIe switch").
LEGEND = (
    "X = Self", "SYS = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "SOC = Connection traversing PCIe as well as the SMP link between CPU sockets(e.g. QPI)",
    "NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
    "PHB = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "PXB = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "PXB = Connection traversing multiple PCIe switches (without traversing the PCIe Host Bridge)",
    "PIX = Connection traversing at most a single PCIe bridge", "PIX = Connection traversing a single PCIe switch",
    "NV# = Connection traversing a bonded set of # NVLinks",
    "OK = Status Ok", "CNS = Chipset not supported", "GNS = GPU not supported", "TNS = Topology not supported",
    "NS = Not supported", "DR = Disabled by regkey", "U = Unknown")
P2P_LEGEND = {"OK", "CNS", "GNS", "TNS", "NS", "DR"}
TOPO_LEGEND = {"SYS", "SOC", "NODE", "PHB", "PXB", "PIX", "NV#"}
# What every "cut off" refusal tells the user to do instead.
FULL_COPY = "save the whole output with `nvidia-smi topo -m > topo.txt` and give that file"
DRIVER = re.compile(r"Driver Version:\s*([\d.]+)")  # nvidia-smi's banner, or gputopo's regenerated text
# nvidia-smi prints no number longer than this (an index, NV#, a CPU list; a serial number has 13 digits): a longer
# run is not its output, and int() refuses 4,301 digits.
MOST_DIGITS = 20
LONG_NUMBER = re.compile(r"\d{%d,}" % (MOST_DIGITS + 1))
# The most GPUs one paste is read for: --best's bound, more than any machine holds. Every command on a paste of
# them answers in a few seconds (inspect, --json, --markdown, --model, --best: 1 to 3 s here); at 600 GPUs `inspect`
# took 23 s and 205 MB, and `nvlink -s` of 2,000 GPUs more than a minute.
MOST_GPUS = 256
MOST_NICS = 64         # NIC columns of `topo -m` (DGX H100 has 12; nccllog reads 64 networks)
MOST_NAME = 96         # characters of a GPU's name or UUID: NVML_DEVICE_NAME_V2_BUFFER_SIZE
MOST_MIG = 7           # MIG instances a GPU lists (`nvidia-smi -L`): A100, H100 and B200 have at most 7
MOST_LINES = 50_000    # lines of one text: 10x `nvlink -s` of MOST_GPUS GPUs (18 links each), a terminal's scroll
TOO_MANY = ("more than a paste is read for (at most {most:,}{why}): is it one machine's nvidia-smi output,"
            " unedited?")


def _echo(text: str) -> str:
    """A piece of the paste as an error quotes it: whole up to 160 characters (a legend line, to where it was cut),
    else its start and its length."""
    return text if len(text) <= 160 else f"{text[:100]}... ({len(text):,} characters)"


def _few(names, most: int = 6) -> str:
    """The first few names, each as a refusal quotes it, and how many more: an error stays one short line."""
    names = list(names)
    more = f" and {len(names) - most:,} more" if len(names) > most else ""
    return ", ".join(shown(n) for n in names[:most]) + more


def _too_many(what: str, n: int, most: int, why: str = "") -> BadInput:
    return BadInput(f"{n:,} {what}: " + TOO_MANY.format(most=most, why=why))


def clean(text: str) -> list[str]:
    """Lines without a byte-order mark, ANSI escapes, carriage returns or a quote mark (`> ` of a quoted
    reply; nvidia-smi never starts a line with '>')."""
    if "\x00" in text:
        raise BadInput("the input is binary, not nvidia-smi text")
    lines = max(text.count("\n"), text.count("\r")) + 1
    if lines > MOST_LINES:   # counted before anything is split: 66M blank lines took 5 min and 1.6 GB
        raise _too_many("lines", lines, MOST_LINES, ": `nvlink -s` of 256 GPUs prints about 5,000")
    long = LONG_NUMBER.search(text)
    if long:
        raise BadInput(f"line {text.count(chr(10), 0, long.start()) + 1} holds a {len(long.group())}-digit number:"
                       f" nvidia-smi prints none longer than {MOST_DIGITS} digits; is this its output, unedited?")
    lines = ANSI.sub("", text.lstrip("\ufeff")).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return [QUOTE.sub("", l) for l in lines]


@dataclass
class Matrix:
    """The grid of `topo -m` or `topo -p2p`: header labels, cells by (row, column), trailing columns."""
    labels: list[str]
    cells: dict[tuple[str, str], str]
    extras: dict[str, dict[str, str | None]] = field(default_factory=dict)
    nic_legend: dict[str, str] = field(default_factory=dict)
    trailers: list[str] = field(default_factory=list)
    p2p_mode: str | None = None
    flavour: str = "topo"              # "topo" (`topo -m`) or "p2p" (`topo -p2p`), from what the text shows


def _is_header(tokens: list[str]) -> bool:
    """GPU0 then another device label or a column title; a row (GPU0 X ..., even run together) is not."""
    if not tokens or tokens[0] != "GPU0":
        return False
    nxt = tokens[1] if len(tokens) > 1 else ""
    return not nxt or nxt == "CPU" or bool(LABEL.match(nxt) and not RUN_ON_ROW.match(nxt))


def _header(lines: list[str]) -> tuple[int, list[str], list[str]] | None:
    """Find the header line: device labels from GPU0 on, then the trailing column titles."""
    for i, line in enumerate(lines):
        tokens = re.findall(r"GPU\d+|NIC\d+|\S+", line)
        if not _is_header(tokens):
            continue
        labels = []
        for tok in tokens:
            if not LABEL.match(tok):
                break
            labels.append(tok)
        rest = " ".join(line[line.rindex(labels[-1]) + len(labels[-1]):].split())
        trailers = []
        while rest:
            title = next((t for t in TRAILERS if rest.startswith(t)), None)
            if title is None and any(t.startswith(rest) for t in TRAILERS):
                raise BadInput(f"the matrix header ends in {_echo(rest)!r}, the start of a column title: the line"
                               f" was cut at the right; {FULL_COPY}")
            if title is None:   # whole words no driver gputopo knows prints: a newer one, or an edited paste
                raise BadInput(f"the matrix header ends in {_echo(rest)!r}, not a column title nvidia-smi is known to"
                               " print"
                               " (CPU Affinity, NUMA Affinity, GPU NUMA ID): a newer driver's column, or an edited"
                               " paste? Remove that column to read the rest, and report it")
            trailers.append(title)
            rest = rest[len(title):].strip()
        last = labels[-1]
        if any(l != last and l.startswith(last) for l in labels) and not trailers:
            raise BadInput(f"the matrix header ends in {last!r}, part of a device name: the line was cut at the right;"
                           f" {FULL_COPY}")
        return i, labels, trailers
    return None


def _trailing(row: str, line: str, cells_end: int, values: list[str], trailers: list[str],
              header: str) -> dict[str, str | None]:
    """The values after a GPU row's cells -> {column title: value}; blank cells (nvidia-smi prints nothing there
    in some containers) are placed by the columns they sit under, a missing last cell means the line was cut."""
    if len(values) > len(trailers):
        what = f"names only {', '.join(trailers)}" if trailers else "has no CPU/NUMA affinity columns"
        raise BadInput(f"row {row} has {len(values)} values after its cells but the header {what}: the header"
                       f" line was cut at the right; {FULL_COPY}")
    if len(values) == len(trailers):
        placed = dict(zip(trailers, values))
    else:
        # Fewer values than titles: place each under the title it sits beneath (nvidia-smi aligns with tabs, so
        # a value starts at most one tab stop before its title).
        wide, head = line.expandtabs(8), header.expandtabs(8)
        starts = [head.find(t) for t in trailers]
        placed, pos = {}, len(line[:cells_end].expandtabs(8))
        for v in values:
            col = wide.index(v, pos)
            pos = col + len(v)
            under = [t for t, s in zip(trailers, starts) if s <= col + 8]
            title = under[-1] if under else None
            if (title is None or title in placed
                    or (placed and trailers.index(title) < trailers.index(list(placed)[-1]))):
                placed = {}
                break
            placed[title] = v
        if trailers[-1] not in placed:
            lost = ", ".join(repr(t) for t in trailers if t not in placed)
            raise BadInput(f"row {row} lacks the {lost} column(s) its header names: the line was cut at the right,"
                           f" or values ran together without tabs; {FULL_COPY}")
    for title, v in placed.items():
        if v == "N/A":
            continue
        if not CPULIST.match(v) or any(int(a) > int(b) for a, b in re.findall(r"(\d+)-(\d+)", v)):
            how = ("starts mid-list" if v[:1] in "-," else "ends mid-list" if v[-1:] in "-," else
                   "is not a CPU/NUMA list")
            raise BadInput(f"row {row}, {title} {_echo(v)!r} {how}: the paste lost part of the line; {FULL_COPY}")
    return {t: (None if placed.get(t) in (None, "N/A") else placed[t]) for t in trailers}


def _legend(lines: list[str]) -> set[str]:
    """Codes of the legend after the matrix. A legend line wrapped onto the next line (`fold`, a pager, a
    reflowed comment) is joined back; one cut short (a narrow terminal) is refused."""
    codes: set[str] = set()
    full = {" ".join(l.split()) for l in LEGEND}
    inside, i = False, 0
    while i < len(lines):
        line, i = lines[i], i + 1
        if re.match(r"^\s*Legend:", line):
            inside = True
            continue
        if re.match(r"^\s*NIC Legend:", line) or _is_header(line.split()):
            break
        if not inside or not line.strip():
            continue
        norm = " ".join(line.split())
        entry = re.match(r"^(\S+) = ", norm)
        if entry:
            codes.add(entry.group(1))
        while norm not in full and any(f.startswith(norm) for f in full) and i < len(lines) and lines[i].strip():
            longer = norm + " " + " ".join(lines[i].split())
            if not any(f.startswith(longer) for f in full):
                break
            norm, i = longer, i + 1
        if _cut_mid_word(norm, full):
            raise BadInput(f"the legend line {_echo(norm)!r} is cut short: the paste was cut at the right, so the"
                           f" matrix may be too; {FULL_COPY}")
    return codes


def _cut_mid_word(line: str, full: set[str]) -> bool:
    """True when `line` is a known legend line stopped inside a word ("... between PC"); a line that stops
    at a word boundary may be another driver's wording and is let through."""
    words = line.split(" ")
    for f in full:
        if f != line and f.startswith(line):
            whole = f.split(" ")
            if whole[len(words) - 1] != words[-1]:
                return True
    return False


def _row_like(line: str) -> str | None:
    """The label of a line shaped like a matrix row (a device name, then only link cells), else None."""
    tokens = line.split()
    if len(tokens) < 2 or not LABEL.match(tokens[0]):
        return None
    return tokens[0] if all(LINK_CELL.fullmatch(" " + t) for t in tokens[1:]) else None


def _check_labels(labels: list[str]) -> None:
    """A header's device labels: at most MOST_GPUS GPUs and MOST_NICS others, each once; checked before any row is
    read (a 10,000-column paste was read whole, then refused in an 89 KB line naming every GPU)."""
    gpus = sum(label.startswith("GPU") for label in labels)
    if gpus > MOST_GPUS:
        raise _too_many("GPU columns in the matrix header", gpus, MOST_GPUS, ", as --best; more than any machine"
                        " holds")
    if len(labels) - gpus > MOST_NICS:
        raise _too_many("NIC columns in the matrix header", len(labels) - gpus, MOST_NICS)
    seen: set = set()
    twice = [label for label in labels if label in seen or seen.add(label)]
    if twice:
        raise BadInput(f"the matrix header repeats a device label: {_few(dict.fromkeys(twice))}")


@lru_cache(maxsize=2)   # kind() then topo_matrix() or p2p_matrix() read the same text; callers never change it
def matrix(text: str) -> Matrix:
    """Parse the grid of `nvidia-smi topo -m` or `topo -p2p`."""
    lines = clean(text)
    found = _header(lines)
    if found is None:
        rows = [l.split()[0] for l in lines if l.split() and re.match(r"GPU\d+$", l.split()[0]) and " X" in l]
        if rows:
            raise BadInput(f"a matrix row for {rows[0]} but no header line above it (`GPU0 ... CPU Affinity`): the"
                           f" header was lost in copying; {FULL_COPY}")
        raise BadInput("not nvidia-smi output: expected `nvidia-smi topo -m`, `topo -p2p`, `nvlink -s` or `-L`")
    start, labels, trailers = found
    _check_labels(labels)
    m = Matrix(labels=labels, cells={}, trailers=trailers)
    mode = P2P_MODE.search("\n".join(lines[:start + 1]))
    m.p2p_mode = mode.group(1) if mode else None
    seen: set[str] = set()
    body_end = len(lines)
    for n, line in enumerate(lines[start + 1:], start + 1):
        if re.match(r"^\s*Legend:", line) or _is_header(re.findall(r"GPU\d+|NIC\d+|\S+", line)):
            body_end = n
            break
        first = re.match(r"^\s*(GPU\d+|NIC\d+|\S+?)(?=\s|X|$)", line)
        if not first or first.group(1) not in labels or first.group(1) in seen:
            stray = _row_like(line)
            if stray and stray not in labels:
                raise BadInput(f"the matrix has a row for {_echo(stray)} but the header has no column for it: the"
                               f" header line was cut at the right; {FULL_COPY}")
            continue
        row = first.group(1)
        seen.add(row)
        pos, values = first.end(), []
        while len(values) < len(labels):
            cell = LINK_CELL.match(line, pos)
            if not cell:
                break
            values.append(cell.group(1))
            pos = cell.end()
        rest = line[pos:].split()
        if len(values) < len(labels) and rest:
            col = labels[len(values)]
            if len(rest) == 1 and any(w.startswith(rest[0]) and w != rest[0] for w in LINK_WORDS):
                raise BadInput(f"row {row}, column {col}: {_echo(rest[0])!r} is a link type cut mid-word: the line"
                               f" was cut at the right; {FULL_COPY}")
            raise BadInput(f"row {row}, column {col}: {_echo(rest[0])!r} is not a link type of nvidia-smi's legend"
                           " (X, SYS, NODE, PHB, PXB, PIX, NV#): cut off or garbled?")
        if len(values) < len(labels):
            missing = _few(labels[len(values):])
            if not any(l.strip() for l in lines[n + 1:]):
                raise BadInput(f"the paste ends inside row {row} ({len(values)} of {len(labels)} cells): it was cut"
                               f" off at the bottom; {FULL_COPY}")
            raise BadInput(f"row {row} has {len(values)} of {len(labels)} cells (missing {missing}): the line was"
                           f" cut at the right; {FULL_COPY}")
        if values[labels.index(row)] != "X":
            raise BadInput(f"row {row} has {values[labels.index(row)]!r} where its own column should say X:"
                           " the columns are misaligned (a cell lost or added in the paste)")
        if rest and (LINK_CELL.fullmatch(" " + rest[0]) and rest[0] != "N/A" or not row.startswith("GPU")):
            raise BadInput(f"row {row} has more cells than the header has columns ({_echo(rest[0])!r} after"
                           f" {labels[-1]}): the header line was cut at the right; {FULL_COPY}")
        for col, v in zip(labels, values):
            if v.startswith("NV"):
                try:
                    link_type(v)   # the rule --link is held to
                except ValueError as e:
                    raise BadInput(f"row {row}, column {col}: {e}: an edited or garbled paste?") from None
            m.cells[(row, col)] = v
        if row.startswith("GPU"):
            m.extras[row] = _trailing(row, line, pos, rest, trailers, lines[start])
    gpu_labels = [l for l in labels if l.startswith("GPU")]
    missing_rows = [l for l in gpu_labels if l not in seen]
    if missing_rows:
        raise BadInput(f"the matrix header names {_few(missing_rows)} but no row for it:"
                       " the paste looks cut off at the bottom")
    codes = _legend(lines[body_end:])
    for line in lines[start + 1:]:
        legend = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", line)
        if legend:
            m.nic_legend[legend.group(1)] = legend.group(2)
    m.flavour = _flavour(m, codes)
    return m


def _flavour(m: Matrix, legend_codes: set[str]) -> str:
    """`topo -m` or `topo -p2p`, by what differs between them: their cells, legends and affinity columns."""
    values = set(m.cells.values())
    p2p = [why for why, seen in (("the command says -p2p", m.p2p_mode), ("P2P status cells", values & P2P_ONLY),
                                 ("a P2P legend", legend_codes & P2P_LEGEND)) if seen]
    topo = [why for why, seen in (("affinity columns", m.trailers),
                                  ("link-type cells", any(v in TOPO_ONLY or v.startswith("NV") for v in values)),
                                  ("a link-type legend", legend_codes & TOPO_LEGEND),
                                  ("NIC columns", any(not l.startswith("GPU") for l in m.labels))) if seen]
    if p2p and topo:
        raise BadInput(f"the text mixes `topo -p2p` ({', '.join(p2p)}) and `topo -m` ({', '.join(topo)}):"
                       " paste each output on its own")
    return "p2p" if p2p else "topo"


def _pairs(m: Matrix) -> list[tuple[str, str, str]]:
    """(a, b, value) per unordered pair with at least one GPU, header order, read from a's row."""
    out = []
    for i, a in enumerate(m.labels):
        for b in m.labels[i + 1:]:
            if not (a.startswith("GPU") or b.startswith("GPU")):
                continue
            v = m.cells.get((a, b)) or m.cells.get((b, a))
            if v is not None:
                out.append((a, b, v))
    return out


def topo_matrix(text: str) -> Topology:
    """`nvidia-smi topo -m` text -> Topology. Command line equivalent: `nvidia-smi topo -m`."""
    m = matrix(text)
    if m.flavour == "p2p":
        raise BadInput("this is a `nvidia-smi topo -p2p` matrix, not `topo -m`")
    notes = []
    absent = [t for t in TRAILERS[:2] if t not in m.trailers]
    if absent:
        notes.append(f"the paste has no {' or '.join(absent)} column (every GPU row is complete without it): that"
                     " affinity is unknown; older drivers omit NUMA Affinity, and if the paste was cut at the right,"
                     " `nvidia-smi topo -m > topo.txt` keeps every column")
    blank = [l for l in m.labels if l.startswith("GPU") and "CPU Affinity" in m.trailers
             and m.extras.get(l, {}).get("CPU Affinity") is None]
    if blank:
        notes.append(f"nvidia-smi printed no CPU affinity for {_few(blank)} (blank or N/A: a container or VM that"
                     " hides the host's CPUs)")
    gpus = []
    for label in m.labels:
        if label.startswith("GPU"):
            ex = m.extras.get(label, {})
            gpus.append(Gpu(name=label, index=int(label[3:]), cpu_affinity=ex.get("CPU Affinity"),
                            numa_affinity=ex.get("NUMA Affinity"), gpu_numa_id=ex.get("GPU NUMA ID")))
    nics = tuple(Nic(name=l, device=m.nic_legend.get(l, None if re.match(r"NIC\d+$", l) else l))
                 for l in m.labels if not l.startswith("GPU"))
    links = tuple(Link(a, b, None if v == "N/A" else v) for a, b, v in _pairs(m))  # N/A: unknown
    asym = [f"{a}-{b}" for a, b, _ in _pairs(m)
            if (b, a) in m.cells and (a, b) in m.cells and m.cells[(a, b)] != m.cells[(b, a)]]
    if asym:
        notes.append(f"the matrix is not symmetric for {_few(asym)}; rows were read as printed")
    return Topology(gpus=tuple(gpus), nics=nics, links=links, source="file", notes=tuple(notes))


def p2p_matrix(text: str) -> tuple[str | None, dict[tuple[str, str], str]]:
    """`nvidia-smi topo -p2p MODE` text -> (mode, {(GPUa, GPUb): status})."""
    m = matrix(text)
    if m.flavour != "p2p":
        raise BadInput("this is not a `nvidia-smi topo -p2p` matrix")
    return m.p2p_mode, {(a, b): v for a, b, v in _pairs(m)}


def gpu_list(text: str) -> list[Gpu]:
    """`nvidia-smi nvlink -s` or `nvidia-smi -L` text -> GPUs with model, UUID and NVLinks; at most MOST_GPUS GPUs,
    MAX_NVLINKS links and MOST_MIG instances each."""
    gpus: list[Gpu] = []
    links: dict[int, list[NvLink]] = {}
    migs: dict[int, list[str]] = {}
    lines = clean(text)
    listed_gpus = sum(1 for line in lines if GPU_LINE.match(line))
    if listed_gpus > MOST_GPUS:
        raise _too_many("`GPU n:` lines", listed_gpus, MOST_GPUS, ", as --best; more than any machine holds")
    for line in lines:
        mig = MIG_LINE.match(line)
        if mig and gpus:
            listed = migs.setdefault(len(gpus) - 1, [])
            if len(listed) == MOST_MIG:
                raise BadInput(f"GPU {gpus[-1].index} lists more than {MOST_MIG} MIG instances, more than a GPU splits"
                               " into: is this nvidia-smi's output, unedited?")
            listed.append(shown(mig.group(1)))
            continue
        g = GPU_LINE.match(line)
        if g:
            model, uuid = g.group(2).strip(), g.group(3)
            if len(model) > MOST_NAME or len(uuid or "") > MOST_NAME:
                raise BadInput(f"GPU {g.group(1)}: a {'name' if len(model) > MOST_NAME else 'UUID'} longer than"
                               f" nvidia-smi prints (at most {MOST_NAME} characters): is this its output, unedited?")
            gpus.append(Gpu(name=f"GPU{g.group(1)}", index=int(g.group(1)), model=model or None, uuid=uuid))
            continue
        ln = NVLINK_LINE.match(line)
        if ln and gpus:
            state = ln.group(2)
            speed = re.fullmatch(r"(\d+(?:\.\d+)?)\s*GB/s", state, re.A)
            if not speed and "inactive" not in state.lower():
                raise BadInput(f"GPU {gpus[-1].index}, Link {ln.group(1)}: {_echo(state)!r} is neither a speed"
                               " (26.562 GB/s) nor <inactive>: the paste is garbled")
            listed = links.setdefault(len(gpus) - 1, [])
            if len(listed) == MAX_NVLINKS:
                raise BadInput(f"GPU {gpus[-1].index} lists more than {MAX_NVLINKS} NVLinks, and no GPU has more"
                               f" (NV1 to NV{MAX_NVLINKS}, as --link): is this nvidia-smi's output, unedited?")
            listed.append(NvLink(link=int(ln.group(1)), active=bool(speed),
                                 speed_gbps=float(speed.group(1)) if speed else None))
    if not gpus:
        raise BadInput("no `GPU n: <name>` lines found (expected `nvidia-smi nvlink -s` or `nvidia-smi -L`)")
    return [replace(g, nvlinks=tuple(links[i]) if i in links else g.nvlinks,
                    mig=tuple(migs[i]) if i in migs else None) for i, g in enumerate(gpus)]


def kind(text: str) -> str:
    """Which nvidia-smi output this is: 'topo', 'p2p' or 'nvlink' (also `-L`)."""
    lines = clean(text)
    if any(GPU_LINE.match(l) for l in lines) and not _header(lines):
        return "nvlink"
    return matrix(text).flavour


def texts(pasted: list[str], gpu_model: str | None = None, names: list[str] | None = None) -> Topology:
    """Combine several pasted texts (any of the kinds above) into one Topology; errors name the text."""
    topo, p2p, listed = None, {}, []
    for i, text in enumerate(pasted):
        try:
            topo, more = _one(text, topo, p2p)
        except BadInput as e:
            raise BadInput(f"{names[i]}: {e}" if names else str(e)) from None
        listed.extend(more)
    if topo is None:
        names_ = sorted({g.name for g in listed} | {n for pair in p2p for n in pair}, key=lambda n: int(n[3:]))
        if len(names_) > MOST_GPUS:   # each text within the bound, all of them together not
            raise _too_many("GPUs in these texts together", len(names_), MOST_GPUS, ", as --best; more than any"
                            " machine holds")
        gpus = tuple(Gpu(name=n, index=int(n[3:])) for n in names_)
        pairs = [(a.name, b.name) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
        topo = Topology(gpus=gpus, links=tuple(Link(a, b, None) for a, b in pairs), source="file",
                        notes=("no `nvidia-smi topo -m` given: link types unknown",))
    driver = next((m.group(1) for t in pasted for m in [DRIVER.search(t)] if m), None)
    return replace(merge(topo, listed, p2p, gpu_model), driver=driver)


def _one(text: str, topo: Topology | None, p2p: dict) -> tuple[Topology | None, list[Gpu]]:
    """Read one text into the running topology / P2P table; returns GPUs listed by `nvlink -s`/`-L`.
    A text holding several matrices (an environment report with `topo -m` then `topo -p2p rw`) is read
    matrix by matrix."""
    if not text.strip():
        raise BadInput("the input is empty")
    parts = _matrices(text)
    if len(parts) > 1:
        listed: list[Gpu] = []
        for part in parts:
            topo, more = _one(part, topo, p2p)
            listed.extend(more)
        return topo, listed
    k = kind(text)
    # `nvidia-smi -L` lines saved in the same file as the matrix (before or after it) name the GPUs' models
    listed = gpu_list(text) if k != "nvlink" and any(GPU_LINE.match(line) for line in clean(text)) else []
    if k == "topo":
        if topo is not None:
            raise BadInput("a second `nvidia-smi topo -m` text; give one per machine")
        return topo_matrix(text), listed
    if k == "p2p":
        mode, statuses = p2p_matrix(text)
        for pair, status in statuses.items():
            p2p.setdefault(pair, {})[mode or "unknown"] = status  # the paste did not say which -p2p mode
        return topo, listed
    return topo, gpu_list(text)


def _matrices(text: str) -> list[str]:
    """The text split before each matrix header after the first; each part keeps the lines before its
    header (the command line that says `-p2p rw`)."""
    lines = clean(text)
    heads = [i for i, l in enumerate(lines) if _is_header(re.findall(r"GPU\d+|NIC\d+|\S+", l))]
    if len(heads) < 2:
        return [text]
    bounds = [0] + [h + 1 for h in heads[:-1]]
    return ["\n".join(lines[b:e]) for b, e in zip(bounds, heads[1:] + [len(lines)])]


def merge(topo: Topology, listed: list[Gpu], p2p: dict, gpu_model: str | None = None) -> Topology:
    """Add models, UUIDs and NVLink states (from `nvlink -s`/`-L`) and P2P statuses to a topology."""
    by_name: dict[str, Gpu] = {}
    for g in listed:   # `nvlink -s` and `-L` both list a GPU: each says what the other does not
        had = by_name.get(g.name)
        by_name[g.name] = g if had is None else replace(had, model=had.model or g.model, uuid=had.uuid or g.uuid,
                                                        nvlinks=had.nvlinks or g.nvlinks, mig=had.mig or g.mig)
    unknown = sorted(set(by_name) - {g.name for g in topo.gpus})
    if unknown:
        raise BadInput(f"{_few(unknown)} appear in `nvlink -s`/`-L` but not in the matrix: texts from"
                       " different machines?")
    gpus = []
    for g in topo.gpus:
        extra = by_name.get(g.name)
        if extra:
            g = replace(g, model=extra.model, uuid=extra.uuid, nvlinks=extra.nvlinks, mig=extra.mig)
        if gpu_model and not g.model:
            g = replace(g, model=gpu_model)
        gpus.append(g)
    links = []
    for l in topo.links:
        status = p2p.get((l.a, l.b)) or p2p.get((l.b, l.a))
        links.append(replace(l, p2p={**(l.p2p or {}), **status}) if status else l)
    named = sorted({g.model for g in gpus if g.model and g.model != gpu_model}) if gpu_model else []
    notes = (f"--gpu-model {gpu_model} not used: the paste names the GPUs ({', '.join(named)}); it names only"
             " GPUs a paste leaves unnamed",) if named else ()
    return replace(topo, gpus=tuple(gpus), links=tuple(links), notes=topo.notes + notes)
