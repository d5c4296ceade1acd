"""The pre-flight sample images `make run` serves, built here from bytes: no toolkit, no download.

Three images, each one shared library whose `.nv_fatbin` section holds a CUDA fat binary built
the way nvcc lays it out (portal/preflight/fatbin.py reads the same layout): a container header
(magic 0xBA55ED50, version, header size, payload size) and one entry per target, with its kind
(2 = SASS cubin, 1 = PTX) and its architecture at offset 28. A SASS entry carries a minimal
cubin (an ELF of machine EM_CUDA with the arch in its flags), a PTX entry the PTX header text.

- `cuda12-sm70`: SASS sm_70 and sm_80, PTX compute_80, as CUDA 12 builds for Volta and newer;
- `cuda13-no-sm70`: SASS sm_75 to sm_120 and PTX compute_120, as CUDA 13 builds: it dropped
  Volta, so on a V100 (compute capability 7.0) pre-flight says it will fail, with the sm_70 fix;
- `ptx-only-compute70`: no SASS, PTX compute_70 only: the driver compiles it when it loads.

`push_samples(host)` pushes all three to a registry (idempotent: same bytes, same digests).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import urllib3

from deploy.ociregistry.push import push_image, tar_layer

REPOSITORY = "samples"
TAG = "1"
LIBRARY = "usr/local/lib/libsample_kernels.so"
KIND_PTX, KIND_SASS = 1, 2
FATBIN_MAGIC = 0xBA55ED50
ENTRY_HEADER = 64
EM_X86_64, EM_CUDA = 62, 190


@dataclass(frozen=True)
class Sample:
    """One sample image: what it carries and what pre-flight says of it on a V100."""

    name: str
    sass: tuple[int, ...]
    ptx: tuple[int, ...]
    on_v100: str  # "ok" or "will_fail": the verdict the sample demonstrates
    summary: str

    def reference(self, host: str) -> str:
        return f"{host}/{REPOSITORY}/{self.name}:{TAG}"


SAMPLES = (
    Sample(
        "cuda12-sm70", (70, 80), (80,), "ok",
        "built with CUDA 12 for sm_70 and sm_80: runs on a V100 and an A100",
    ),
    Sample(
        "cuda13-no-sm70", (75, 80, 86, 89, 90, 100, 120), (120,), "will_fail",
        "built as CUDA 13 builds, sm_75 and newer: no code a V100 (sm_70) can run",
    ),
    Sample(
        "ptx-only-compute70", (), (70,), "ok",
        "PTX for compute_70 only: the driver compiles it for the GPU when it loads",
    ),
)  # fmt: skip


def _cubin(arch: int) -> bytes:
    """A minimal cubin: an ELF64 header of machine EM_CUDA, the SASS arch in e_flags."""
    ident = b"\x7fELF" + bytes([2, 1, 1, 0x33, 7]) + bytes(7)
    return ident + struct.pack(
        "<HHIQQQIHHHHHH", 2, EM_CUDA, 1, 0, 0, 0, arch | (arch << 16), 64, 0, 0, 64, 0, 0
    )


def _ptx(arch: int) -> bytes:
    return (
        f"//\n// Generated for the Tranche pre-flight sample\n//\n.version 8.0\n"
        f".target sm_{arch}\n.address_size 64\n\n.visible .entry sample_kernel()\n{{\n\tret;\n}}\n"
    ).encode()


def _entry(kind: int, arch: int, payload: bytes) -> bytes:
    payload += bytes(-len(payload) % 8)
    # kind, flags, header size, payload size, compressed size, options offset, minor, major
    # (of the format), arch at 28, then name offset/length, flags and the uncompressed size
    header = struct.pack(
        "<HHIQIIHHIIIQQQ", kind, 0x0101, ENTRY_HEADER, len(payload), 0, 0, 1, 7, arch,
        0, 0, 0x11 if kind == KIND_SASS else 0x01, 0, len(payload),
    )  # fmt: skip
    return header.ljust(ENTRY_HEADER, b"\0") + payload


def fatbin(sass: tuple[int, ...], ptx: tuple[int, ...]) -> bytes:
    """One fat binary container with a SASS entry per `sass` arch and a PTX entry per `ptx`."""
    entries = b"".join(
        [_entry(KIND_SASS, a, _cubin(a)) for a in sass]
        + [_entry(KIND_PTX, a, _ptx(a)) for a in ptx]
    )
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(entries)) + entries


def shared_library(fatbin_bytes: bytes) -> bytes:
    """An ELF64 shared object of sections .text, .nv_fatbin and .shstrtab (no program code runs:
    pre-flight reads section headers, never executes)."""
    names = b"\0.text\0.nv_fatbin\0.shstrtab\0"
    text = b"\xc3" * 16  # ret
    body = [text, fatbin_bytes.ljust(-(-len(fatbin_bytes) // 8) * 8, b"\0"), names]
    offsets, at = [], 64
    for part in body:
        offsets.append(at)
        at += len(part) + (-len(part) % 8)
    shoff = at
    blob = b"".join(part + bytes(-len(part) % 8) for part in body)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header = ident + struct.pack(
        "<HHIQQQIHHHHHH", 3, EM_X86_64, 1, 0, 0, shoff, 0, 64, 56, 0, 64, 4, 3
    )

    def section(name: int, kind: int, flags: int, index: int, align: int) -> bytes:
        return struct.pack(
            "<IIQQQQIIQQ", name, kind, flags, 0, offsets[index], len(body[index]), 0, 0, align, 0
        )

    table = bytes(64) + section(1, 1, 6, 0, 16) + section(7, 1, 2, 1, 8) + section(18, 3, 0, 2, 1)
    return header + blob + table


def image_layer(sample: Sample) -> bytes:
    return tar_layer({LIBRARY: shared_library(fatbin(sample.sass, sample.ptx))})


def push_samples(host: str) -> list[str]:
    """Push every sample to the registry at `host`; returns their references (idempotent)."""
    return [push_image(host, f"{REPOSITORY}/{s.name}", TAG, [image_layer(s)]) for s in SAMPLES]


def served(host: str) -> bool:
    """Whether the registry at `host` answers every sample's manifest (make run waits on it)."""
    http = urllib3.PoolManager(timeout=2, retries=False)
    try:
        return all(
            http.request("HEAD", f"http://{host}/v2/{REPOSITORY}/{s.name}/manifests/{TAG}").status
            == 200
            for s in SAMPLES
        )
    except urllib3.exceptions.HTTPError:
        return False
