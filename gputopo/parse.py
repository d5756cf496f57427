"""nvidia-smi text -> Topology. Pure: no machine access.

Reads `nvidia-smi topo -m`, `nvidia-smi topo -p2p r|w|rw|n|a`, `nvidia-smi nvlink -s` and `nvidia-smi -L`
as people paste them: prompt lines, tabs or spaces, CRLF, ANSI escapes, indentation, trailing commands.
A paste too damaged to read raises BadInput naming what is missing; nothing is guessed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from .errors import BadInput
from .topology import Gpu, Link, Nic, NvLink, Topology

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# Device labels in the header end in a digit (GPU0, NIC3, mlx5_0, bnxt_re1); trailing column titles do not.
LABEL = re.compile(r"^(?:GPU\d+|NIC\d+|[A-Za-z][\w.:-]*\d)$")
TRAILERS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
# Cell values, longest first so that cells run together by a lost tab ("NV12SYS") still split.
LINK_CELL = re.compile(r"\s*(NV\d+|NODE|SYS|PHB|PXB|PIX|SOC|CPU|CNS|GNS|TNS|N/A|OK|NS|X|U)(?![a-z])")
P2P_VALUES = {"OK", "CNS", "GNS", "TNS", "NS", "U", "X"}
P2P_EXPLAIN = {"OK": "supported", "CNS": "chipset not supported", "GNS": "GPU not supported",
               "TNS": "topology not supported", "NS": "not supported", "U": "unknown"}
P2P_MODE = re.compile(r"-p2p\s+(rw|r|w|n|a)\b")
GPU_LINE = re.compile(r"^\s*GPU (\d+): (.*?)(?: \(UUID: ([^)]*)\))?\s*$")
NVLINK_LINE = re.compile(r"^\s*Link (\d+):\s*(.*?)\s*$")
DRIVER = re.compile(r"Driver Version:\s*([\d.]+)")  # nvidia-smi's banner, or gputopo's regenerated text


def clean(text: str) -> list[str]:
    """Lines without ANSI escapes or carriage returns."""
    if "\x00" in text:
        raise BadInput("the input is binary, not nvidia-smi text")
    return ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n").split("\n")


@dataclass
class Matrix:
    """The grid of `topo -m` or `topo -p2p`: header labels, cells by (row, column), trailing columns."""
    labels: list[str]
    cells: dict[tuple[str, str], str]
    extras: dict[str, dict[str, str | None]] = field(default_factory=dict)
    nic_legend: dict[str, str] = field(default_factory=dict)
    trailers: list[str] = field(default_factory=list)
    p2p_mode: str | None = None


def _header(lines: list[str]) -> tuple[int, list[str], list[str]] | None:
    """Find the header line: device labels from GPU0 on, then the trailing column titles."""
    for i, line in enumerate(lines):
        tokens = re.findall(r"GPU\d+|NIC\d+|\S+", line)
        if not tokens or tokens[0] != "GPU0" or (len(tokens) > 1 and tokens[1] == "X"):
            continue
        labels = []
        for tok in tokens:
            if not LABEL.match(tok):
                break
            labels.append(tok)
        rest = line.rsplit(labels[-1], 1)[1] if labels else line
        trailers = [t for t in TRAILERS if t in " ".join(rest.split())]
        return i, labels, trailers
    return None


def matrix(text: str) -> Matrix:
    """Parse the grid of `nvidia-smi topo -m` or `topo -p2p`."""
    lines = clean(text)
    found = _header(lines)
    if found is None:
        raise BadInput("no `nvidia-smi topo -m` header found (a line starting with GPU0)")
    start, labels, trailers = found
    if len(set(labels)) != len(labels):
        raise BadInput("the matrix header repeats a device label: " + " ".join(labels))
    m = Matrix(labels=labels, cells={}, trailers=trailers)
    mode = P2P_MODE.search("\n".join(lines[:start + 1]))
    m.p2p_mode = mode.group(1) if mode else None
    seen: set[str] = set()
    for line in lines[start + 1:]:
        if re.match(r"^\s*Legend:", line):
            break
        first = re.match(r"^\s*(GPU\d+|NIC\d+|\S+?)(?=\s|X|$)", line)
        if not first or first.group(1) not in labels or first.group(1) in seen:
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
        if len(values) < len(labels) and line[pos:].strip():
            raise BadInput(f"row {row}, column {labels[len(values)]}: {line[pos:].split()[0]!r} is not a link type"
                           " of nvidia-smi's legend (X, SYS, NODE, PHB, PXB, PIX, NV#): cut off or garbled?")
        if len(values) < len(labels):
            missing = ", ".join(labels[len(values):])
            raise BadInput(f"row {row} has {len(values)} of {len(labels)} cells (missing {missing}):"
                           " the paste looks cut off at the right; paste the full width")
        if values[labels.index(row)] != "X":
            raise BadInput(f"row {row} has {values[labels.index(row)]!r} where its own column should say X:"
                           " the columns are misaligned (a cell lost or added in the paste)")
        for col, v in zip(labels, values):
            m.cells[(row, col)] = v
        if row.startswith("GPU"):
            rest = line[pos:].split()
            if len(rest) < len(trailers):
                lost = ", ".join(repr(t) for t in trailers[len(rest):])
                raise BadInput(f"row {row} lacks the {lost} column(s) its header names: the paste looks cut off"
                               " at the right, or values ran together without tabs")
            if len(rest) > len(trailers) and row == "GPU0":
                raise BadInput(f"row {row} has {len(rest)} values after its cells but the header names"
                               f" {len(trailers)} column(s): the header line looks cut off")
            m.extras[row] = {t: (None if v == "N/A" else v) for t, v in zip(trailers, rest)}
    gpu_labels = [l for l in labels if l.startswith("GPU")]
    missing_rows = [l for l in gpu_labels if l not in seen]
    if missing_rows:
        raise BadInput(f"the matrix header names {', '.join(missing_rows)} but no row for it:"
                       " the paste looks cut off at the bottom")
    for line in lines[start + 1:]:
        legend = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", line)
        if legend:
            m.nic_legend[legend.group(1)] = legend.group(2)
    return m


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
    values = {v for v in m.cells.values()}
    if values and values <= P2P_VALUES:
        raise BadInput("this is a `nvidia-smi topo -p2p` matrix, not `topo -m`")
    if "CPU Affinity" not in m.trailers:
        # Every nvidia-smi prints this column; without it the right edge of the paste is gone.
        raise BadInput(f"the header has no 'CPU Affinity' column (it ends at {m.labels[-1]!r}):"
                       " the paste looks cut off at the right; paste the full width")
    gpus = []
    for label in m.labels:
        if label.startswith("GPU"):
            ex = m.extras.get(label, {})
            gpus.append(Gpu(name=label, index=int(label[3:]), cpu_affinity=ex.get("CPU Affinity"),
                            numa_affinity=ex.get("NUMA Affinity"), gpu_numa_id=ex.get("GPU NUMA ID")))
    nics = tuple(Nic(name=l, device=m.nic_legend.get(l, None if re.match(r"NIC\d+$", l) else l))
                 for l in m.labels if not l.startswith("GPU"))
    links = tuple(Link(a, b, None if v == "N/A" else v) for a, b, v in _pairs(m))  # N/A: unknown
    notes = []
    asym = [f"{a}-{b}" for a, b, _ in _pairs(m)
            if (b, a) in m.cells and (a, b) in m.cells and m.cells[(a, b)] != m.cells[(b, a)]]
    if asym:
        notes.append("the matrix is not symmetric for " + ", ".join(asym) + "; rows were read as printed")
    return Topology(gpus=tuple(gpus), nics=nics, links=links, source="file", notes=tuple(notes))


def p2p_matrix(text: str) -> tuple[str | None, dict[tuple[str, str], str]]:
    """`nvidia-smi topo -p2p MODE` text -> (mode, {(GPUa, GPUb): status})."""
    m = matrix(text)
    if not set(m.cells.values()) <= P2P_VALUES:
        raise BadInput("this is not a `nvidia-smi topo -p2p` matrix")
    return m.p2p_mode, {(a, b): v for a, b, v in _pairs(m)}


def gpu_list(text: str) -> list[Gpu]:
    """`nvidia-smi nvlink -s` or `nvidia-smi -L` text -> GPUs with model, UUID and NVLinks."""
    gpus: list[Gpu] = []
    links: dict[int, list[NvLink]] = {}
    for line in clean(text):
        g = GPU_LINE.match(line)
        if g:
            gpus.append(Gpu(name=f"GPU{g.group(1)}", index=int(g.group(1)), model=g.group(2).strip() or None,
                            uuid=g.group(3)))
            continue
        ln = NVLINK_LINE.match(line)
        if ln and gpus:
            state = ln.group(2)
            speed = re.match(r"([\d.]+)\s*GB/s", state)
            links.setdefault(len(gpus) - 1, []).append(NvLink(
                link=int(ln.group(1)), active=bool(speed), speed_gbps=float(speed.group(1)) if speed else None))
    if not gpus:
        raise BadInput("no `GPU n: <name>` lines found (expected `nvidia-smi nvlink -s` or `nvidia-smi -L`)")
    return [replace(g, nvlinks=tuple(links[i])) if i in links else g for i, g in enumerate(gpus)]


def kind(text: str) -> str:
    """Which nvidia-smi output this is: 'topo', 'p2p' or 'nvlink' (also `-L`)."""
    lines = clean(text)
    if any(GPU_LINE.match(l) for l in lines) and not _header(lines):
        return "nvlink"
    found = _header(lines)
    if found is None:
        raise BadInput("not nvidia-smi output: expected `nvidia-smi topo -m`, `topo -p2p`, `nvlink -s` or `-L`")
    body = " ".join(lines[found[0] + 1:])
    first_row = re.search(r"GPU0\s+X\s+(\S+)", body)
    if P2P_MODE.search("\n".join(lines[:found[0] + 1])) or (first_row and first_row.group(1) in P2P_VALUES):
        return "p2p"
    return "topo"


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
        gpus = tuple(Gpu(name=n, index=int(n[3:])) for n in names_)
        pairs = [(a.name, b.name) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
        topo = Topology(gpus=gpus, links=tuple(Link(a, b, None) for a, b in pairs), source="file",
                        notes=("no `nvidia-smi topo -m` given: link types unknown",))
    driver = next((m.group(1) for t in pasted for m in [DRIVER.search(t)] if m), None)
    return replace(merge(topo, listed, p2p, gpu_model), driver=driver)


def _one(text: str, topo: Topology | None, p2p: dict) -> tuple[Topology | None, list[Gpu]]:
    """Read one text into the running topology / P2P table; returns GPUs listed by `nvlink -s`/`-L`."""
    if not text.strip():
        raise BadInput("the input is empty")
    k = kind(text)
    if k == "topo":
        if topo is not None:
            raise BadInput("a second `nvidia-smi topo -m` text; give one per machine")
        return topo_matrix(text), []
    if k == "p2p":
        mode, statuses = p2p_matrix(text)
        for pair, status in statuses.items():
            p2p.setdefault(pair, {})[mode or "r"] = status
        return topo, []
    return topo, gpu_list(text)


def merge(topo: Topology, listed: list[Gpu], p2p: dict, gpu_model: str | None = None) -> Topology:
    """Add models, UUIDs and NVLink states (from `nvlink -s`/`-L`) and P2P statuses to a topology."""
    by_name = {g.name: g for g in listed}
    unknown = sorted(set(by_name) - {g.name for g in topo.gpus})
    if unknown:
        raise BadInput(f"{', '.join(unknown)} appear in `nvlink -s`/`-L` but not in the matrix: texts from"
                       " different machines?")
    gpus = []
    for g in topo.gpus:
        extra = by_name.get(g.name)
        if extra:
            g = replace(g, model=extra.model, uuid=extra.uuid, nvlinks=extra.nvlinks)
        if gpu_model and not g.model:
            g = replace(g, model=gpu_model)
        gpus.append(g)
    links = []
    for l in topo.links:
        status = p2p.get((l.a, l.b)) or p2p.get((l.b, l.a))
        links.append(replace(l, p2p={**(l.p2p or {}), **status}) if status else l)
    return replace(topo, gpus=tuple(gpus), links=tuple(links))
