"""The house's rules, read from the code: imports point one way between the layer packages
(and between the study's subpackages), no module imports inside a function (but cli.py, for start-up time, and optional
dependencies, each with a comment saying so), no import circle, and docs/architecture.md
lists every module where it lives and every import edge between packages that the code has.

A new cross-package edge fails here until it is allowed in LAYERS and drawn in the map; a new edge
between two of the study's subpackages, until it is allowed in STUDY_LAYERS and drawn there too."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "orchestrator"
ARCHITECTURE = REPO / "docs" / "architecture.md"

# package -> the packages it may import (besides itself). The order: core < backends < config
# < study, node < driver, results < cli; driver and results never import each other;
# refserver imports nothing of the tuner.
LAYERS: dict[str, set[str]] = {
    "core": set(),
    "refserver": set(),
    "backends": {"core", "refserver"},
    "config": {"core", "backends"},
    "study": {"core", "config"},
    "node": {"core", "backends", "config"},
    "driver": {"core", "backends", "config", "study", "node", "refserver"},
    "results": {"core", "backends", "config", "study", "node"},
    "cli": {"core", "backends", "config", "study", "node", "driver", "results", "refserver"},
}
# the study's subpackages -> those they may import (besides themselves): storage < evidence <
# model < search < simulation, each only those before it (nothing else of ours imports simulation
# but the cli)
STUDY_LAYERS: dict[str, set[str]] = {
    "storage": set(),
    "evidence": {"storage"},
    "model": {"storage", "evidence"},
    "search": {"storage", "evidence", "model"},
    "simulation": {"storage", "evidence", "model", "search"},
}
# third-party modules that may be imported inside a function (optional or heavy, each with a
# comment at the import saying why)
OPTIONAL = {"ray", "torch", "matplotlib", "pandas", "gguf", "vllm", "sglang", "scipy", "triton", "tokenizers",
            "safetensors", "yaml"}


def modules() -> dict[str, Path]:
    """Dotted module name (without ``orchestrator.``) -> file."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts) or "__init__"] = path
    return out


