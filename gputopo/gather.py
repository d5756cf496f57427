"""Every node's inspect report, through the engine the cluster has (srun, pdsh, ssh), or from files.

Each node runs `timeout T <remote>` (default remote: this Python's `-m gputopo inspect --json`, so the nodes
need gputopo at the same path, as a shared virtualenv gives) with GPUTOPO_NODE set to the name the fleet knows
it by. One local process group runs the lot (srun, pdsh) or one per node (ssh); past the deadline, or on
Ctrl-C, every group is ended (SIGTERM, then SIGKILL), which ends the remote commands with their connections, and
the nodes' own `timeout` ends them in any case. A node that does not answer, or answers an error, is named with
the reason; the others are still reported.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from . import launch, parse
from .errors import BadInput
from .parse import ANSI

MARK = "GPUTOPO_NODE"     # the first line each srun task prints: which node the task's lines come from
STARTUP_S = 15            # what an engine may take beyond the per-node timeout to start and connect


def remote_command(remote: str | None, timeout: float) -> str:
    """The shell command each node runs: the report, or the user's --remote-command (any shell line: `cd`,
    `source`, pipes), within the timeout."""
    if remote:
        return f"timeout -k 2 {timeout:g} bash -c {shlex.quote(remote)}"
    return f"timeout -k 2 {timeout:g} " + shlex.join([sys.executable, "-m", "gputopo", "inspect", "--json"])


# The most nodes one --fleet asks: a hostfile or a Slurm host list past it is refused, not read on (2 million
# lines would take minutes before the first ssh, and over ssh 64 at a time each node costs up to --timeout).
MOST_NODES = 10_000
# What a host name may hold: launch.HOST, the one rule for --hosts and deepspeed-config --master-addr.
HOST, MOST_HOST, host_problem = launch.HOST, launch.MOST_HOST, launch.host_problem


def hostfile(path: str) -> list[str]:
    """Hosts from DeepSpeed's hostfile format (`name slots=N`) or one name per line; # comments. At most
    MOST_NODES; a name that starts with '-' (ssh would read it as an option) or is not a host name (host_problem) is
    refused."""
    from .sources import read_text
    try:
        text = read_text(path, expect="a hostfile (one host per line)")
    except BadInput as e:
        raise BadInput(f"--hosts {e}") from None
    hosts: dict[str, int] = {}   # host -> how many times listed, in the file's order
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        host = words[0]
        found = host_problem(host)
        if found:
            raise BadInput(f"--hosts {path}: line {number}: {found}")
        hosts[host] = hosts.get(host, 0) + 1
        if len(hosts) > MOST_NODES:
            raise BadInput(f"--hosts {path}: more than {MOST_NODES} hosts; --fleet asks at most {MOST_NODES}"
                           " nodes: split the list")
    if not hosts:
        raise BadInput(f"--hosts {path}: no host in it (one per line, or DeepSpeed's `name slots=N`)")
    dup = sorted(h for h, n in hosts.items() if n > 1)
    if dup:
        raise BadInput(f"--hosts {path}: {', '.join(dup)} listed twice")
    return list(hosts)


def slurm_nodes(expression: str, what: str = "--slurm-nodes") -> list[str]:
    """A Slurm host list (node[01-04],gpu7) as names, expanded by scontrol itself; at most MOST_NODES. `what`
    gave it, named in a refusal: the option, or SLURM_JOB_NODELIST inside an allocation."""
    what += "=" if what.isupper() else " "
    if expression.startswith("-"):
        raise BadInput(f"{what}{expression}: starts with '-', which scontrol would read as an option")
    names = _ask(["scontrol", "show", "hostnames", expression]).split()
    if not names:
        raise BadInput(f"no node in the Slurm host list {expression!r}")
    if len(names) > MOST_NODES:
        raise BadInput(f"{what}{expression}: {len(names)} nodes; --fleet asks at most {MOST_NODES}")
    return names


def _ask(argv: list[str]) -> str:
    """A quick local command's output; BadInput naming it when it is missing or fails."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise BadInput(f"{argv[0]} is not installed here (the Slurm client tools)") from None
    except subprocess.TimeoutExpired:
        raise BadInput(f"{shlex.join(argv)} did not answer within 30 s") from None
    if r.returncode:
        raise BadInput(f"{shlex.join(argv)}: {(r.stderr or r.stdout).strip().splitlines()[-1:] or ['failed']}"[:300])
    return r.stdout


