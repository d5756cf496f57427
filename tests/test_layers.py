"""The package's layers (issue 18): data flows one way, probe -> topology -> plan/advise -> report -> render ->
commands, and nothing imports a module of a higher layer, even inside a function (a lazy import is still a
dependency). Same-layer imports are allowed but may not form a cycle. As nvitop holds its api/tui boundary with
a lint rule, this test holds ours: a new module must be placed in LAYERS."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "gputopo"
LAYERS = [
    # foundation: no knowledge of GPUs
    {"__init__", "errors", "units", "files", "children", "jsonread", "examples.__init__"},
    # facts and catalogs: the data models, pure
    {"gpus", "datasheets", "topology", "models", "memory", "system", "finetune", "ops"},
    # reading the machine and the inputs
    {"parse", "probe", "sources", "health", "nvme", "validate", "dsops", "launch", "worker", "nccllog", "build"},
    # what fits, how fast, what to use
    {"plan", "speed", "calibrate", "advise", "request", "search", "dsconfig", "measure", "doctor", "bench", "fleet"},
    # one answer per command
    {"report", "configure", "gather"},
    # output
    {"render", "graph", "mermaid", "markdown", "plot"},
    # the command line
    {"options", "commands.__init__", "commands.common", "commands.inspect", "commands.plan",
     "commands.deepspeed_config", "commands.doctor", "commands.bench_nvlink"},
    {"cli", "__main__"},
]
LAYER = {m: i for i, group in enumerate(LAYERS) for m in group}


def modules() -> dict:
    """module name -> the gputopo modules it imports anywhere in its body."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        name, pkg = ".".join(rel.parts), list(rel.parts[:-1])
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = pkg[: len(pkg) - node.level + 1]
                targets = [node.module] if node.module else [a.name for a in node.names]
                deps |= {".".join(base + t.split(".")) for t in targets}
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                deps |= {n[len("gputopo."):] for n in names if n and n.startswith("gputopo.")}
        deps = {"__init__" if d == "__version__" else d for d in deps}
        out[name] = {d for d in deps
                     if d != name and (d in LAYER or (PACKAGE / (d.replace(".", "/") + ".py")).exists())}
    return out


def test_every_module_has_a_layer():
    assert sorted(set(modules()) - set(LAYER)) == []


def test_nothing_imports_upward():
    upward = [f"{m} (layer {LAYER[m]}) imports {d} (layer {LAYER[d]})"
              for m, deps in modules().items() for d in sorted(deps) if LAYER[d] > LAYER[m]]
    assert upward == []


def test_no_import_cycle():
    graph = modules()
    seen, stack, cycles = set(), [], []

    def visit(m):
        if m in stack:
            cycles.append(stack[stack.index(m):] + [m])
            return
        if m in seen:
            return
        seen.add(m)
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            visit(d)
        stack.pop()
    for m in sorted(graph):
        visit(m)
    assert cycles == []


def test_only_the_command_line_imports_click():
    users = sorted(m for m, path in ((p.relative_to(PACKAGE).with_suffix(""), p) for p in PACKAGE.rglob("*.py"))
                   if any(isinstance(n, (ast.Import, ast.ImportFrom)) and "click" in
                          ([n.module] if isinstance(n, ast.ImportFrom) else [a.name for a in n.names])
                          for n in ast.walk(ast.parse(path.read_text()))))
    assert all(LAYER[".".join(m.parts)] >= LAYER["options"] for m in users), users


def test_functions_a_reader_can_hold():
    """Issue 18: no function in the package over 80 lines, no command function over 60 (a command reads options,
    calls one domain function and renders)."""
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        most = 60 if path.parent.name == "commands" else 80
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > most:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} {n} lines")
    assert long == []


def test_cli_only_assembles_the_group():
    assert len((PACKAGE / "cli.py").read_text().splitlines()) < 150
