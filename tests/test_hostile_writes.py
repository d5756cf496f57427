"""Issue 42, hostile and careless inputs: an output replaces only a regular file; the validation cache is written by
rename and never followed through a link; command lines quote what they hold; --hosts is bounded and never reaches
ssh as an option; fleet reports are bounded and their values judged; stdout that cannot be written is one line,
exit 1. Everything made here lives in tmp_path (a character device is made with mknod as root, never /dev/null
itself); the heavy inputs run in a subprocess held to 1 GiB of address space and 60 s."""
import json
import os
import shlex
import socket
import stat
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from gputopo import fleet, gather, markdown
from gputopo.cli import cli

ROOT = os.geteuid() == 0


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def one_line(r, code: int, *texts):
    """One `Error:` line holding every text, the exit code, nothing on stdout, no traceback."""
    assert r.exit_code == code, (r.exit_code, r.output)
    assert r.output.startswith("Error: ") and r.output.count("\n") == 1, r.output
    assert all(t in r.output for t in texts), r.output
    assert r.stdout == "" and "Traceback" not in r.output


def bounded(argv, env=None, input_path=None) -> subprocess.CompletedProcess:
    """argv in a child held to 1 GiB of address space and 60 s, as the issue's done-when asks."""
    def limit():
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, preexec_fn=limit,
                          env={**os.environ, **(env or {})})


# --- 1. an output replaces only a regular file ------------------------------------------------------------------

