"""The tests mirror the code: every module of orchestrator/ with logic has its test file,
``tests/<package>/test_<module>.py``, and every test file in a package folder is named after a
module of that package; scenarios (whole studies through the CLI or the driver) live in
tests/e2e/. A new module without tests, or a test file whose module moved, fails here."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "orchestrator"
TESTS = REPO / "tests"

# modules whose test file has another name, and why
NAMED_OTHERWISE = {
    "backends/__init__.py": "backends/test_registry.py",  # the registry of backend kinds
    "backends/base.py": "backends/test_contract.py",  # the Backend contract, on every registered backend
    "refserver/cli.py": "refserver/test_refserver_cli.py",  # tests/test_cli.py is the tuner's cli.py
    "results/report/__init__.py": "results/test_report.py",  # write_report, the report package's one function
    # pytest imports test files by basename (rootdir mode, no packages): node/test_startup.py has it
    "results/report/startup.py": "results/report/test_report_startup.py",
}
# test files at the top of tests/: the CLI, and the rules of the house itself
TOP_LEVEL = {"test_cli.py", "test_layers.py", "test_mirror.py", "test_test_hygiene.py"}


def has_logic(path: Path) -> bool:
    """A function, or a class with a method of its own (a dataclass of fields alone is none)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return True
        if isinstance(node, ast.ClassDef) and any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                                                  for n in node.body):
            return True
    return False


def expected_test_file(module: Path) -> str:
    rel = module.relative_to(PKG).as_posix()
    if rel in NAMED_OTHERWISE:
        return NAMED_OTHERWISE[rel]
    folder, name = rel.rsplit("/", 1) if "/" in rel else ("", rel)
    return f"{folder}/test_{name}" if folder else f"test_{name}"


def test_every_module_with_logic_has_its_test_file():
    missing = sorted(f"orchestrator/{m.relative_to(PKG)} -> tests/{expected_test_file(m)}"
                     for m in PKG.rglob("*.py")
                     if has_logic(m) and not (TESTS / expected_test_file(m)).is_file())
    assert not missing, "modules without their test file:\n" + "\n".join(missing)


def test_every_test_file_of_a_package_names_one_of_its_modules():
    wanted = {expected_test_file(m) for m in PKG.rglob("*.py")}
    stray = sorted(str(t.relative_to(TESTS)) for t in TESTS.rglob("test_*.py")
                   if t.relative_to(TESTS).parts[0] != "e2e" and "fixtures" not in t.parts
                   and t.relative_to(TESTS).as_posix() not in wanted | TOP_LEVEL)
    assert not stray, "test files that name no module where they are (scenarios go to tests/e2e/):\n" + \
        "\n".join(stray)


def test_no_two_test_files_share_a_basename():
    """pytest imports test files by their basename (no packages under tests/): two files with one
    name make the second fail to collect ("import file mismatch"), and only in a full run."""
    seen: dict[str, str] = {}
    clashes = []
    for t in sorted(TESTS.rglob("test_*.py")):
        rel = str(t.relative_to(TESTS))
        if t.name in seen:
            clashes.append(f"{seen[t.name]} and {rel}")
        seen.setdefault(t.name, rel)
    assert not clashes, "test files with one basename:\n" + "\n".join(clashes)