def unavailable_slurm_nodes(nodes: list[str], inside: bool = False) -> dict[str, str]:
    """Nodes Slurm itself says cannot run a task (down, drained, not responding), with its state and reason:
    srun would refuse the whole step for one of them. Inside an allocation a draining node still runs steps."""
    out = {}
    gone = r"(down|fail|unk|boot|npc|futr|inval)" if inside else r"(down|drain|drng|fail|maint|unk|boot|npc|futr|inval)"
    for line in _ask(["sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N|%t|%E"]).splitlines():
        name, state, reason = (line.split("|") + ["", ""])[:3]
        if re.match(gone, state) or state.endswith("*"):
            out[name] = f"Slurm lists it {state}" + (f" ({reason})" if reason and reason != "none" else "")
    return out


def srun_argv(nodes: list[str], cmd: str, timeout: float, *, inside: bool, partition: str | None) -> list[str]:
    """One srun step, one task per node, each line labelled with its task; inside an allocation it may overlap
    what runs there, from a login node it is its own allocation and gives up when it cannot start at once."""
    argv = ["srun", f"--nodes={len(nodes)}", "--ntasks-per-node=1", f"--nodelist={','.join(nodes)}", "--label",
            "--kill-on-bad-exit=0", "--job-name=gputopo-fleet"]
    argv += ["--overlap"] if inside else [f"--immediate={int(STARTUP_S)}"]
    argv += [f"--partition={partition}"] if partition else []
    script = f'echo "{MARK} $SLURMD_NODENAME"; export GPUTOPO_NODE="$SLURMD_NODENAME"; exec {cmd}'
    return argv + ["bash", "-c", script]


def pdsh_argv(hosts: list[str], cmd: str, timeout: float) -> list[str]:
    """pdsh's exec module runs one ssh per host (%h: the host), so each node knows its name."""
    return ["pdsh", "-R", "exec", "-f", "64", "-w", ",".join(hosts), *ssh_argv("%h", cmd, timeout)]


def connect_s(timeout: float) -> int:
    """ssh's ConnectTimeout for a per-node timeout: seconds, at most STARTUP_S."""
    return max(1, int(min(timeout, STARTUP_S)))


def ssh_argv(host: str, cmd: str, timeout: float) -> list[str]:
    """One ssh to `host` (%h for pdsh's exec module), with a terminal (-tt): when the connection ends (the
    deadline, Ctrl-C) the remote command gets SIGHUP and ends too, instead of running on unseen."""
    connect = connect_s(timeout)
    name = host if host == "%h" else shlex.quote(host)
    return ["ssh", "-tt", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect}", "-o", "LogLevel=ERROR",
            "--", host, f"GPUTOPO_NODE={name} {cmd}"]   # after --: a host is never an option


MAX_AT_ONCE = 64   # processes started at once, as `pdsh -f 64`: one per node would run out of file descriptors