def specials(tmp_path) -> dict:
    """name -> (path, what the refusal calls it): a FIFO, a socket, links to a device and to a regular file, a
    dangling link and, as root, a character device (/dev/null's numbers, made here)."""
    out = {}
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    out["fifo"] = (fifo, "a FIFO (named pipe)")
    sock = tmp_path / "s"
    if len(str(sock)) < 100:   # AF_UNIX paths are short
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(sock))
        s.close()
        out["socket"] = (sock, "a socket")
    (tmp_path / "devlink").symlink_to("/dev/null")
    out["link to /dev/null"] = (tmp_path / "devlink", "a symbolic link to /dev/null")
    (tmp_path / "real.json").write_text("keep me")
    (tmp_path / "filelink").symlink_to(tmp_path / "real.json")
    out["link to a file"] = (tmp_path / "filelink", "a symbolic link to ")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    out["dangling link"] = (tmp_path / "dangling", "a symbolic link to ")
    if ROOT:
        os.mknod(tmp_path / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        out["character device"] = (tmp_path / "null", "a character device")
    return out


def kinds(tmp_path) -> dict:
    return {str(p): os.lstat(p).st_mode for p in tmp_path.iterdir()}


@pytest.mark.parametrize("command", ["deepspeed-config", "bench-nvlink"])
def test_an_output_is_never_a_device_fifo_socket_or_link(tmp_path, command):
    """`-o /dev/null --force` as root made /dev/null a regular file, and printed "wrote /dev/null"."""
    for name, (path, said) in specials(tmp_path).items():
        before = kinds(tmp_path)
        args = ["deepspeed-config", "--stage", "2", "-o", path] if command == "deepspeed-config" else \
            ["bench-nvlink", "--output", path]
        one_line(run(*args, "--force"), 2, f"--output {path}: {said}", "not a regular file", "`-` is stdout")
        assert kinds(tmp_path) == before, name
    assert (tmp_path / "real.json").read_text() == "keep me"


def test_a_picture_is_never_a_device_or_link(tmp_path):
    """`inspect --plot NODE.png --force` over a device node."""
    (tmp_path / "a.png").symlink_to("/dev/null")
    os.mkfifo(tmp_path / "b.png")
    for path, said in ((tmp_path / "a.png", "a symbolic link to /dev/null"), (tmp_path / "b.png", "a FIFO")):
        one_line(run("inspect", "--example", "dgx-a100", "--plot", path, "--force"), 2, f"--plot {path}: {said}")
    if ROOT:
        os.mknod(tmp_path / "c.png", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        one_line(run("inspect", "--example", "dgx-a100", "--plot", tmp_path / "c.png", "--force"), 2,
                 "a character device")
        assert stat.S_ISCHR(os.lstat(tmp_path / "c.png").st_mode)


def test_a_launcher_file_is_never_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "hostfile")
    one_line(run("deepspeed-config", "--stage", "2", "--launcher", "deepspeed", "--gpus", "2", "--nodes", "2",
                 "-o", tmp_path / "ds.json", "--force"), 2, "launcher file", "hostfile: a FIFO")
    assert not (tmp_path / "ds.json").exists() and stat.S_ISFIFO(os.lstat(tmp_path / "hostfile").st_mode)


def test_what_became_a_fifo_during_the_work_is_not_replaced(tmp_path):
    from gputopo import files
    from gputopo.errors import WriteFailed
    out = tmp_path / "ds.json"
    files.check_output(str(out))   # nothing there before the work
    os.mkfifo(out)                 # ... and a FIFO after it
    with pytest.raises(WriteFailed, match="a FIFO"):
        files.write_atomic(str(out), "{}")
    assert stat.S_ISFIFO(os.lstat(out).st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["ds.json"]


def test_a_regular_file_and_stdout_still_work(tmp_path):
    out = tmp_path / "ds.json"
    out.write_text("old")
    r = run("deepspeed-config", "--stage", "2", "-o", out, "--force")
    assert r.exit_code == 0 and json.loads(out.read_text())["zero_optimization"]["stage"] == 2
    assert json.loads(run("deepspeed-config", "--stage", "2", "-o", "-").stdout)["zero_optimization"]["stage"] == 2


def test_force_keeps_the_replaced_files_mode_and_owner(tmp_path):
    """`--force` over a 0600 file gave a 0644 one, and a file of `nobody` became root's: a file replaced keeps its
    mode and, where this process may give it, its owner, as `sed -i` does."""
    out = tmp_path / "priv.json"
    out.write_text("old")
    out.chmod(0o600)
    owner = (65534, 65534) if ROOT else (os.geteuid(), os.getegid())
    os.chown(out, *owner)
    r = run("deepspeed-config", "--stage", "2", "--gpus", "2", "-o", out, "--force")
    assert r.exit_code == 0, r.output
    st = os.lstat(out)
    assert stat.S_IMODE(st.st_mode) == 0o600 and (st.st_uid, st.st_gid) == owner
    assert json.loads(out.read_text())["zero_optimization"]["stage"] == 2
    out.chmod(0o640)
    from gputopo import files
    files.write_atomic(str(out), "{}")
    assert stat.S_IMODE(os.lstat(out).st_mode) == 0o640 and sorted(p.name for p in tmp_path.iterdir()) == ["priv.json"]
    fresh = tmp_path / "fresh.json"
    files.write_atomic(str(fresh), "{}")   # nothing replaced: as any file the user writes
    assert stat.S_IMODE(os.lstat(fresh).st_mode) == 0o666 & ~files._umask()


def test_a_full_disk_says_whether_the_old_file_is_kept(tmp_path, monkeypatch):
    """"nothing was left there" was said also when the old file was, correctly, kept."""
    from gputopo import files
    from gputopo.errors import WriteFailed
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text("keep me")
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(WriteFailed) as e:
        files.write_atomic(str(old), "{}")
    assert str(e.value) == f"{old}: not written (No space left on device); the old file is kept as it was"
    with pytest.raises(WriteFailed) as e:
        files.write_atomic(str(new), "{}")
    assert str(e.value) == f"{new}: not written (No space left on device); nothing was left there"
    assert old.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["old.json"]


# --- 2. the DeepSpeed validation cache ----------------------------------------------------------------------------

@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The cache folder under XDG_CACHE_HOME, with DeepSpeed's version taken as 0.0 (installed or not)."""
    import importlib.metadata
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.0")
    folder = tmp_path / "gputopo"
    folder.mkdir()
    return folder


def test_the_cache_is_renamed_into_place_not_written_through_links(cache, tmp_path):
    """`validated.tmp` pointing elsewhere had that file overwritten."""
    from gputopo import validate
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (cache / "validated.tmp").symlink_to(victim)
    key, known = validate._cache_key({"a": 1})
    validate._remember(key, known, "0.0")
    assert victim.read_text() == "precious"
    assert stat.S_ISREG(os.lstat(cache / "validated.json").st_mode)
    assert validate._cache_key({"a": 1})[1] == {key: "0.0"}
    assert sorted(p.name for p in cache.iterdir()) == ["validated.json", "validated.tmp"]


def test_a_cache_that_is_a_link_is_neither_read_nor_replaced(cache, tmp_path):
    """`validated.json` became the link's target's copy; its target is not read either."""
    from gputopo import validate
    victim = tmp_path / "victim.json"
    victim.write_text(json.dumps({"planted": "0.0"}))
    (cache / "validated.json").symlink_to(victim)
    key, known = validate._cache_key({"a": 1})
    assert known == {}
    validate._remember(key, known, "0.0")
    assert json.loads(victim.read_text()) == {"planted": "0.0"} and os.path.islink(cache / "validated.json")


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "large"])
def test_a_cache_that_never_ends_is_not_read(cache, kind):
    """A cache pointing at /dev/zero grew to 5.5 GB and ignored SIGTERM; a FIFO would wait for a writer forever."""
    from gputopo import validate
    path = cache / "validated.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "/dev/zero":
        path.symlink_to("/dev/zero")
    else:
        path.write_text(" " * (validate.CACHE_MOST + 1) + "{}")
    code = ("import importlib.metadata as m; m.version = lambda name: '0.0'\n"
            "from gputopo import validate; print(validate._cache_key({'a': 1})[1])")
    r = bounded([sys.executable, "-c", code], env={"XDG_CACHE_HOME": str(cache.parent)})
    assert r.returncode == 0 and r.stdout.strip() == "{}", r.stderr[-2000:]


