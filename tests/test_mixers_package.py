"""The layout of `attnzoo.mixers`: one module per family, none too long, and no import cycle
through the package."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from attnzoo.mixers import MIXERS, class_path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "attnzoo"
PACKAGE = LIBRARY / "mixers"


def _module_name(path: Path) -> str:
    """The import name of a file of the library (kernels/ installs as attnzoo.kernels)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    parts = ("attnzoo", *parts) if parts[0] == "kernels" else parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def import_graph() -> dict[str, set[str]]:
    """module -> the attnzoo modules it imports, at the top or inside a function (a deferred
    import still closes a cycle). Importing `a.b.c` also runs `a.b`'s `__init__`, which counts
    as an import of `a.b` unless the importer is inside `a.b` already (its `__init__` has run)."""
    files = [*LIBRARY.rglob("*.py"), *(ROOT / "kernels").rglob("*.py")]
    paths = {_module_name(p): p for p in files}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        here = _package_of(module, path)
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.add(sub if sub in paths else base)
        edges: set[str] = set()
        for target in (t for t in targets if t in paths):
            edges.add(target)
            parts = target.split(".")
            for i in range(2, len(parts)):
                parent = ".".join(parts[:i])
                if parent in paths and not (here + ".").startswith(parent + "."):
                    edges.add(parent)
        graph[module] = edges - {module}
    return graph


def cycles_through(graph: dict[str, set[str]], modules: set[str]) -> list[list[str]]:
    """The strongly connected components of more than one module that hold one of `modules`."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 and modules & set(component):
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_runs_through_the_mixers_or_flops():
    graph = import_graph()
    ours = {m for m in graph if m.startswith("attnzoo.mixers")} | {"attnzoo.flops"}
    assert {"attnzoo.mixers", "attnzoo.mixers.registry", "attnzoo.mixers.softmax"} <= ours
    assert "attnzoo.mixers" in graph["attnzoo.flops"]  # the graph sees a package's __init__ run
    assert cycles_through(graph, ours) == []
    # the family modules import the registry and the bases, never the package's __init__
    for module in ours - {"attnzoo.mixers", "attnzoo.flops"}:
        assert "attnzoo.mixers" not in graph[module], module


def test_the_cycle_check_finds_a_deferred_import():
    graph = {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert cycles_through(graph, {"a"}) == [["a", "b"]]
    assert cycles_through(graph, {"c"}) == []


def test_each_mixer_lives_in_a_family_module_and_its_yaml_names_it_there():
    """A mixer is found by its family's module (attnzoo/mixers/<family>.py), and the YAML of
    the same name names its class; every YAML of conf/mixer/ is a registered mixer."""
    yamls = {p.stem for p in (ROOT / "conf" / "mixer").glob("*.yaml")}
    assert set(MIXERS) == yamls
    shared = {"attnzoo.mixers", "attnzoo.mixers.registry", "attnzoo.mixers.base"}
    for name, cls in MIXERS.items():
        assert cls.__module__.startswith("attnzoo.mixers.") and cls.__module__ not in shared
        node = yaml.safe_load((ROOT / "conf" / "mixer" / f"{name}.yaml").read_text())
        assert node["_target_"] == class_path(cls), name


def test_the_package_exports_every_public_name_its_modules_define():
    """`from attnzoo.mixers import X` for every public class, function and constant a module of
    the package defines (read off its source), as the same object as in its module."""
    import attnzoo.mixers as package

    checked = set()
    for path in sorted(PACKAGE.glob("*.py")):
        if path.name == "__init__.py":
            continue
        module = importlib.import_module(f"attnzoo.mixers.{path.stem}")
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            else:
                continue
            for name in (n for n in names if not n.startswith("_")):
                assert getattr(package, name, None) is getattr(module, name), f"{path.stem}.{name}"
                checked.add(name)
    assert {"MIXERS", "build_mixer", "ScaledDotAttention", "FEATURE_MAPS"} <= checked
    assert set(package.__all__) == checked


@pytest.mark.slow  # a second interpreter: the import-graph test above covers cycles quickly
def test_the_package_imports_in_a_fresh_interpreter():
    """Every module of the package in a fresh interpreter. (Each import of
    an attnzoo module runs `attnzoo/__init__.py` first, so one interpreter per module would
    test the same order; the graph test above covers the orders in between.)"""
    modules = sorted(_module_name(p) for p in PACKAGE.glob("*.py"))
    code = (
        "import importlib, warnings\n"
        "warnings.simplefilter('error')\n"
        f"for m in {['attnzoo.flops', *modules]!r}: importlib.import_module(m)\n"
        "from attnzoo.mixers import MIXERS, register\n"
        f"assert len(MIXERS) == {len(MIXERS)}, list(MIXERS)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
