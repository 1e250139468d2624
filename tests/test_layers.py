"""The package's layout rules, checked on the source: no import cycle (imports inside functions
included), each layer imports only from the layers below it, no private name imported across
modules, and the top of the package stays small.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "python_ingest"

# Lowest first: a module may import from its own layer's package and from lower layers.
LAYERS: dict[str, int] = {
    "exceptions": 0,
    "credentials": 1,
    "config": 2,
    "runtime": 3, "changelog": 3,
    "kafka": 4, "tables": 4,
    "sources": 5, "sinks": 5, "feed": 5,
    "steps": 6,
    "reports": 7, "runner": 7,
    "scaffold": 7, "verify": 7, "replay": 7,
    "demo": 8,
    "cli": 9,
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(path: Path) -> list[tuple[str, str | None, int]]:
    """Every (module, imported name or None, line) in the file, also inside functions."""
    found: list[tuple[str, str | None, int]] = []
    tree = ast.parse(path.read_text())
    own = module_name(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in MODULES:
                    found.append((sub, None, node.lineno))
                else:
                    found.append((base, alias.name, node.lineno))
    return [(m, n, line) for m, n, line in found if m.split(".")[0] == "python_ingest"]


GRAPH = {name: sorted({m for m, _, _ in imports_of(path) if m in MODULES and m != name})
         for name, path in MODULES.items()}


def layer(module: str) -> tuple[str, int]:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    return top, LAYERS.get(top, -1)


def test_every_top_level_name_has_a_layer() -> None:
    tops = {layer(m)[0] for m in MODULES if m != "python_ingest"}
    assert tops <= set(LAYERS), f"add these to LAYERS: {sorted(tops - set(LAYERS))}"


def test_no_import_cycle() -> None:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in GRAPH[node]:
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_layers_import_only_downwards(module: str) -> None:
    top, rank = layer(module)
    wrong = []
    for target, _, line in imports_of(MODULES[module]):
        if target not in MODULES or target == "python_ingest":
            continue
        other, other_rank = layer(target)
        if other != top and other_rank >= rank:
            wrong.append(f"line {line}: {target}")
    assert not wrong, f"{module} ({top}, layer {rank}) imports upwards: {wrong}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_imported_across_modules(module: str) -> None:
    private = [f"line {line}: {target}.{name}" for target, name, line in
               imports_of(MODULES[module]) if name and name.startswith("_")]
    assert not private, f"{module} imports private names: {private}"


def test_the_top_of_the_package_stays_small() -> None:
    top = [p.name for p in PACKAGE.glob("*.py")]
    assert len(top) <= 6, top
    long = {module_name(p): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 450}
    assert not long, f"modules over 450 lines: {long}"


# sources/: the database packages depend on the tap core, never the reverse, never on each other
# (#59). The tap core names a kind's modules only as strings (tap/kinds.py, imported lazily).
SOURCE_KINDS = ("python_ingest.sources.binlog", "python_ingest.sources.postgres")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith(
    ("python_ingest.sources.tap", *SOURCE_KINDS))))
def test_the_tap_core_and_each_source_kind_stand_apart(module: str) -> None:
    own = next((k for k in SOURCE_KINDS if module == k or module.startswith(k + ".")), None)
    banned = [k for k in SOURCE_KINDS if k != own]
    wrong = [f"line {line}: {target}" for target, _, line in imports_of(MODULES[module])
             if any(target == k or target.startswith(k + ".") for k in banned)]
    assert not wrong, f"{module} imports another source kind's package: {wrong}"