def test_a_cache_that_is_a_folder_is_ignored(cache, tmp_path):
    """validated.json as a folder was exit 70 (IsADirectoryError from fdopen, before the fstat that would have
    skipped it) for every deepspeed-config run."""
    from gputopo import files, validate
    (cache / "validated.json").mkdir()
    assert files.read_own(cache / "validated.json", 100) is None and validate._cache_key({"a": 1})[1] == {}
    out = tmp_path / "ds.json"
    r = run("deepspeed-config", "--stage", "2", "--gpus", "2", "-o", out)
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["zero_optimization"]["stage"] == 2 and (cache / "validated.json").is_dir()


# --- 3. command lines quote what they hold -------------------------------------------------------------------------

EVIL = "evil;$(touch x)'y"


def fleet_files(tmp_path) -> list:
    """Three reports, the third (named EVIL by its file) on another driver."""
    base = json.loads((FIXTURES / "fleet" / "node01.json").read_text())
    odd = dict(base, driver="1.0", versions=dict(base.get("versions") or {}, driver="1.0"))
    paths = []
    for name, report in (("a", base), ("b", base), (EVIL, odd)):
        (tmp_path / f"{name}.json").write_text(json.dumps(report))
        paths.append(tmp_path / f"{name}.json")
    return paths


def test_the_drain_line_quotes_the_node_name(tmp_path):
    """The node name came from a report file's name: the reason was quoted, the name was not. A name no Slurm node
    has (shell characters) gets no drain line at all; a host name's line is quoted whole."""
    reports = gather.from_files([str(p) for p in fleet_files(tmp_path)])
    f = fleet.compare(reports)
    assert not [line for line in f["recommendation"] if line.startswith("scontrol ")]
    assert any(line.startswith(f"no drain line for {EVIL}: not a name Slurm reads") for line in f["recommendation"])
    (tmp_path / f"{EVIL}.json").rename(tmp_path / "gpu-07.json")
    f = fleet.compare(gather.from_files([str(p) for p in sorted(tmp_path.glob("*.json"))]))
    drain = [line for line in f["recommendation"] if line.startswith("scontrol ")]
    assert shlex.split(drain[0]) == ["scontrol", "update", "nodename=gpu-07", "state=drain",
                                     "reason=gputopo: driver 1.0"]
    md = markdown.fleet(f)
    line = next(x for x in md.splitlines() if "scontrol" in x)
    assert line.startswith("- `") and line.endswith("`") and shlex.split(line[3:-1]) == shlex.split(drain[0])
    # a Slurm host list is quoted too: unquoted, a shell globs node[1-4] against the files where it runs
    assert fleet.drain_command(["node1", "node2"], "x").startswith("scontrol update nodename='node[1-2]' ")


