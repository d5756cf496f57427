"""Functions a reader can hold: the drawing and report modules keep functions short and documented, and
the drawing model sits below what draws it (graph.py imports no renderer, no matplotlib, no CLI)."""
import ast
from pathlib import Path

import pytest

import gputopo

SRC = Path(gputopo.__file__).parent
MODULES = ["graph", "mermaid", "markdown", "plot", "render", "report", "nccllog"]
MOST_LINES = 80


@pytest.mark.parametrize("module", MODULES)
def test_functions_short_with_docstrings(module):
    tree = ast.parse((SRC / f"{module}.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            assert lines <= MOST_LINES, f"{module}.{node.name}: {lines} lines"
            assert ast.get_docstring(node), f"{module}.{node.name}: no docstring"


@pytest.mark.parametrize("module,allowed", [("graph", {"topology"}), ("mermaid", {"graph"})])
def test_drawing_model_imports_only_below_it(module, allowed):
    tree = ast.parse((SRC / f"{module}.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1}
    assert imported <= allowed, imported
    assert not any(isinstance(n, ast.Import) and n.names[0].name.split(".")[0] not in {"re", "dataclasses"}
                   for n in ast.walk(tree))
