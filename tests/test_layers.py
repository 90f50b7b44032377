"""The layers of the code base: what import-linter cannot check.

The layers themselves are import-linter contracts in pyproject.toml (``[tool.importlinter]``),
checked by ``lint-imports`` (scripts/lint.sh): each layer imports only the layers below it,
siblings of a layer (``a | b``) do not import each other, the thin entry modules use none of
the CLI's, the backends package imports nothing of harness, private modules stay in their
package and sibling packages form no cycle. grimp, which import-linter reads the imports
with, counts every import: at module level, inside functions and under ``TYPE_CHECKING``, and
the chains of imports through other modules too.

What it cannot check, this test does, from the source (ast, nothing imported):

- a module that no layer holds (add it to the layers in pyproject.toml): import-linter checks
  only the modules its layers name, and would let a new top-level module import anything;
- a **circle** of modules importing each other, named module by module: import-linter's
  ``acyclic_siblings`` compares siblings, so a package's own module (``__init__``) importing a
  module of the package that imports the package back is no cycle to it;
- a **private name** (``_name``) imported from, or read off, another module: import-linter
  knows modules, not the names in them.

Run it alone to see the layers: ``python tests/test_layers.py``.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest brings tomli where Python has no tomllib
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "backends", "workloads", "core", "refserver")
# modules no layer holds, and why that is safe: a package's own module (__init__) cannot be a
# layer of its own in import-linter (a layer holds everything under it)
UNLAYERED = {
    "harness": "the top: it may import any module",
    "backends": "its imports are checked by the contract backends-below-harness",
}


def layers() -> list[list[str]]:
    """The layers of the layers contract in pyproject.toml, top down: each a list of modules."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["type"] == "layers"]
    return [[m.strip() for m in re.split(r"[|:]", layer)] for layer in contract["layers"]]


@dataclass(frozen=True)
class Edge:
    source: str  # importing module
    target: str  # imported module
    line: int
    names: tuple[str, ...] = ()  # names taken with ``from target import …``


def module_files() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _resolve(source: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = source.split(".") if is_package else source.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _known(name: str, modules: Iterable[str]) -> Optional[str]:
    """The project module ``name`` refers to (itself, or the module it is an attribute of)."""
    modules = set(modules)
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def edges(files: dict[str, Path]) -> tuple[list[Edge], list[str]]:
    """Every import between project modules, and every private name used across modules."""
    found: list[Edge] = []
    private: list[str] = []
    for source, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        aliases: dict[str, str] = {}  # local name → project module
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = _known(alias.name, files)
                    if target:
                        found.append(Edge(source, target, node.lineno))
                        if alias.asname:
                            aliases[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(source, is_package, node)
                module = _known(base, files)
                if module is None:
                    continue
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in files:  # a submodule
                        found.append(Edge(source, full, node.lineno))
                        aliases[alias.asname or alias.name] = full
                    else:
                        found.append(Edge(source, module, node.lineno, (alias.name,)))
                        if _is_private(alias.name) and module != source:
                            private.append(f"{source}:{node.lineno} imports {alias.name} from {module}")
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and _is_private(node.attr)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and aliases[node.value.id] != source
            ):
                private.append(f"{source}:{node.lineno} uses {node.value.id}.{node.attr} of {aliases[node.value.id]}")
    return found, private


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def layer_of(module: str, stack: list[list[str]]) -> Optional[int]:
    """The index from the top of the layer that holds ``module`` (the module, or a package above it)."""
    for index, layer in enumerate(stack):
        if any(module == m or module.startswith(m + ".") for m in layer):
            return index
    return None


def circles(found: list[Edge]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each as one cycle's path."""
    graph: dict[str, set[str]] = defaultdict(set)
    for e in found:
        if e.source != e.target:
            graph[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_path(g, graph) for g in groups]


def _cycle_path(group: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One cycle through the group's first module, for the message: a → b → … → a."""
    members = set(group)
    start = group[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return group


def problems() -> list[str]:
    files = module_files()
    stack = layers()
    found, private = edges(files)
    out: list[str] = []
    for module in files:
        if layer_of(module, stack) is None and module not in UNLAYERED:
            out.append(f"unplaced: no layer holds {module}; add it to the layers in pyproject.toml")
    for cycle in circles(found):
        out.append("circle: " + " → ".join(cycle))
    out += [f"private: {p}" for p in private]
    return out


def test_every_module_is_placed_no_circle_and_no_private_name_crosses() -> None:
    found = problems()
    assert not found, f"{len(found)} import problems:\n" + "\n".join(found)


def test_the_unlayered_modules_are_packages_of_the_project() -> None:
    """An exemption from the layers for a module that is gone is a stale entry."""
    assert set(UNLAYERED) <= set(module_files())


def test_checker_finds_a_circle_and_a_private_name() -> None:
    """The checker itself: a made-up graph with a circle, and the layers' reading."""
    found = [Edge("core.a", "core.b", 1), Edge("core.b", "core.a", 2)]
    assert circles(found) == [["core.a", "core.b", "core.a"]]
    stack = layers()
    point, driver = layer_of("harness.run.point", stack), layer_of("harness.client.driver", stack)
    assert point is not None and driver is not None and point < driver
    assert layer_of("harness.compare", stack) == layer_of("harness.ab", stack) == 0
    assert _is_private("_x") and not _is_private("__all__")


if __name__ == "__main__":
    for layer in layers():
        print("  ".join(layer))
    found = problems()
    print("\n".join(found) or "no problems")
    sys.exit(1 if found else 0)