BAD_MASTERS = [("a;id", "is not a host name"), ("-oProxyCommand=x", "starts with '-'"), ("{a}", "is not a host name"),
               ("*a", "is not a host name"), ("~", "is not a host name"), ("|x", "is not a host name"),
               ("[1]", "not an IPv6 address in its brackets"), ("[a;b]", "not an IPv6 address in its brackets"),
               ("[fe80::1%a;b]", "not an IPv6 address in its brackets"), ("a:29500", "the port goes in --master-port"),
               ("::1", "an IPv6 address goes in brackets, [::1]"), ("$MASTER_ADDR", "is not a host name")]


@pytest.mark.parametrize("launcher", ["deepspeed", "accelerate", "torchrun"])
@pytest.mark.parametrize("addr, said", BAD_MASTERS)
def test_master_addr_is_held_to_the_host_rule(tmp_path, launcher, addr, said):
    """Only whitespace and $ ` ' " were refused: `a;id` went into the hostfile and, through DeepSpeed's pdsh runner,
    unquoted into every node's remote shell; `{a}` into accelerate's YAML as a dict."""
    out = tmp_path / "ds.json"
    one_line(run("deepspeed-config", "--stage", "2", "--launcher", launcher, "--gpus", "2", "--nodes", "2", "-o", out,
                 "--master-addr", addr), 2, "Error: --master-addr ", said)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("launcher", ["deepspeed", "accelerate", "torchrun", "slurm"])
@pytest.mark.parametrize("script", ["--no-python", "--config_file=/etc/passwd", "-m"])
def test_a_script_that_reads_as_a_launcher_option_is_refused(tmp_path, launcher, script):
    """Quoted for the shell, `--script=--no-python` still reached torchrun as its own option, and
    `--config_file=/etc/passwd` accelerate's: a script named with a leading '-' is refused, naming ./ instead."""
    out = tmp_path / "ds.json"
    one_line(run("deepspeed-config", "--stage", "2", "--launcher", launcher, "--gpus", "2", "-o", out,
                 f"--script={script}"), 2, f"Error: --script {script}: starts with '-'", f"./{script}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("addr", ["yes", "null", "On", "node1", "10.1.2.3", "head.example", "[::1]", "[fe80::1%eth0]"])
def test_master_addr_reads_back_as_written(tmp_path, addr):
    """`yes` became True and `~` None in accelerate's YAML (PyYAML, as accelerate reads it): every value gputopo
    writes into YAML reads back as the string it is, the config's path too (a space, a colon, a #)."""
    import yaml
    folder = tmp_path / "a b: #c"
    folder.mkdir()
    out = folder / "ds.json"
    r = run("deepspeed-config", "--stage", "2", "--launcher", "accelerate", "--gpus", "2", "--nodes", "2", "-o", out,
            "--master-addr", addr)
    assert r.exit_code == 0, r.output
    cfg = yaml.safe_load((folder / "accelerate_config.yaml").read_text())
    assert cfg["main_process_ip"] == addr and cfg["deepspeed_config"]["deepspeed_config_file"] == str(out)
    r = run("deepspeed-config", "--stage", "2", "--launcher", "deepspeed", "--gpus", "2", "--nodes", "2", "-o", out,
            "--master-addr", addr, "--force")
    assert r.exit_code == 0 and (folder / "hostfile").read_text().splitlines()[0] == f"{addr} slots=2"


def test_yaml_text_reads_back_as_itself():
    import yaml

    from gputopo.launch import yaml_text
    for value in ("yes", "No", "~", "null", "{a}", "[1]", "*a", "&a", "!x", "|x", ">x", "%x", "@x", "`x", "-a", "? x",
                  "a: b", "a #b", "#a", "1", "1.5", "0x1f", "1_000", "1e3", ".inf", ".nan", "2001-12-14", "1:20",
                  "10.1.2.3", "/tmp/a b/ds.json", "ds_config.json", "a\nb", "\t", "é", 'a"b\\c', ""):
        assert yaml.safe_load(f"k: {yaml_text(value)}\n")["k"] == value, value
    assert yaml_text("ds_config.json") == "ds_config.json" and yaml_text("/x/ds.json") == "/x/ds.json"


def test_a_code_span_holds_a_backtick():
    from gputopo.markdown import _code
    assert _code("a`b") == "``a`b``" and _code("`x") == "`` `x ``"


def test_ssh_reads_the_host_after_double_dash():
    argv = gather.ssh_argv("-oProxyCommand=touch x", "true", 5)
    assert argv[argv.index("--") + 1] == "-oProxyCommand=touch x"
    assert gather.pdsh_argv(["node1"], "true", 5)[-3:-1] == ["--", "%h"]


# --- 4. --hosts ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("line, said", [
    ("-oProxyCommand=/tmp/pwn", "line 2: '-oProxyCommand=/tmp/pwn' starts with '-'"),
    ("a;b", "line 2: 'a;b' is not a host name"),
    ("node[1-4]", "line 2: 'node[1-4]' is not a host name"),
    ("a,b", "line 2: 'a,b' is not a host name"),
])
def test_a_host_that_is_not_a_host_name_is_refused(tmp_path, line, said):
    p = tmp_path / "hosts"
    p.write_text(f"node1\n{line} slots=8\n")
    one_line(run("inspect", "--fleet", "--hosts", p), 2, f"--hosts {p}: {said}")


