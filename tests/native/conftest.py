"""Fixtures for the native tier: build the core and simgpu once, and simulated GPU boxes.

A ``GpuBox`` is one simulated machine (its own simgpu config and state file, so tests never
share a GPU) on which tests create containers: each container is a slice config written with
nodeagent.sliceconfig plus a region folder, exactly what the node agent will provide.

Two ways a container meets the core. ``box.run``/``box.start`` preload the TEST-ONLY variant
(``libtranche-test.so``), which takes the config and region paths from TRANCHE_SLICE_CONFIG /
TRANCHE_REGION_DIR, so many containers run side by side. ``box.run_mounted`` preloads the
shipped ``libtranche.so`` in a private mount namespace where the container's config and region
sit at the fixed in-container paths, as the CDI mounts put them.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nodeagent import sliceconfig

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "nodeagent" / "native"
MiB = 1 << 20
GiB = 1 << 30
CONTEXT_MIB = 4  # simulated per-context footprint; the core must charge it (measured delta)
CONFIG_DIR = "/etc/tranche"  # the shipped core's fixed paths (nodeagent/native/src/config.h)
REGION_PARENT = "/var/run/tranche"


def sim_uuid(index: int) -> str:
    """simgpu's UUID for device index (see simgpu/simstate.c)."""
    return f"GPU-51a1a7ed-0000-4000-8000-{index:012x}"


@dataclass(frozen=True)
class Build:
    """One build variant of the native tree: the normal one or the ASan/UBSan one."""

    name: str
    root: Path
    preload_prefix: tuple[str, ...] = ()
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def lib(self) -> Path:
        """The shipped core: fixed paths only."""
        return self.root / "libtranche.so"

    @property
    def test_lib(self) -> Path:
        """The test variant: the same core, paths overridable from the environment.

        NATIVE_CORE_UNDER_TEST names another build of it (an older commit's, to show that a
        test fails there: see the figures recorded in nodeagent/native/README.md)."""
        other = os.environ.get("NATIVE_CORE_UNDER_TEST")
        return Path(other) if other and self.name == "normal" else self.root / "libtranche-test.so"

    def prog(self, name: str) -> Path:
        return self.root / "tests" / name

    def preload(self, shipped: bool = False) -> str:
        return " ".join([*self.preload_prefix, str(self.lib if shipped else self.test_lib)])


def _make(*targets: str) -> None:
    jobs = os.environ.get("NATIVE_JOBS", "2")
    proc = subprocess.run(
        ["make", "-C", str(NATIVE), f"-j{jobs}", *targets],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"native build failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")


@pytest.fixture(scope="session")
def native_build() -> Build:
    _make("all")
    return Build("normal", NATIVE / "build")


