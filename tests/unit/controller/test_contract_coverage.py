"""The controller's seam contract names its modules one by one (import-linter's forbidden
contracts take no "all but"): a new controller module left off it would import `portal` unseen.
This keeps the list whole: every controller module but the seam itself is on it. (The layers
contract is exhaustive: import-linter itself fails on a module left off it.)"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SEAM = {"controller.desired", "controller.store"}


def _contracts() -> list[dict]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["tool"]["importlinter"]["contracts"]


def _controller_modules() -> set[str]:
    found = set()
    for path in (ROOT / "controller").iterdir():
        if path.name.startswith("_") or path.name == "__pycache__":
            continue
        if path.suffix == ".py" or (path.is_dir() and (path / "__init__.py").exists()):
            found.add(f"controller.{path.stem}")
    return found


def test_every_controller_module_but_the_seam_is_forbidden_portal() -> None:
    (seam,) = [c for c in _contracts() if c["name"].startswith("The controller meets the portal")]
    assert seam["forbidden_modules"] == ["portal"]
    assert set(seam["source_modules"]) == _controller_modules() - SEAM