def run(groups: dict[str, list[str]], deadline_s: float, nodes: int = 1, key: str | None = None) -> dict[str, tuple]:
    """Run each argv in its own process group, MAX_AT_ONCE at a time, all within the deadline; {key: (exit
    status, or None when the deadline ended it or it could not start, stdout, stderr, the line keys whose output
    passed MOST_REPORT)}. An argv answers for `nodes` nodes, its lines told apart by the `key` pattern's group 1
    (srun's task, pdsh's host): each is kept to MOST_REPORT in memory, the rest read and dropped (two nodes
    printing 1.5 GB took 8.6 GB). Ctrl-C ends every process started before it propagates."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor
    end, started, lock, stop = time.monotonic() + deadline_s, [], threading.Lock(), threading.Event()

    def one(argv):
        if stop.is_set() or time.monotonic() >= end:
            return None, "", "not started: the deadline passed", set()
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, errors="replace", start_new_session=True)
        except FileNotFoundError:
            raise BadInput(f"{argv[0]} is not installed here: --fleet asks the nodes through it") from None
        except OSError as e:   # too many processes or open files: this node is not asked, the others are
            return 1, "", f"could not start {argv[0]}: {e.strerror or e}", set()
        with lock:
            started.append(p)
        if stop.is_set():
            _end(p)
        out, err = {}, {}
        readers = [threading.Thread(target=_drain, args=(p.stdout, nodes, key, out), daemon=True),
                   threading.Thread(target=_drain, args=(p.stderr, nodes, key, err), daemon=True)]
        for r in readers:
            r.start()
        try:
            status = p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            _end(p)
            status = None
        for r in readers:
            r.join()
        return status, out["text"], err["text"], out["over"]

    pool = ThreadPoolExecutor(max_workers=max(1, min(MAX_AT_ONCE, len(groups))))
    try:
        futures = {k: pool.submit(one, argv) for k, argv in groups.items()}
        return {k: f.result() for k, f in futures.items()}
    except BaseException:
        stop.set()
        with lock:
            running = [p for p in started if p.poll() is None]
        for p in running:
            _end(p)
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _drain(stream, nodes: int, key: str | None, into: dict) -> None:
    """Read `stream` to its end, keeping at most MOST_REPORT of each key's lines (group 1 of `key`; all one key
    without it) and of `nodes` keys in all; into["text"] what was kept, into["over"] the keys cut."""
    kept, sizes, over, total, at, starts = [], {}, set(), 0, "", True
    with stream:
        while part := stream.readline(2 ** 16):   # a line of 1.5 GB is read in parts
            if key and starts:   # a line's first part names its key; its further parts keep it
                m = re.match(key, part)
                at = m.group(1) if m else ""
            starts = part.endswith("\n")
            sizes[at] = sizes.get(at, 0) + len(part)
            if sizes[at] > MOST_REPORT or total + len(part) > MOST_REPORT * nodes:
                over.add(at)
            else:
                kept.append(part)
                total += len(part)
    into["text"], into["over"] = "".join(kept), over


def _end(p: subprocess.Popen) -> None:
    """SIGTERM to the process and every descendant (srun cancels its step, ssh closes its connection; pdsh puts
    its children in groups of their own, so the group alone is not enough), SIGKILL to what is left after 3 s."""
    import psutil
    try:
        tree = psutil.Process(p.pid)
        procs = [tree, *tree.children(recursive=True)]
    except psutil.NoSuchProcess:
        procs = []
    for proc in procs:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=3)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    try:
        os.killpg(p.pid, signal.SIGKILL)   # anything of its group that was not yet a child when listed
    except (ProcessLookupError, PermissionError):
        pass
    p.wait()


def split_lines(text: str, pattern: str) -> dict[str, list[str]]:
    """Lines prefixed by a key (srun's `  0: `, pdsh's `host: `) -> {key: its lines}."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = re.match(pattern, line)
        if m:
            out.setdefault(m.group(1), []).append(m.group(2))
    return out


def answer(lines: list[str], status, err: str, timeout: float) -> tuple[dict | None, str | None]:
    """(report, None) or (None, why) from one node's lines. The report is the JSON object that starts a line
    (over ssh -tt the node's stderr shares the stream: a note before it is skipped)."""
    text = "\n".join(lines)
    start = text.find("{") if text.startswith("{") else text.find("\n{") + 1
    if start >= 0 and text[start:start + 1] == "{":
        try:
            data, _ = json.JSONDecoder().raw_decode(text[start:])
        except (ValueError, RecursionError):
            data = None
        found = problem(data)
        if found is None:
            return data, None
        if isinstance(data, dict) and "gpus" in data:   # a report, but one this gputopo cannot read
            return None, f"its report: {found}"
    if status is None or status in (124, 137):
        return None, f"no answer within {timeout:g} s"
    last = ANSI.sub("", (err.strip().splitlines() or text.strip().splitlines() or [""])[-1]).strip()
    if not last:
        return None, (f"exit status {status}" if status else "ended") + ", with no report and no message"
    return None, (f"exit status {status}: " if status else "") + last[:200]