@pytest.fixture(scope="session")
def san_build(native_build: Build) -> Build:
    _make("sanitize")
    asan = subprocess.run(
        ["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return Build(
        "sanitized",
        NATIVE / "build" / "san",
        preload_prefix=(asan,),
        # Simulated driver handles live as long as the process: leak reports would be noise.
        extra_env={
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0",
            "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
        },
    )


@pytest.fixture(params=["normal", "sanitized"])
def any_build(request: pytest.FixtureRequest) -> Build:
    """Run a test against the normal and the sanitized build."""
    return request.getfixturevalue("native_build" if request.param == "normal" else "san_build")


@dataclass
class Container:
    """One tenant container: its slice config, region folder and the environment to run in."""

    name: str
    config_path: Path
    region_dir: Path
    env: dict[str, str]


class GpuBox:
    """A simulated machine with 4 x Tesla V100-PCIE-32GB (CC 7.0, 80 SMs)."""

    def __init__(self, tmp: Path, build: Build) -> None:
        self.tmp = tmp
        self.build = build
        self.sim_config = tmp / "simgpu.conf"
        self.sim_config.write_text(
            "# simulated devices for the native tests\n"
            f'device name="Tesla V100-PCIE-32GB" memory_mib=32768 sm_count=80 cc=7.0 '
            f"context_mib={CONTEXT_MIB} count=4\n"
        )
        self.state = tmp / "simgpu.state"

    def base_env(self, build: Build | None = None) -> dict[str, str]:
        b = build or self.build
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("TRANCHE_", "SIMGPU_", "LD_PRELOAD", "ASAN_", "UBSAN_"))
        }
        env.update(
            SIMGPU_CONFIG=str(self.sim_config),
            SIMGPU_STATE=str(self.state),
            LD_LIBRARY_PATH=str(b.root / "simgpu"),
            **b.extra_env,
        )
        return env

    def container(
        self,
        name: str,
        slices: list[tuple[int, int, int]],
        build: Build | None = None,
    ) -> Container:
        """slices: (simulated device index, memory bytes, compute percent) per device."""
        cfg = sliceconfig.SliceConfig(
            claim=f"tests/{name}",
            devices=tuple(
                sliceconfig.DeviceSlice(sim_uuid(i), m, p, CONTEXT_MIB * MiB) for i, m, p in slices
            ),
        )
        path = self.tmp / name / "slice.conf"
        sliceconfig.write(path, cfg)
        region = self.tmp / name / "region"
        region.mkdir(parents=True, exist_ok=True)
        b = build or self.build
        env = self.base_env(b)
        env.update(
            TRANCHE_SLICE_CONFIG=str(path),
            TRANCHE_REGION_DIR=str(region),
            LD_PRELOAD=b.preload(),
        )
        return Container(name, path, region, env)

    def physical_used(self, device: int = 0) -> int:
        """Bytes the simulated card really holds (simgpu's own counter, through NVML without
        the core): the ground truth a slice is checked against."""
        smi = self.build.root / "simgpu" / "nvidia-smi"
        env = {k: v for k, v in self.base_env().items() if k != "LD_PRELOAD"}
        query = ["--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", str(device)]
        out = subprocess.run(
            [str(smi), *query], env=env, capture_output=True, text=True, check=True, timeout=30
        ).stdout
        return int(out.strip()) * MiB

    def mounted(
        self, c: Container, prog: str, *args: str, config_setup: str | None = None
    ) -> tuple[list[str], dict[str, str]]:
        """argv and env that run prog under the shipped core in a private mount namespace: the
        container's config read-only at /etc/tranche/slice.conf and its region at
        /var/run/tranche/region (each folder a fresh tmpfs, so nothing of the host shows
        through). config_setup replaces the config copy with shell lines run in /etc/tranche
        before it is made read-only."""
        for d in (CONFIG_DIR, REGION_PARENT):
            Path(d).mkdir(parents=True, exist_ok=True)  # mount points; empty on the host
        setup = config_setup or f"cp {shlex.quote(str(c.config_path))} slice.conf"
        script = "\n".join(
            [
                "set -e",
                "mount --make-rprivate /",
                f"mount -t tmpfs -o size=1m tranche-test {CONFIG_DIR}",
                f"cd {CONFIG_DIR}",
                setup,
                "cd /",
                f"mount -o remount,ro {CONFIG_DIR}",
                f"mount -t tmpfs -o size=1m tranche-test {REGION_PARENT}",
                f"mkdir {REGION_PARENT}/region",
                f"mount --bind {shlex.quote(str(c.region_dir))} {REGION_PARENT}/region",
                "exec " + " ".join(shlex.quote(a) for a in [str(self.build.prog(prog)), *args]),
            ]
        )
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
        return argv, {**c.env, "LD_PRELOAD": self.build.preload(shipped=True)}

    def run_mounted(
        self, c: Container, prog: str, *args: str, config_setup: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        argv, env = self.mounted(c, prog, *args, config_setup=config_setup)
        return subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=60, check=False
        )

    def start_mounted(self, c: Container, prog: str, *args: str) -> subprocess.Popen[str]:
        argv, env = self.mounted(c, prog, *args)
        return subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(
        self, c: Container | dict[str, str], prog: str, *args: str, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        env = c.env if isinstance(c, Container) else c
        return subprocess.run(
            [str(self.build.prog(prog)), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, c: Container, prog: str, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(self.build.prog(prog)), *args],
            env=c.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture
def box(tmp_path: Path, native_build: Build) -> GpuBox:
    return GpuBox(tmp_path, native_build)


@pytest.fixture
def any_box(tmp_path: Path, any_build: Build) -> GpuBox:
    return GpuBox(tmp_path, any_build)
