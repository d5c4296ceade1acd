"""The import contracts are rules, not lists: a module nobody has named yet is caught.

Each test runs lint-imports on a scratch tree (the real packages linked, `controller/` copied so
a probe can be written into it) and checks that the probe breaks the contract meant to stop it.
The clean copy keeps every contract, so a probe's failure is the probe's own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("portal", "controller", "nodeagent", "tranche", "deploy")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for package in PACKAGES:
        if package == "controller":
            shutil.copytree(
                ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            (tmp_path / package).symlink_to(ROOT / package)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _broken(result: subprocess.CompletedProcess[str]) -> str:
    """The report's list of contracts with their verdicts, lines joined (long names wrap)."""
    return " ".join(result.stdout.split())


def test_the_clean_copy_keeps_every_contract(tree: Path) -> None:
    result = _lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 broken" in result.stdout


def test_a_new_controller_module_importing_a_portal_app_breaks_the_layers(tree: Path) -> None:
    (tree / "controller" / "probe_new.py").write_text("from portal.billing import models\n")
    result = _lint(tree)
    assert result.returncode != 0
    report = _broken(result)
    assert "Controller layers: entry points" in report
    assert "controller.probe_new" in report  # named as the module on no layer


def test_the_write_seam_importing_a_page_app_breaks_its_rule(tree: Path) -> None:
    store = tree / "controller" / "store.py"
    store.write_text(store.read_text() + "\nimport portal.status.views\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "The controller's write seam imports none of the apps" in _broken(result)
    assert "controller.store is not allowed to import portal.status" in result.stdout


def _cycles(graph: grimp.ImportGraph) -> list[set[str]]:
    """Strongly connected groups of modules (Tarjan), each a cycle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(group)

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_in_the_tree() -> None:
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    assert _cycles(grimp.build_graph(*PACKAGES, cache_dir=None)) == []


def test_the_cycle_finder_sees_a_cycle(tmp_path: Path) -> None:
    package = tmp_path / "probe_cycle"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "first.py").write_text("from probe_cycle import second\n")
    (package / "second.py").write_text("def later():\n    from probe_cycle import first\n")
    sys.path.insert(0, str(tmp_path))
    try:
        graph = grimp.build_graph("probe_cycle", cache_dir=None)
    finally:
        sys.path.remove(str(tmp_path))
    assert _cycles(graph) == [{"probe_cycle.first", "probe_cycle.second"}]
