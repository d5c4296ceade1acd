"""Both images: reproducible layers, labels, a non-root user, sizes, and their entry points
running from a read-only root filesystem (portal checks, watcher, node agent, the C core)."""

from __future__ import annotations

import fnmatch
import re
import secrets
import subprocess

from deploy.images.build import REPO, read_source
from tests.images.conftest import run_in

SIZE_GOAL_MB = 300
IMAGES = ("tranche", "tranche-node-agent")


def test_two_builds_from_one_commit_give_the_same_layers(built) -> None:
    first, second, _ = built
    for image in IMAGES:
        assert first[image]["layers"] == second[image]["layers"], image
        assert first[image]["manifest"] == second[image]["manifest"], image
        assert first[image]["compressed_mb"] < SIZE_GOAL_MB, image


def test_labels_name_the_version_and_source_revision_and_the_user_is_not_root(unpack) -> None:
    source = read_source()
    for image in IMAGES:
        _, config = unpack(image)
        labels = config["config"]["Labels"]
        assert labels["org.opencontainers.image.version"] == source.version
        assert labels["org.opencontainers.image.revision"] == source.revision
        assert labels["org.opencontainers.image.title"] == image
        assert config["config"]["User"] == "10001:10001"


def test_every_top_level_package_ships(unpack) -> None:
    root, _ = unpack("tranche")
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()  # fmt: skip
    packages = {p.split("/")[0] for p in tracked if re.fullmatch(r"[^/]+/__init__\.py", p)}
    shipped = {p.name for p in (root / "opt/tranche/app").iterdir() if p.is_dir()}
    assert packages - {"tests", "bench"} <= shipped
    assert not {"tests", "bench"} & shipped


def test_the_portal_passes_djangos_deploy_checks_read_only(unpack) -> None:
    root, config = unpack("tranche")
    env = {
        "TRANCHE_SECRET_KEY": secrets.token_urlsafe(48),
        "TRANCHE_ALLOWED_HOSTS": "tranche.example.com",
        "TRANCHE_DB_HOST": "postgres.example.internal",
        "TRANCHE_REDIS_URL": "redis://:pw@redis.example.internal:6379/0",
    }
    proc = run_in(root, config, ["manage.py", "check", "--deploy"], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_watcher_and_the_worker_start_read_only(unpack) -> None:
    root, config = unpack("tranche")
    watch = run_in(root, config, ["-m", "controller.watch", "--help"])
    assert watch.returncode == 0, watch.stderr
    assert "usage: python -m controller.watch" in watch.stdout
    celery = run_in(root, config, ["-m", "celery", "-A", "portal", "inspect", "--help"],
                    {"TRANCHE_DEBUG": "1"})  # fmt: skip
    assert celery.returncode == 0, celery.stderr


def test_the_node_agent_runs_and_ships_the_core_with_only_its_exported_symbols(unpack) -> None:
    root, config = unpack("tranche-node-agent")
    proc = run_in(root, config, ["-m", "nodeagent", "run", "--help"])
    assert proc.returncode == 0, proc.stderr
    assert "--node" in proc.stdout
    core = root / "usr/lib/tranche/libtranche.so"
    assert core.is_file()
    nm = subprocess.run(["nm", "-D", "--defined-only", str(core)], capture_output=True,
                        text=True, check=True).stdout  # fmt: skip
    exported = {line.split()[-1] for line in nm.splitlines() if line.split()[1:2] != ["A"]}
    script = (REPO / "nodeagent/native/tranche.map").read_text()
    globals_part = script.split("global:")[1].split("local:")[0]
    patterns = re.findall(r"([\w*]+);", globals_part)
    assert exported, "the core exports nothing"
    stray = {s for s in exported if not any(fnmatch.fnmatchcase(s, p) for p in patterns)}
    assert not stray, f"exported beyond {patterns}: {sorted(stray)}"
    assert "dlsym" in exported
    assert any(s.startswith("cu") for s in exported)
    assert any(s.startswith("nvml") for s in exported)


def test_the_portal_image_has_no_core_and_the_root_filesystem_is_read_only(unpack) -> None:
    root, config = unpack("tranche")
    assert not (root / "usr/lib/tranche").exists()
    proc = run_in(root, config, ["-c", "open('/opt/tranche/app/x', 'w')"])
    assert proc.returncode != 0
    assert "Read-only file system" in proc.stderr


IMPORT_EVERY_MODULE = """
import importlib, pkgutil, sys
packages = sys.argv[1:]
if "portal" in packages:
    import django
    django.setup()
failed = []
for package in packages:
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except Exception as exc:
            failed.append(f"{info.name}: {exc!r}")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def _packages(root) -> set[str]:
    app = root / "opt/tranche/app"
    return {p.name for p in app.iterdir() if (p / "__init__.py").is_file()}


def test_every_module_imports_in_the_image_that_runs_it(unpack) -> None:
    """Each image carries only its own packages (portal: no grpc/protobuf/NVML; agent: no
    Django/Celery/...): every module of the packages each image runs must import there."""
    root, config = unpack("tranche")
    runs = sorted(_packages(root) - {"nodeagent", "deploy"})
    proc = run_in(root, config, ["-c", IMPORT_EVERY_MODULE, *runs], {"TRANCHE_DEBUG": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (root / "opt/tranche/lib/grpc").exists()

    root, config = unpack("tranche-node-agent")
    runs = sorted(_packages(root) - {"portal", "controller", "deploy"})
    proc = run_in(root, config, ["-c", IMPORT_EVERY_MODULE, *runs])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (root / "opt/tranche/lib/django").exists()  # the portal-only layer stays out