def test_a_host_name_is_at_most_4096_characters(tmp_path):
    """A 5,000-character name was accepted; names, paths and addresses are at most 4,096 (docs/options.md, Limits)."""
    p = tmp_path / "hosts"
    p.write_text("node1\n" + "a" * (gather.MOST_HOST + 1) + "\n")
    one_line(run("inspect", "--fleet", "--hosts", p), 2,
             f"--hosts {p}: line 2: 'aaaaaaaaaaaaaaaaaaaa'... has 4097 characters: a host name has at most 4096")
    p.write_text("node1\n" + "a" * gather.MOST_HOST + "\n")
    assert gather.hostfile(str(p))[1] == "a" * 4096


def test_a_node_that_timed_out_says_so(monkeypatch):
    """`fe80::1%eth0: nothing`: pdsh's `host: line` was split at the address's first colon, so the node's own lines
    went to a host "fe80", and the node had neither lines nor an exit status."""
    host = "fe80::1%eth0"
    err = (f"{host}: ssh: connect to host {host} port 22: Connection timed out\n"
           f"pdsh@login: {host}: ssh exited with exit code 255\n")
    monkeypatch.setattr(gather, "run", lambda groups, deadline, *a: {"pdsh": (1, "", err, set())})
    reports, unreachable = gather.over_hosts([host, "node2"], "true", 30, pdsh=True)
    assert reports == {} and unreachable[host] == (f"no connection within {gather.STARTUP_S} s: ssh: connect to host"
                                                   f" {host} port 22: Connection timed out")
    assert unreachable["node2"] == "ended, with no report and no message"
    assert gather.split_lines(f"{host}: a: b\n{host}:\nnode1: x\n", gather.PDSH_LINE) == {host: ["a: b", ""],
                                                                                           "node1": ["x"]}
    assert gather.answer([], 3, "\x1b[31mboom\x1b[0m\n", 30) == (None, "exit status 3: boom")
    assert gather.answer([], 124, "", 30) == (None, "no answer within 30 s")


def test_hosts_are_capped_and_deduplicated_in_linear_time(tmp_path):
    """30k hosts took 17.6 s to de-duplicate (list.count per host)."""
    p = tmp_path / "hosts"
    p.write_text("".join(f"n{i}\n" for i in range(gather.MOST_NODES)) + "n7\n")
    with pytest.raises(Exception, match="n7 listed twice"):
        gather.hostfile(str(p))
    p.write_text("".join(f"n{i}\n" for i in range(30_000)))
    one_line(run("inspect", "--fleet", "--hosts", p), 2, f"more than {gather.MOST_NODES} hosts")


