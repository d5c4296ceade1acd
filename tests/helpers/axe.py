"""Accessibility checks in a real browser: axe-core, vendored from the npm registry under
tests/browser/vendor/axe-core (see its README), injected into a Playwright page. Shared by the
tiers that drive chromium; the portal never serves axe."""

from __future__ import annotations

from pathlib import Path

AXE = Path(__file__).resolve().parents[1] / "browser" / "vendor" / "axe-core" / "axe.min.js"
SERIOUS = ("serious", "critical")


def axe_violations(page, impacts: tuple[str, ...] = SERIOUS) -> list[dict]:
    """The page's axe-core violations of `impacts` (WCAG 2.x A/AA rules and best practices),
    each as {id, impact, help, targets}."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(content=AXE.read_text())
    result = page.evaluate("async () => await window.axe.run(document)")
    return [
        {
            "id": v["id"],
            "impact": v["impact"],
            "help": v["help"],
            "targets": [n["target"] for n in v["nodes"]][:5],
        }
        for v in result["violations"]
        if v["impact"] in impacts
    ]
