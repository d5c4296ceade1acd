"""The images' Python packages: install, prune, and which files only the node agent needs.

`requirements.txt` is installed with pip `--target` (transitive versions pinned by
constraints.txt), then trimmed of what no Tranche process loads. The packages only the node
agent imports (its gRPC DRA plugin and NVML) go into a layer of their own, so the portal image
does not carry them; the image tests import every module of each image's packages to prove
nothing is missing.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
# What the node agent imports (nodeagent/); the image tests import every agent module to check.
AGENT_REQUIREMENTS = ("kubernetes", "grpcio", "protobuf", "nvidia-ml-py", "websockets",
                      "prometheus-client")  # fmt: skip
# Of those, what neither the portal, the worker nor the watcher imports.
AGENT_ONLY_REQUIREMENTS = ("grpcio", "protobuf", "nvidia-ml-py")
# The kubernetes client's asyncio stack: kubernetes/aio is removed (Tranche uses the synchronous
# client) and nothing else imports these.
UNUSED_DISTS = ("aiohttp", "aiohttp_retry", "yarl", "multidict", "frozenlist", "aiosignal",
                "aiohappyeyeballs", "propcache")  # fmt: skip


def install(target: Path, requirements: Path, run: Callable[[list[str], str], str]) -> None:
    """pip-install `requirements` into `target`, then prune it (see `prune`)."""
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
           "--only-binary=:all:", "--target", str(target), "-r", str(requirements),
           "-r", str(HERE / "requirements-debian-python.txt"),
           "-c", str(HERE / "constraints.txt")]  # fmt: skip
    run(cmd, "python packages (pip --target)")
    # Console scripts carry the build host's interpreter path; the images run `python3 -m`.
    shutil.rmtree(target / "bin", ignore_errors=True)
    prune(target)


def _dist_tops(lib: Path, dist: str) -> set[str]:
    """Top-level names (packages, modules, the dist-info) a distribution installed."""
    (info,) = lib.glob(f"{dist}-*.dist-info")
    records = (info / "RECORD").read_text().splitlines()
    return {line.split(",")[0].split("/")[0] for line in records if line} - {"..", "__pycache__"}


def prune(lib: Path) -> None:
    """Drop what no Tranche process loads (~150 MB of 350); each rule says why it is safe.

    - kubernetes/aio and UNUSED_DISTS: the client's asyncio twin and its HTTP stack.
    - */tests and twisted's */test: test suites (`django/test` is runtime code and stays).
    - gettext sources (*.po): only the compiled *.mo are read.
    - translations other than English: no LocaleMiddleware; LANGUAGE_CODE is en-us.
    """
    doomed = [lib / "kubernetes" / "aio", *lib.rglob("tests"), *(lib / "twisted").rglob("test")]
    doomed += [d for d in lib.rglob("locale/*") if d.is_dir() and not d.name.startswith("en")]
    doomed += [lib / top for dist in UNUSED_DISTS for top in _dist_tops(lib, dist)]
    for path in doomed:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.is_file():
            path.unlink()
    for po in lib.rglob("*.po"):
        po.unlink()


_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
_EXTRA = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")


def _name(text: str) -> str:
    """A distribution's normalised name (PEP 503), from a name or a requirement string."""
    match = _REQUIREMENT.match(text)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else ""


def _extras(text: str) -> set[str]:
    match = _REQUIREMENT.match(text)
    return {e.strip() for e in (match.group(2) or "").split(",") if e.strip()} if match else set()


def _closure(dists: dict[str, metadata.Distribution], roots: set[str]) -> set[str]:
    """The distributions `roots` (requirement strings) pull in, extras included."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(_name(r), frozenset(_extras(r))) for r in roots]
    while todo:
        name, extras = todo.pop()
        if name not in dists or (name, extras) in seen:
            continue
        seen.add((name, extras))
        for req in dists[name].requires or []:
            wanted = _EXTRA.search(req)
            if wanted and wanted.group(1) not in extras:
                continue  # an optional feature nobody asked for
            todo.append((_name(req), frozenset(_extras(req))))
    return {name for name, _ in seen}


def split_by_image(lib: Path, requirements: Path, lib_in_image: str) -> dict[str, Callable]:
    """Predicates on image paths: `common`, `portal` (portal image only), `agent` (agent only).

    The agent needs the closure of AGENT_REQUIREMENTS; the portal, worker and watcher the
    closure of requirements.txt less AGENT_ONLY_REQUIREMENTS. A distribution in both, or in
    neither (added for Debian's python), is common. Files are attributed by the top-level names
    each distribution's RECORD lists.
    """
    dists = {_name(d.metadata["Name"]): d for d in metadata.distributions(path=[str(lib)])}
    direct = {line.split("#")[0].strip() for line in requirements.read_text().splitlines()}
    agent = _closure(dists, set(AGENT_REQUIREMENTS))
    agent_only = {_name(r) for r in AGENT_ONLY_REQUIREMENTS}
    portal = _closure(dists, {r for r in direct if r and _name(r) not in agent_only})
    owner: dict[str, str] = {}
    for name, dist in dists.items():
        group = "agent" if name not in portal else "portal" if name not in agent else "common"
        if name not in agent and name not in portal:
            group = "common"
        for top in {str(f).split("/")[0] for f in dist.files or []} - {"..", "__pycache__"}:
            owner[top] = group
    modules = {
        top.removesuffix(".py"): group for top, group in owner.items() if top.endswith(".py")
    }
    prefix = f"{lib_in_image}/"

    def _group(rel: str) -> str | None:
        if not rel.startswith(prefix):
            return "common" if rel == lib_in_image else None
        parts = rel[len(prefix) :].split("/")
        if parts[0] in owner:
            return owner[parts[0]]
        # pycs of top-level modules (pynvml.py) sit in the shared lib/__pycache__.
        if len(parts) == 2 and parts[0] == "__pycache__":
            return modules.get(parts[1].split(".")[0], "common")
        return "common"

    return {
        group: (lambda rel, g=group: _group(rel) == g) for group in ("common", "portal", "agent")
    }