@dataclass(frozen=True)
class Within:
    """A number from lo to hi (`said` as a person reads the range): a whole number, or with `real` any (JSON has no
    NaN or Infinity, but 1e400 reads as infinity)."""
    lo: float
    hi: float
    said: str
    real: bool = False


@dataclass(frozen=True)
class Text:
    """A text of at most `most` characters."""
    most: int


# A GPU's name or model, a link's ends: NVML's names are at most 96 characters (parse.MOST_NAME, as a paste's are);
# any other text a node reports (a version, a variable's name or value, a finding): a path's 4096 at most.
NAME, TEXT = Text(parse.MOST_NAME), Text(4096)
# Bounds a reader accepts (NVML reports no less, no GPU more): a value past them is not a measurement.
CELSIUS = (Within(-40, 150, "-40..150 °C", real=True), None)
WATTS = (Within(0, 10_000, "0..10000 W", real=True), None)
BYTES = (Within(0, 2**50, "0..1 PiB"), None)
LANES = (Within(1, 32, "x1..x32"), None)
GENERATION = (Within(1, 8, "Gen1..Gen8"), None)
# The parts of an `inspect --json` report the fleet reads, and their types: a value of a listed type, or of one of
# a tuple's; [spec]: a list of such; {str: spec}: an object of such values; {"key": spec}: an object whose keys
# are checked where present, those ending in "!" required, an object's own keys texts of TEXT's length; Within: a
# number within bounds; Text: a text of at most so many characters.
OPTIONAL_TEXT, OPTIONAL_INT = (TEXT, None), (int, None)
REPORT = {"schema_version!": int, "gpus!": [{"name!": NAME, "model": (NAME, None), "pcie_width": LANES,
                                             "pcie_width_max": LANES, "pcie_gen": GENERATION,
                                             "pcie_gen_max": GENERATION, "numa_affinity": (TEXT, int, None),
                                             "temperature_c": CELSIUS, "power_draw_w": WATTS, "power_limit_w": WATTS,
                                             "memory_total_bytes": BYTES, "memory_used_bytes": BYTES,
                                             "throttle_reasons": ([TEXT], None), "lost": bool}],
          "links": ([{"a!": NAME, "b!": NAME, "type!": OPTIONAL_TEXT}], None), "nics": ([dict], None),
          "versions": ({str: OPTIONAL_TEXT}, None), "driver": OPTIONAL_TEXT, "env": ({str: OPTIONAL_TEXT}, None),
          "findings": ([{"level!": TEXT, "message!": TEXT}], None), "gpu_status": ({"reason": OPTIONAL_TEXT}, None),
          "source": OPTIONAL_TEXT}
REPORT_VERSION = 1
NAMES = {str: "a text", int: "a whole number", dict: "an object", list: "a list", None: "null", float: "a number",
         bool: "true or false"}


def problem(data) -> str | None:
    """What makes `data` other than an `inspect --json` report the fleet can read, in a few words naming where;
    None for a report."""
    found = _shape(data, REPORT, "the report")
    if found is None and data["schema_version"] != REPORT_VERSION:
        return f"schema_version {data['schema_version']}: this gputopo reads {REPORT_VERSION}"
    return found


