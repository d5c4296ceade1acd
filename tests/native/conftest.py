"""Fixtures for the native tier: build the core and simgpu once, and simulated GPU boxes.

A ``GpuBox`` is one simulated machine (its own simgpu config and state file, so tests never
share a GPU) on which tests create containers: each container is a slice config written with
nodeagent.sliceconfig plus a region folder, exactly what the node agent will provide.
"""

from __future__ import annotations

import os
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
        return self.root / "libtranche.so"

    def prog(self, name: str) -> Path:
        return self.root / "tests" / name

    def preload(self) -> str:
        return " ".join([*self.preload_prefix, str(self.lib)])


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
            devices=tuple(sliceconfig.DeviceSlice(sim_uuid(i), m, p) for i, m, p in slices),
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