def test_two_million_host_lines_are_refused_within_bounds(tmp_path):
    """2M lines were killed at 60 s before any ssh; no ssh on PATH here: the refusal comes first."""
    p = tmp_path / "hosts"
    with open(p, "w") as f:
        f.writelines(f"node{i:07d} slots=8\n" for i in range(2_000_000))
    r = bounded([sys.executable, "-m", "gputopo", "inspect", "--fleet", "--hosts", str(p)],
                env={"PATH": str(tmp_path)})
    most = gather.MOST_NODES
    assert r.returncode == 2 and r.stderr.strip() == (f"Error: --hosts {p}: more than {most} hosts; --fleet asks at"
                                                      f" most {most} nodes: split the list")


def test_a_slurm_list_is_not_an_option():
    one_line(run("inspect", "--fleet", "--slurm-nodes=-h"), 2, "--slurm-nodes -h: starts with '-'")


# --- 5. fleet reports ----------------------------------------------------------------------------------------------

def report_with(tmp_path, name, **gpu0) -> str:
    r = json.loads((FIXTURES / "fleet" / "node01.json").read_text())
    r["gpus"][0].update(gpu0)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(r).replace('"INF"', "1e400"))
    return str(path)


@pytest.mark.parametrize("field, value, said", [
    ("temperature_c", "INF", "temperature_c is inf, not within -40..150 °C"),
    ("temperature_c", 1e300, "temperature_c is 1e+300, not within -40..150 °C"),
    ("temperature_c", -300, "temperature_c is -300, not within -40..150 °C"),
    ("memory_total_bytes", -1, "memory_total_bytes is -1, not within 0..1 PiB"),
    ("memory_used_bytes", 10**30, "memory_used_bytes is 10000000000000000000..., not within 0..1 PiB"),
    ("pcie_width", -16, "pcie_width is -16, not within x1..x32"),
    ("pcie_width_max", 64, "pcie_width_max is 64, not within x1..x32"),
    ("power_draw_w", -5.0, "power_draw_w is -5.0, not within 0..10000 W"),
    ("power_limit_w", "700", "power_limit_w is a text, not a number"),
    ("throttle_reasons", 3, "throttle_reasons is a whole number, not a list"),
])
def test_impossible_values_are_refused_naming_file_and_field(tmp_path, field, value, said):
    ok = report_with(tmp_path, "ok")
    bad = report_with(tmp_path, "bad", **{field: value})
    one_line(run("inspect", "--fleet", "-f", ok, "-f", bad), 2, f"--from-file {bad}: ", f"gpus[0].{said}")


def test_a_report_nested_100000_deep_is_one_line(tmp_path):
    """It gave RecursionError (exit 70)."""
    deep = tmp_path / "deep.json"
    deep.write_text('{"schema_version": 1, "gpus": ' + "[" * 100_000 + "]" * 100_000 + "}")
    one_line(run("inspect", "--fleet", "-f", report_with(tmp_path, "ok"), "-f", deep), 2,
             f"--from-file {deep}: JSON nested more than about {gather.MOST_DEPTH} levels deep")
    assert gather.answer(['{"a": ' + "[" * 100_000], 0, "", 30)[0] is None   # a node's answer too


def test_a_report_past_its_size_is_one_line(tmp_path):
    big = tmp_path / "big.json"
    big.write_text('{"pad": "' + "x" * gather.MOST_REPORT + '"}')
    one_line(run("inspect", "--fleet", "-f", report_with(tmp_path, "ok"), "-f", big), 2,
             f"--from-file {big}: larger than {gather.MOST_REPORT // 2**20} MiB")