def _shape(value, spec, where: str) -> str | None:
    """The first place `value` does not match `spec` (see REPORT)."""
    if isinstance(spec, tuple):
        found = [_shape(value, s, where) for s in spec]
        return None if None in found else found[0]
    if isinstance(spec, Within):
        if isinstance(value, bool) or not isinstance(value, (int, float) if spec.real else int):
            return f"{where} is {_kind(value)}, not {'a number' if spec.real else 'a whole number'}"
        if not spec.lo <= value <= spec.hi:
            shown = repr(value) if len(repr(value)) <= 24 else repr(value)[:20] + "..."
            return f"{where} is {shown}, not within {spec.said}"
        return None
    if isinstance(spec, Text):
        if not isinstance(value, str):
            return f"{where} is {_kind(value)}, not a text"
        return None if len(value) <= spec.most else f"{where} has {len(value):,} characters, more than {spec.most}"
    if spec is None:
        return None if value is None else f"{where} is {_kind(value)}, not null"
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"{where} is {_kind(value)}, not a list"
        return next((f for i, item in enumerate(value) for f in [_shape(item, spec[0], f"{where}[{i}]")] if f), None)
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return f"{where} is {_kind(value)}, not an object"
        if list(spec) == [str]:
            return next((f for k, v in value.items() for f in [_shape(k, TEXT, f"a key of {where}")
                                                                 or _shape(v, spec[str], f"{where}[{k!r}]")] if f),
                        None)
        for key, s in spec.items():
            name = key.rstrip("!")
            if name not in value:
                if key.endswith("!"):
                    return f"{where} has no {name!r}"
                continue
            found = _shape(value[name], s, f"{name}" if where == "the report" else f"{where}.{name}")
            if found:
                return found
        return None
    if isinstance(value, bool) and spec is not bool or not isinstance(value, spec):
        return f"{where} is {_kind(value)}, not {NAMES.get(spec, spec.__name__)}"
    return None


def _kind(value) -> str:
    """What a JSON value is, in words."""
    return NAMES.get(None if value is None else type(value), type(value).__name__)


MOST_REPORT = 8 * 2**20   # bytes: an 8-GPU report with its NICs is under 100 KB
MOST_DEPTH = 1000         # levels of JSON nesting: Python's recursion limit, where its JSON reader stops


def read_report(text: str, name: str) -> dict:
    """A report from its JSON text; BadInput naming what is wrong (NaN and Infinity are not JSON)."""
    def refuse(constant):
        raise ValueError(f"{constant} is not a JSON number")
    if len(text) > MOST_REPORT:
        raise BadInput(f"{name}: larger than {MOST_REPORT // 2**20} MiB, not an `inspect --json` report")
    try:
        data = json.loads(text, parse_constant=refuse)
    except ValueError as e:
        raise BadInput(f"{name}: not valid JSON ({e})") from None
    except RecursionError:   # Python's JSON reader stops there, before its stack would
        raise BadInput(f"{name}: JSON nested more than about {MOST_DEPTH} levels deep, not an `inspect --json`"
                       " report (one nests 5)") from None
    found = problem(data)
    if found:
        raise BadInput(f"{name}: not a `gputopo inspect --json` report this gputopo reads: {found}")
    return data


def over_slurm(nodes: list[str], cmd: str, timeout: float, *, inside: bool,
               partition: str | None = None) -> tuple[dict, dict]:
    """(reports, unreachable) from one srun step over the nodes Slurm can run a task on."""
    unreachable = unavailable_slurm_nodes(nodes, inside)
    live = [n for n in nodes if n not in unreachable]
    if not live:
        return {}, unreachable
    status, out, err, over = run({"srun": srun_argv(live, cmd, timeout, inside=inside, partition=partition)},
                                 timeout + STARTUP_S, len(live), SRUN_LINE)["srun"]
    by_task = split_lines(out, SRUN_LINE)
    node_of = {t: lines[0].split()[1] for t, lines in by_task.items()
               if lines and lines[0].startswith(MARK + " ") and len(lines[0].split()) > 1}
    said = _said(err, r"^srun: error: (\S+): tasks? [\d,\-]+: (.*)$")
    reports = {}
    for t, node in node_of.items():
        code = _exit_code(said.get(node, ""))
        report, why = (None, TOO_LONG) if t in over else answer(
            by_task[t][1:], None if status is None and code is None else code or 0, said.get(node, ""), timeout)
        if report is not None:
            reports[node] = report
        else:
            unreachable[node] = why
    for node in live:
        if node not in reports and node not in unreachable:
            unreachable[node] = (f"no answer within {timeout:g} s" if status is None
                                 else said.get(node) or _last(err) or "no answer")
    return {n: reports[n] for n in nodes if n in reports}, unreachable


