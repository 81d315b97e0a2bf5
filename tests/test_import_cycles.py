"""No import cycle between the project's modules.

Every module under the sub-projects' `src/` folders is parsed with `ast` (nothing is imported) and
each import of a `rambo.*` module becomes an edge of a graph: imports at module level and inside
functions alike, relative imports resolved against the importing module's package, and
`from rambo.x import y` counted as importing `rambo.x.y` when `y` is a submodule (else `rambo.x`).
A package's `__init__` importing its own submodules is an edge too. The test fails naming each
cycle, as `a -> b -> a`.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("core", "harness", "retrieval", "detection", "ablations", "figures")

# Cycles known and accepted, each as the set of its modules. Empty: a new cycle fails the test.
KNOWN_CYCLES: list[frozenset[str]] = []


def module_files() -> dict[str, Path]:
    """`rambo.*` module name -> its file, for every `.py` file under the sub-projects' `src/`."""
    modules = {}
    for project in SOURCES:
        src = REPO / project / "src"
        for path in sorted(src.rglob("*.py")):
            parts = path.relative_to(src).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def known_prefix(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of the dotted `name` that is one of `modules`, or None."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that module `name` (file `path`) imports, anywhere in its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets.update(known_prefix(alias.name, modules) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                targets.add(submodule if submodule in modules else known_prefix(source, modules))
    targets.discard(None)
    targets.discard(name)
    return targets


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    modules = module_files()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def one_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, within the component: `[a, b, ..., a]`."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for successor in sorted(graph[node] & members):
            if successor == start:
                return paths[node] + [start]
            if successor not in paths:
                paths[successor] = paths[node] + [successor]
                queue.append(successor)
    raise AssertionError(f"no cycle through {start} in {component}")


def test_the_graph_sees_the_packages():
    graph = import_graph()
    assert {"rambo.core", "rambo.harness", "rambo.retrieval.train", "rambo.detection"} <= graph.keys()
    assert "rambo.harness.run" in graph["rambo.retrieval.train"]  # an absolute import
    assert "rambo.retrieval.engine" in graph["rambo.retrieval.train"]  # a relative one


def test_the_search_names_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}, "f": {"g"}, "g": {"f"}}
    components = strongly_connected(graph)
    assert components == [["a", "b", "c"], ["f", "g"]]
    assert [one_cycle(graph, component) for component in components] == [["a", "b", "c", "a"], ["f", "g", "f"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    graph = import_graph()
    cycles = [component for component in strongly_connected(graph) if frozenset(component) not in KNOWN_CYCLES]
    assert not cycles, "import cycles: " + "; ".join(
        " -> ".join(one_cycle(graph, component)) + (f" (modules in the cycle: {', '.join(component)})")
        for component in cycles
    )