def package_of(module: str) -> str:
    head = module.split(".")[0]
    return "cli" if head in ("cli", "__main__", "__init__") else head


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported orchestrator module, line, inside a function) for every import of ours."""
    tree = ast.parse(path.read_text())
    found: list[tuple[str, int, bool]] = []
    known = modules()

    def target(mod: str, name: str | None) -> str:
        full = f"{mod}.{name}" if name else mod
        return full if full in known else mod

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.ImportFrom) and child.module and child.module.startswith("orchestrator"):
                mod = child.module[len("orchestrator"):].lstrip(".")
                for alias in child.names:
                    found.append((target(mod, alias.name) if mod else alias.name, child.lineno, inside))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith("orchestrator."):
                        found.append((alias.name[len("orchestrator."):], child.lineno, inside))
            visit(child, inside)

    visit(tree, False)
    return [(m, line, inside) for m, line, inside in found if m]


def edges() -> dict[tuple[str, str], list[str]]:
    """(package, imported package) -> the module-level imports that make it."""
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, path in modules().items():
        for imported, line, _ in _imports(path):
            a, b = package_of(module), package_of(imported)
            if a != b:
                out[(a, b)].append(f"{path.relative_to(REPO)}:{line} imports orchestrator.{imported}")
    return out


def test_every_module_is_in_a_layer_package():
    stray = [m for m in modules() if package_of(m) not in LAYERS]
    assert not stray, f"modules outside the layer packages {sorted(LAYERS)}: {stray}"


def study_part_of(module: str) -> str | None:
    """The study subpackage of a module of the study (``study.model.cost`` -> ``model``), else None."""
    parts = module.split(".")
    return parts[1] if parts[0] == "study" and len(parts) > 1 else None


def study_edges() -> dict[tuple[str, str], list[str]]:
    """(study subpackage, imported study subpackage) -> the imports that make it (in functions too)."""
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, path in modules().items():
        for imported, line, _ in _imports(path):
            a, b = study_part_of(module), study_part_of(imported)
            if a and b and a != b:
                out[(a, b)].append(f"{path.relative_to(REPO)}:{line} imports orchestrator.{imported}")
    return out


def test_every_study_module_is_in_a_subpackage():
    stray = [m for m in modules() if m.startswith("study.") and study_part_of(m) not in STUDY_LAYERS]
    assert not stray, f"study modules outside its subpackages {sorted(STUDY_LAYERS)}: {stray}"


def test_study_imports_point_one_way():
    bad = [f"study.{a} -> study.{b}: {where[0]}" for (a, b), where in study_edges().items()
           if b not in STUDY_LAYERS[a]]
    assert not bad, "imports against the study's subpackages:\n" + "\n".join(bad)
    outside = [f"{module}: imports orchestrator.{imported}" for module, path in modules().items()
               if package_of(module) not in ("study", "cli")
               for imported, _, _ in _imports(path) if study_part_of(imported) == "simulation"]
    assert not outside, "the offline harness is the cli's and the study's alone:\n" + "\n".join(outside)


def test_imports_point_one_way():
    bad = [f"{a} -> {b}: {where[0]}" for (a, b), where in edges().items() if b not in LAYERS[a]]
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_no_function_level_imports_outside_cli():
    bad = []
    for module, path in modules().items():
        if package_of(module) == "cli" or module.startswith("refserver"):
            continue
        for imported, line, inside in _imports(path):
            if inside:
                bad.append(f"{path.relative_to(REPO)}:{line} imports orchestrator.{imported} inside a function")
    assert not bad, "\n".join(bad)


def test_third_party_imports_inside_functions_are_optional_ones_with_a_comment():
    bad = []
    for module, path in modules().items():
        if package_of(module) == "cli":
            continue
        lines = path.read_text().splitlines()
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, (ast.Import, ast.ImportFrom)) or getattr(node, "level", 0):
                    continue
                name = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                if not name or name.startswith("orchestrator"):
                    continue
                top = name.split(".")[0]
                block = "\n".join(lines[max(0, node.lineno - 3):node.lineno + 1])
                if top not in OPTIONAL:
                    bad.append(f"{path.relative_to(REPO)}:{node.lineno} imports {name} inside a function")
                elif "#" not in block:
                    bad.append(f"{path.relative_to(REPO)}:{node.lineno} imports {name} inside a function "
                               "without a comment saying why")
    assert not bad, "\n".join(bad)


def test_no_import_circle():
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in modules().items():
        for imported, _, inside in _imports(path):
            if not inside and imported != module:
                graph[module].add(imported)
    state: dict[str, int] = {}
    circle: list[str] = []

    def visit(node: str, stack: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                circle.extend(stack[stack.index(nxt):] + [node, nxt] if nxt in stack else [node, nxt])
                return True
            if state.get(nxt) is None and visit(nxt, stack + [node]):
                return True
        state[node] = 2
        return False

    for module in sorted(graph):
        if state.get(module) is None and visit(module, []):
            break
    assert not circle, "import circle: " + " -> ".join(circle)


def _documented_modules(text: str) -> set[str]:
    return set(re.findall(r"`orchestrator/([\w/]+\.py)`", text))


def test_the_map_lists_every_module_where_it_lives():
    text = ARCHITECTURE.read_text()
    listed = _documented_modules(text)
    real = {str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
            if p.name != "__main__.py" and not (p.name == "__init__.py" and len(p.read_text().splitlines()) < 3)}
    missing = sorted(real - listed)
    stale = sorted(listed - real)
    assert not missing, f"docs/architecture.md does not list: {missing}"
    assert not stale, f"docs/architecture.md lists modules that do not exist: {stale}"


def test_the_map_draws_every_import_edge_between_packages_and_no_other():
    text = ARCHITECTURE.read_text()
    drawn = set(re.findall(r"^\s*-\s*`(\w+)`\s*->\s*`(\w+)`", text, re.MULTILINE))
    real = set(edges())
    undrawn = sorted(f"{a} -> {b} ({real_where[0]})" for (a, b), real_where in edges().items() if (a, b) not in drawn)
    stale = sorted(f"{a} -> {b}" for a, b in drawn - real)
    assert not undrawn, "edges the code has that docs/architecture.md does not draw:\n" + "\n".join(undrawn)
    assert not stale, f"edges docs/architecture.md draws that the code does not have: {stale}"


def test_the_map_draws_every_import_edge_between_study_subpackages_and_no_other():
    text = ARCHITECTURE.read_text()
    drawn = set(re.findall(r"^\s*-\s*`study\.(\w+)`\s*->\s*`study\.(\w+)`", text, re.MULTILINE))
    real = study_edges()
    undrawn = sorted(f"study.{a} -> study.{b} ({where[0]})" for (a, b), where in real.items() if (a, b) not in drawn)
    stale = sorted(f"study.{a} -> study.{b}" for a, b in drawn - set(real))
    assert not undrawn, "edges between the study's subpackages docs/architecture.md does not draw:\n" + \
        "\n".join(undrawn)
    assert not stale, f"edges between the study's subpackages docs/architecture.md draws that the code lacks: {stale}"