def over_hosts(hosts: list[str], cmd: str, timeout: float, *, pdsh: bool) -> tuple[dict, dict]:
    """(reports, unreachable) through pdsh (one process, lines prefixed by host) or one ssh per host."""
    if pdsh:
        status, out, err, over = run({"pdsh": pdsh_argv(hosts, cmd, timeout)}, timeout + STARTUP_S, len(hosts),
                                     PDSH_LINE)["pdsh"]
        lines = split_lines(out, PDSH_LINE)
        errs = split_lines(err, r"^(?:pdsh@\S+: )?" + PDSH_LINE[1:])
        results = {h: (None if status is None else _exit_code("\n".join(errs.get(h, []))) or 0, lines.get(h, []),
                       "\n".join(e for e in errs.get(h, []) if "exited with exit code" not in e), h in over)
                   for h in hosts}
    else:
        done = run({h: ssh_argv(h, cmd, timeout) for h in hosts}, timeout + STARTUP_S)
        results = {h: (s, o.splitlines(), e, bool(over)) for h, (s, o, e, over) in done.items()}
    reports, unreachable = {}, {}
    for h in hosts:
        status, node_lines, node_err, too_long = results[h]
        report, why = (None, TOO_LONG) if too_long else answer(node_lines, status, node_err, timeout)
        if report is not None:
            reports[h] = report
        elif status == 255 and re.search(r"timed out", why, re.I):   # ssh's own: no connection at all
            unreachable[h] = f"no connection within {connect_s(timeout)} s: {why.removeprefix('exit status 255: ')}"
        else:
            unreachable[h] = why
    return reports, unreachable


SRUN_LINE = r"^\s*(\d+): ?(.*)$"   # srun --label's line: `  0: text`
TOO_LONG = f"answered more than {MOST_REPORT // 2**20} MiB (the rest read and dropped), not an `inspect --json` report"
# pdsh's line: `host: text`. The host ends at the first ": " (an IPv6 address holds colons, never ": "); an empty
# line is `host:`.
PDSH_LINE = r"^(\S+?)(?:: |:$)(.*)$"


def _said(err: str, pattern: str) -> dict[str, str]:
    """An engine's error lines about each node: {node: what it said}."""
    out: dict[str, str] = {}
    for line in err.splitlines():
        m = re.match(pattern, line.strip())
        if m:
            out[m.group(1)] = (out.get(m.group(1), "") + "\n" + m.group(2)).strip()
    return out


def _exit_code(text: str) -> int | None:
    found = re.findall(r"[Ee]xit(?:ed with exit)? code (\d+)", text)
    return int(found[-1]) if found else None


def _last(text: str) -> str:
    return (text.strip().splitlines() or [""])[-1].strip()


def from_files(paths: list[str], gpu_model: str | None = None) -> dict:
    """Reports collected before, one node per file, named by the file name without its extension: inspect
    --json output, or a pasted `nvidia-smi topo -m` (its GPUs' model from `nvidia-smi -L` lines in the file, else
    `gpu_model`). Read as `inspect -f` reads them: '-' is stdin, a BOM or UTF-16 (PowerShell) is text."""
    from . import parse, report, sources
    from .fleet import shown
    out, pastes = {}, 0
    for path in paths:
        name = "stdin" if path == "-" else Path(path).name   # node17.json, node17.topo.txt -> node17
        # escaped here as everywhere it is shown (a newline or ESC in a file name), so two names never become one
        node = shown(re.sub(r"(\.(topo|inspect|report))?\.(json|txt|md|log)$", "", name, flags=re.I) or name)
        if node in out:
            raise BadInput(f"--from-file: two files name node {node!r}: one file per node, named after it")
        try:
            text = sources.read_text(path, expect="an `inspect --json` report or `nvidia-smi topo -m` text")
        except BadInput as e:
            raise BadInput(f"--from-file {e}") from None
        if text.lstrip().startswith("{"):
            out[node] = read_report(text, f"--from-file {shown(path)}")
            continue
        pasted = sources.unwrap(text)
        try:
            topo = parse.texts(pasted, gpu_model)
        except BadInput as e:
            raise BadInput(f"--from-file {shown(path)}: {e}") from None
        out[node] = report.inspect(topo, sources=[path])
        pastes += 1
    if gpu_model and not pastes:
        raise BadInput("--gpu-model names the GPUs of a pasted node; every --from-file here is an `inspect --json`"
                       " report, which names its own")
    return out