def test_a_hot_node_at_its_power_cap_stands_out(tmp_path):
    """Health came from the reports' own findings alone: a GPU at 95 °C and at its power cap, in a report whose
    findings say nothing, gave "all 3 node(s) alike"."""
    files = [report_with(tmp_path, n) for n in ("a", "b")]
    files.append(report_with(tmp_path, "hot", temperature_c=95, power_draw_w=700.0, power_limit_w=700.0))
    r = run("inspect", "--fleet", *[x for f in files for x in ("-f", f)], "--json")
    f = json.loads(r.stdout)["fleet"]
    assert [(h["node"], h["level"], h["code"]) for h in f["health"]] == [
        ("hot", "error", "temperature_throttling"), ("hot", "warn", "power_cap")]
    assert f["slows"] and r.exit_code == 1
    assert "but hot has health problems" in f["recommendation"][0]
    # a report whose findings already say so is not said twice
    r2 = run("inspect", "--fleet", "-f", files[0], "-f", files[2], "--json")
    assert len(json.loads(r2.stdout)["fleet"]["health"]) == 2


def test_control_characters_are_shown_escaped_and_the_drain_line_names_the_node_shown(tmp_path):
    """A newline in a report's driver or a file's name split table rows and drain lines in two (the quoting held);
    an ESC sequence in a file name was dropped by click when piped, so the drain line named "escred" while the file
    was esc<ESC>[31mred. Every control character is shown as Python writes it, the same string everywhere; no such
    name gets a drain line."""
    base = json.loads((FIXTURES / "fleet" / "node01.json").read_text())
    odd = dict(base, driver="5\n50;$(id)", versions=dict(base["versions"], driver="5\n50;$(id)"))
    paths = []
    for name, report in (("a", base), ("b", base), ("bad\nnode", odd), ("esc\x1b[31mred", odd), ("rlo\u202egpj", odd),
                         ("c", base), ("d", base)):
        (tmp_path / f"{name}.json").write_text(json.dumps(report))
        paths.append(tmp_path / f"{name}.json")
    shown = ["bad\\nnode", "esc\\x1b[31mred", "rlo\\u202egpj"]
    args = ["inspect", "--fleet", *[x for p in paths for x in ("-f", p)]]
    for output in ("text", "markdown", "json"):
        r = run(*args, *({"text": [], "markdown": ["--markdown"], "json": ["--json"]}[output]))
        assert r.exit_code == 1, r.output
        assert all(c in "\n" or c.isprintable() for c in r.output), repr(r.output)
        lines = r.output.splitlines() if output != "json" else json.loads(r.stdout)["fleet"]["recommendation"]
        # no Slurm node has such a name: no drain line (scontrol would expand some), but the nodes named, escaped
        said = next(x for x in lines if "no drain line for" in x)
        assert all(n in said for n in shown) and "scontrol update" not in r.output, said
        if output != "json":
            row = next(x for x in lines if shown[0] in x and "550.54.15" not in x)
            assert ", ".join(shown) in row and "5\\n50;$(id)" in row, row
    data = json.loads(run(*args, "--json").stdout)["fleet"]
    assert data["nodes"] == ["a", "b", *shown, "c", "d"]
    assert fleet.shown("a\tb\x00\u2028") == "a\\tb\\x00\\u2028" and fleet.shown("node-01.é") == "node-01.é"


def test_a_drain_line_never_names_more_nodes_than_the_odd_one(tmp_path):
    """Node names come from file names, and scontrol expands a host list: `ALL.json` drained every node of the
    cluster, `a,b.json` two, `gpu[1-999].json` 999. Such a name gets no drain line, and says why."""
    norm, odd = (FIXTURES / "fleet" / "node01.json").read_text(), (FIXTURES / "fleet" / "node04.json").read_text()
    files = []
    for name, text in [(f"n{i}", norm) for i in range(1, 6)] + [("ALL", odd), ("a,b", odd), ("gpu[1-999]", odd),
                                                                  ("n9", odd)]:
        (tmp_path / f"{name}.json").write_text(text)
        files += ["-f", tmp_path / f"{name}.json"]
    r = run("inspect", "--fleet", *files)
    drains = [line.strip() for line in r.stdout.splitlines() if "scontrol update" in line]
    assert r.exit_code == 1 and drains == ["scontrol update nodename=n9 state=drain reason='gputopo: driver"
                                           " 535.129.03; cuda 12.2 and 1 more'"], r.stdout
    assert "no drain line for ALL, a,b, gpu[1-999]: not a name Slurm reads as one node" in r.stdout


