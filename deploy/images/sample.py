"""The sample tenant image, built daemonless and reproducibly: `registry.tranche.dev/sample:1`.

Two programs (`deploy/images/sample/`): `tranche-sample` (the entrypoint: nvidia-smi's name and
memory, an allocation loop to `SAMPLE_ALLOC_MIB`, a compute loop; other modes for the checks
in docs/devcluster.md), dynamically linked against `libcuda.so.1` and `libnvidia-ml.so.1`,
which the image does not carry: the node's CDI spec mounts them; and `tranche-bypass`, a static
binary that takes device memory around the interception core (for the backstop's test). The
rootfs is those two, the glibc files they need and empty /etc, /tmp. Same sources and
compiler -> same digest. Written as an OCI archive that containerd's `ctr images import` reads.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from deploy.devcluster.node.build import write_archive
from tranche.names import SAMPLE_IMAGE

IMAGE = SAMPLE_IMAGE
SOURCE = Path(__file__).with_name("sample")
REPO = Path(__file__).resolve().parents[2]
SIMGPU = REPO / "nodeagent" / "native" / "simgpu"
# Linked by soname only: the simulated driver of `make native`; on a GPU node the real one.
DRIVER_LIBS = REPO / "nodeagent" / "native" / "build" / "simgpu"
GLIBC = ("/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6")
CFLAGS = ["-O2", "-Wall", "-Wextra", "-Werror", f"-ffile-prefix-map={REPO}=."]


class SampleBuildError(RuntimeError):
    """gcc failed or the simulated driver is not built; the message says which and what to do."""


def _inputs() -> bytes:
    digest = hashlib.sha256()
    inputs = [*SOURCE.glob("*.c"), SIMGPU / "simstate.c", SIMGPU / "simstate.h", Path(__file__)]
    for path in sorted(inputs):
        digest.update(path.name.encode() + path.read_bytes())
    digest.update(" ".join(CFLAGS).encode())
    return digest.digest()


def archive_path(folder: Path) -> Path:
    return folder / f"sample-{_inputs().hex()[:16]}.tar"


def _cc(args: list[str]) -> None:
    proc = subprocess.run(["gcc", *CFLAGS, *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SampleBuildError(f"sample image: gcc {' '.join(args)} failed:\n{proc.stderr}")


def build(folder: Path) -> Path:
    """Build the archive into `folder` (kept while its inputs are unchanged)."""
    out = archive_path(folder)
    if out.is_file():
        return out
    if not (DRIVER_LIBS / "libcuda.so.1").is_file():
        raise SampleBuildError(f"{DRIVER_LIBS}/libcuda.so.1 missing: run `make native` first")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tranche-sample-") as tmp:
        root = Path(tmp) / "rootfs"
        for sub in ("etc", "tmp", "usr/bin", "lib64", "lib/x86_64-linux-gnu",
                    "usr/lib/x86_64-linux-gnu"):  # fmt: skip
            (root / sub).mkdir(parents=True, exist_ok=True)
        _cc(["-o", str(root / "usr/bin/tranche-sample"), str(SOURCE / "tranche-sample.c"),
             str(DRIVER_LIBS / "libcuda.so.1")])  # fmt: skip
        _cc(["-static", "-I", str(SIMGPU), "-o", str(root / "usr/bin/tranche-bypass"),
             str(SOURCE / "tranche-bypass.c"), str(SIMGPU / "simstate.c"),
             "-lpthread"])  # fmt: skip
        for lib in GLIBC:
            shutil.copy2(lib, root / lib.lstrip("/"))
        for path in root.rglob("*"):
            os.chmod(path, 0o755)  # noqa: S103 - the loader and libraries are mapped executable
        files = sorted(((p, str(p.relative_to(root))) for p in root.rglob("*")),
                       key=lambda entry: entry[1].split("/"))  # fmt: skip
        write_archive(out, IMAGE, files, ["/usr/bin/tranche-sample"])
    return out


def main() -> int:
    print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / ".state" / "images"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
