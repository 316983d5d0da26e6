"""The rooms of the code and the one direction of their imports (docs/architecture.md).

    nasir (API, CLI, frontend, zoo, search) -> runtime -> lowering -> transforms -> dialects

Inside nasir/: the CLI (nasir.cli) is the top, imported by no other module; measuring
(nasir.measure) and tuning (nasir.tuning) sit below the search, training, fuzzing and the CLI.
Analyses (transforms/analysis/, lowering/analysis/) define no pass and import none.

Every import of a nasir module, at the top of a module or inside a function, must point down this
list or within its own room; `nasir.errors` is below them all. Function-level imports of nasir
modules are for the API room only (they keep `import nasir` from loading torch), and the modules'
imports, all of them counted, form no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("dialects", "transforms", "lowering", "runtime", "nasir")
"""Top-level folders, lowest first; each is the package `nasir.<folder>` (`nasir` itself for nasir/)."""
BASE = {"nasir.errors"}
BACKENDS = {"llvm": ("nest_to_loops", "loops_to_llvm"), "torch": ("nest_to_torch",), "tvm": ("nest_to_tvm",)}
"""Each backend's conversion folders under lowering/."""
BELOW = {"nasir.measure": ("nasir.cli", "nasir.search", "nasir.training", "nasir.fuzz", "nasir.tuning"),
         "nasir.tuning": ("nasir.cli", "nasir.search", "nasir.training", "nasir.fuzz")}
"""Rooms of nasir/ -> the rooms of nasir/ they must not import."""
ANALYSES = ("nasir.transforms.analysis", "nasir.lowering.analysis")
CONVERSIONS = {folder: backend for backend, folders in BACKENDS.items() for folder in folders} | {"nn_to_nest": None}
"""Conversion folder -> its backend (None: convert-nn-to-nest, which every backend's input comes from)."""


def module_name(room: str, path: Path) -> str:
    parts = path.relative_to(ROOT / room).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join(("nasir",) + ((room,) if room != "nasir" else ()) + parts)


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ROOMS[:-1] else "nasir"


def modules() -> dict[str, Path]:
    return {module_name(room, p): p for room in ROOMS for p in sorted((ROOT / room).rglob("*.py"))}


def imports(path: Path, known: set[str]) -> list[tuple[str, bool, int]]:
    """(module imported, inside a function, line) for each import of a nasir module in `path`."""
    found = []
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and ast.unparse(block.test) == "TYPE_CHECKING" for n in ast.walk(block)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nasir"):
            names = [f"{node.module}.{a.name}" for a in node.names]
            targets = [n for n in names if n in known] or [node.module]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names if a.name.startswith("nasir")]
        else:
            continue
        found += [(t, node.col_offset > 0, node.lineno) for t in targets]
    return found


GRAPH = {name: imports(path, set(modules())) for name, path in modules().items()}


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_imports_point_down(name):
    here = ROOMS.index(room_of(name))
    for target, in_function, line in GRAPH[name]:
        if target in BASE:
            continue
        assert ROOMS.index(room_of(target)) <= here, f"{name}:{line} imports {target}, a room above it"
        assert not in_function or room_of(name) == "nasir", f"{name}:{line} imports {target} inside a function"


def test_no_import_cycles():
    edges = {name: {t for t, _, _ in targets if t in GRAPH and t != name} for name, targets in GRAPH.items()}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for name in sorted(edges):
        if name not in state:
            visit(name, [name])


def conversion_of(module: str) -> str | None:
    """The lowering/ conversion folder `module` is in (`CONVERSIONS`), or None."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "lowering" and parts[2] in CONVERSIONS else None


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if CONVERSIONS.get(conversion_of(n))))
def test_backends_import_no_other_backend(name):
    backend = CONVERSIONS[conversion_of(name)]
    for target, _, line in GRAPH[name]:
        folder = conversion_of(target)
        assert folder is None or CONVERSIONS[folder] == backend, \
            f"{name}:{line} imports {target}, from another conversion ({folder})"


def within(module: str, room: str) -> bool:
    return module == room or module.startswith(room + ".")


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if not within(n, "nasir.cli")))
def test_cli_is_the_top(name):
    for target, _, line in GRAPH[name]:
        assert not within(target, "nasir.cli"), f"{name}:{line} imports the CLI's {target}"


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if any(within(n, room) for room in BELOW)))
def test_measuring_and_tuning_sit_below(name):
    (room,) = [room for room in BELOW if within(name, room)]
    for target, _, line in GRAPH[name]:
        above = [r for r in BELOW[room] if within(target, r)]
        assert not above, f"{name}:{line} imports {target}, from {above[0]}, a room above {room}"


def defines_pass(path: Path) -> bool:
    return any(isinstance(node, ast.ClassDef) and any(ast.unparse(b).endswith("Pass") for b in node.bases)
               for node in ast.walk(ast.parse(path.read_text())))


PASS_MODULES = {name for name, path in modules().items() if defines_pass(path)}


def test_pass_modules_are_found():
    assert {"nasir.transforms.group", "nasir.lowering.schedule.default_schedule"} <= PASS_MODULES


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if any(within(n, room) for room in ANALYSES)))
def test_analyses_rewrite_nothing(name):
    assert name not in PASS_MODULES, f"{name} defines a pass: it belongs beside the rewrites"
    for target, _, line in GRAPH[name]:
        assert target not in PASS_MODULES, f"{name}:{line} imports {target}, a module of passes"
