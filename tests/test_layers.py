"""The import graph: packages point one way down the data flow, and no module circles back.

Every import counts, module-level or inside a function: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import simreal

ROOT = Path(simreal.__file__).resolve().parent.parent
FOLDERS = {"simreal": "simreal", "core": "core", "robots": "robots", "deploy": "deploy",
           "sim": "sim", "train": "train", "hil": "hil", "calibration": "calibration"}

# What each package may import (besides itself). Down the data flow only:
# core <- robots <- deploy <- sim <- train; deploy, sim <- hil <- calibration; the API/CLI on
# top. core is shared math and configuration, below everything.
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "robots": {"core"},
    "deploy": {"core", "robots"},
    "sim": {"core", "robots", "deploy"},
    "train": {"core", "robots", "deploy", "sim"},
    "hil": {"core", "robots", "deploy", "sim"},
    "calibration": {"core", "robots", "deploy", "sim", "hil"},
    "simreal": {"core", "robots", "deploy", "sim", "train", "hil", "calibration"},
}


def module_name(path: Path) -> str:
    folder = path.relative_to(ROOT).parts[0]
    rel = path.relative_to(ROOT / folder).with_suffix("")
    parts = [] if folder == "simreal" else [folder]
    parts += [p for p in rel.parts if p != "__init__"]
    return ".".join(["simreal", *parts])


def modules() -> dict[str, Path]:
    return {module_name(p): p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The simreal modules a file imports (a `from pkg import mod` names the module)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import mod` depends on the module; `from mod import name` on mod
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known
                     else node.module for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name.startswith("simreal"):
                out.add(name)
    return out


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in FOLDERS else "simreal"


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    # importing simreal.x.y runs simreal/__init__ and simreal.x's __init__ too: only the
    # named module counts as the dependency here, its parents' own imports are theirs
    return {m: imports_of(p, known) - {m} for m, p in mods.items()}


def test_packages_import_only_down_the_data_flow():
    bad = []
    for mod, deps in graph().items():
        pkg = package_of(mod)
        for dep in deps:
            dpkg = package_of(dep)
            if dpkg != pkg and dpkg not in ALLOWED[pkg]:
                bad.append(f"{mod} imports {dep}")
    assert not bad, "upward imports:\n" + "\n".join(sorted(bad))


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with two or more modules: import circles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    assert not circles(graph()), f"import circles: {circles(graph())}"


def test_the_graph_sees_imports():
    # the checks above pass vacuously if the parser finds nothing: it must see known edges
    g = graph()
    assert "simreal.deploy.contract" in g["simreal.deploy.runner"] or any(
        d.startswith("simreal.deploy.") for d in g["simreal.deploy.runner"])
    assert "simreal.robots.registry" in g["simreal.sim.registry"]
    assert package_of("simreal.sim.tasks.go2_locomotion") == "sim"
    assert package_of("simreal.cli") == "simreal"


def test_the_circle_finder_finds_circles():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(g) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