def test_two_files_that_show_as_one_node_are_refused(tmp_path):
    base = (FIXTURES / "fleet" / "node01.json").read_text()
    (tmp_path / "a\nb.json").write_text(base)
    (tmp_path / "a\\nb.json").write_text(base)
    one_line(run("inspect", "--fleet", "-f", tmp_path / "a\nb.json", "-f", tmp_path / "a\\nb.json"), 2,
             "two files name node 'a\\\\nb'")


def test_a_refusal_naming_a_path_with_a_newline_stays_one_line(tmp_path):
    """A file or folder name is the user's: one holding a newline or ESC split the `Error:` line in two (or drove
    the terminal); every refusal, gputopo's and click's, writes it escaped."""
    odd = tmp_path / "a\nb\x1b[31m"
    one_line(run("inspect", "-f", odd / "topo.txt"), 2, "a\\nb\\x1b[31m/topo.txt: no such file")
    one_line(run("plan", "--model", "gpt2", "--gpus", "2", "--gpu-model", "H100", "--link", "NV\n4"), 2, "NV\\n4")


# --- 6. stdout that cannot be written ------------------------------------------------------------------------------

PLAN = [sys.executable, "-m", "gputopo", "plan", "--model", "gpt2", "--gpus", "2", "--gpu-model", "A100-80GB"]


def assert_one_stdout_line(err: str, why: str):
    assert err.count("\n") == 1 and err.startswith(f"Error: stdout{why}"), err
    assert "Traceback" not in err and "Exception ignored" not in err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [PLAN, [*PLAN[:3], "deepspeed-config", "--stage", "2", "-o", "-"],
                                  [*PLAN[:3], "--help"]])
@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_a_full_stdout_is_exit_1_and_one_line(argv, unbuffered):
    with open("/dev/full", "w") as full:
        r = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60,
                           env={**os.environ, "PYTHONUNBUFFERED": unbuffered})
    assert r.returncode == 1, r.stderr
    assert_one_stdout_line(r.stderr, ": not written (No space left on device)")


def test_an_unbuffered_stdout_that_takes_part_of_a_write_is_not_cut_silently(monkeypatch):
    """PYTHONUNBUFFERED=1 (Docker images set it): stdout's text layer wrote straight to the file, and a short write
    on a disk filling up (128 KiB tmpfs: 131,072 of 840,881 bytes) dropped the rest with exit 0. guard_stdout
    gives it back the buffered writer Python has by default, which writes the rest or raises."""
    import io

    from gputopo import files
    from gputopo.errors import WriteFailed

    class Filling(io.RawIOBase):   # takes 5 bytes of each write, then the disk is full
        def __init__(self):
            self.data, self.room = b"", 12

        def writable(self):
            return True

        def write(self, b):
            if not self.room:
                raise OSError(28, "No space left on device")
            took = bytes(b[:min(5, self.room)])
            self.data, self.room = self.data + took, self.room - len(took)
            return len(took)

    raw = Filling()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="utf-8", write_through=True))
    files.guard_stdout()
    guarded = sys.stdout
    monkeypatch.setattr(sys, "stdout", sys.__stdout__)   # pytest's own output from here on
    guarded.write("0123456789")
    guarded.flush()
    assert raw.data == b"0123456789"                      # the short writes were retried, not dropped
    with pytest.raises(WriteFailed, match="No space left on device"):
        guarded.write("more than the disk holds")
        guarded.flush()


def test_a_closed_stdout_is_exit_1_and_one_line():
    r = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", *PLAN], stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 1
    assert_one_stdout_line(r.stderr, " is closed: nothing written")


def test_a_broken_pipe_is_exit_1_and_one_line():
    p = subprocess.Popen([sys.executable, "-m", "gputopo", "inspect", "--example", "dgx-a100", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.close()   # before it writes: the reader (`| head -1`) is gone
    err = p.stderr.read()
    assert p.wait(timeout=60) == 1
    assert_one_stdout_line(err, ": not written (Broken pipe)")
