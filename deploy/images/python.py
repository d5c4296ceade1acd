"""The images' Python packages: install, prune, and which files only the node agent needs.

`requirements.txt` is installed with pip `--target` (transitive versions pinned by
constraints.txt), then trimmed of what no Tranche process loads. The packages only the node
agent imports (its gRPC DRA plugin and NVML) go into a layer of their own, so the portal image
does not carry them; the image tests import every module of each image's packages to prove
nothing is missing.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Distributions only the node agent imports (nodeagent/draplugin: grpc + protobuf; NVML).
AGENT_ONLY_DISTS = ("grpcio", "protobuf", "nvidia_ml_py")
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


def agent_only(lib: Path, lib_in_image: str) -> Callable[[str], bool]:
    """Predicate on image paths: True for files of AGENT_ONLY_DISTS (and their pycs)."""
    tops = {top for dist in AGENT_ONLY_DISTS for top in _dist_tops(lib, dist)}
    modules = {top.removesuffix(".py") for top in tops if top.endswith(".py")}
    prefix = f"{lib_in_image}/"

    def _is_agent_only(rel: str) -> bool:
        if not rel.startswith(prefix):
            return False
        parts = rel[len(prefix) :].split("/")
        if parts[0] in tops:
            return True
        # pycs of top-level modules (pynvml.py) sit in the shared lib/__pycache__.
        return len(parts) == 2 and parts[0] == "__pycache__" and parts[1].split(".")[0] in modules

    return _is_agent_only
