"""The layers of the code base, kept one-way.

Every import in the project's packages — at module level, inside functions, under
``TYPE_CHECKING`` — is read from the source (ast, nothing imported) and checked against
:data:`LAYERS`, listed from the top down. A module belongs to the component whose prefix
names it most closely (``harness.run`` holds ``harness.run`` and ``harness.run.*``). An
import may go down to a lower layer, or stay inside its own component; the test fails on

- an edge **up** (to a higher layer) or **sideways** (to another component of the same layer),
- a **circle** of modules importing each other, named module by module,
- a **private name** (``_name``) imported from, or read off, another module,
- a module that no component claims (add it to :data:`LAYERS`).

Run it alone to see the layers: ``python tests/test_layers.py``.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "backends", "workloads", "core", "refserver")

# From the top down. Each layer is a list of components; each component a tuple of module
# prefixes ("=name": that module alone, not its submodules). Components of one layer must not
# import each other.
LAYERS: list[list[tuple[str, ...]]] = [
    # entry points: python -m harness, and the thin modules behind the other commands
    [
        ("=harness", "harness.__main__", "harness.cli", "harness.preflight", "=harness.held"),
        ("=harness.compare",),
        ("=harness.report",),
        ("=harness.agree",),
        ("=harness.reference_server",),
        ("=harness.ab",),
    ],
    [("harness.run",)],  # an engine session × a load point → a run folder; sweeps, SLO search, agree
    [("harness.history",)],  # the history of runs: Parquet files, DuckDB, change points, trend, check
    [("harness.reports",)],  # pages and text rendered from run folders: report, compare
    [("harness.gate",)],  # the gate's statistics: intervals from runs, verdicts, noise floor
    [("harness.client",)],  # the measuring client: driver, worker processes, pacing
    [("harness.results",)],  # records, metric definitions, the run folder's schema and store
    [("harness.telemetry",)],  # memory, GPUs, processes, Prometheus, the environment
    [("harness.config",)],  # the run's configuration dataclasses
    [("=backends", "backends.factory")],  # the engine for a config
    [("backends.engines",)],  # one module per engine, each registers itself
    [("backends.server",)],  # an engine's own server: presets, process, watchdog, container
    [("backends.http",)],  # the streaming HTTP client of OpenAI-compatible servers
    [("backends.threaded",)],  # engines driven from one thread
    [("backends.base", "backends.preset", "backends.registry")],  # the Backend interface
    [("workloads",)],  # workloads and arrival processes
    [("refserver",)],  # the reference server: the standard library, and core's tokenizer loader
    [("core",)],  # shared types
]


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
                if _known(base, files) is None:
                    continue
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in files:  # a submodule
                        found.append(Edge(source, full, node.lineno))
                        aliases[alias.asname or alias.name] = full
                    else:
                        target = _known(base, files)
                        assert target is not None
                        found.append(Edge(source, target, node.lineno, (alias.name,)))
                        if _is_private(alias.name) and target != source:
                            private.append(f"{source}:{node.lineno} imports {alias.name} from {target}")
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


def component_of(module: str) -> Optional[tuple[int, tuple[str, ...]]]:
    """(layer index from the top, component) of the most specific prefix that names ``module``."""
    best: Optional[tuple[int, tuple[str, ...]]] = None
    best_len = -1
    for index, layer in enumerate(LAYERS):
        for component in layer:
            for prefix in component:
                exact = prefix.startswith("=")
                prefix = prefix.lstrip("=")
                if (module == prefix or (not exact and module.startswith(prefix + "."))) and len(prefix) > best_len:
                    best, best_len = (index, component), len(prefix)
    return best


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


def _name(component: tuple[str, ...]) -> str:
    return "/".join(p.lstrip("=") for p in component)


def problems() -> list[str]:
    files = module_files()
    found, private = edges(files)
    out: list[str] = []
    for module in files:
        if component_of(module) is None:
            out.append(f"unplaced: no layer holds {module}; add it to LAYERS in tests/test_layers.py")
    for cycle in circles(found):
        out.append("circle: " + " → ".join(cycle))
    seen = set()
    for e in sorted(found, key=lambda e: (e.source, e.line)):
        src, dst = component_of(e.source), component_of(e.target)
        if src is None or dst is None or src[1] == dst[1] or (e.source, e.line, e.target) in seen:
            continue
        seen.add((e.source, e.line, e.target))
        if dst[0] < src[0]:
            out.append(f"up: {e.source}:{e.line} imports {e.target} ({_name(dst[1])} is above {_name(src[1])})")
        elif dst[0] == src[0]:
            out.append(f"sideways: {e.source}:{e.line} imports {e.target} ({_name(dst[1])} beside {_name(src[1])})")
    out += [f"private: {p}" for p in private]
    return out


def test_imports_go_down_only() -> None:
    found = problems()
    assert not found, f"{len(found)} import problems:\n" + "\n".join(found)


def test_every_layer_holds_modules() -> None:
    """A layer that names no module is a stale entry."""
    files = module_files()
    claimed = {component_of(m)[1] for m in files if component_of(m) is not None}  # type: ignore[index]
    stale = [c for layer in LAYERS for c in layer if c not in claimed]
    assert not stale, f"components with no module: {stale}"


def test_checker_finds_a_circle_an_upward_edge_and_a_private_name() -> None:
    """The checker itself: a made-up graph with one of each problem."""
    found = [Edge("core.a", "core.b", 1), Edge("core.b", "core.a", 2)]
    assert circles(found) == [["core.a", "core.b", "core.a"]]
    assert component_of("harness.run.point")[0] < component_of("harness.client.driver")[0]  # type: ignore[index]
    assert _is_private("_x") and not _is_private("__all__")


if __name__ == "__main__":
    for layer in LAYERS:
        print("  ".join(_name(c) for c in layer))
    found = problems()
    print("\n".join(found) or "no problems")
    sys.exit(1 if found else 0)
