"""CUDA GPU code in ELF files: `.nv_fatbin` sections and embedded fat binary containers.

Pure byte parsing, nothing is executed or loaded. A fat binary container starts with the magic
0xBA55ED50, a 16-byte header (magic u32, version u16, header size u16, payload size u64) and holds
entries; each entry header carries its kind (1 = PTX, 2 = ELF/SASS cubin) and, at offset 28, the
target architecture as an integer (70 = sm_70 / compute_70). Entry payloads may be compressed; the
headers never are, so the architectures are read without decompressing anything.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

ELF_MAGIC = b"\x7fELF"
FATBIN_MAGIC = 0xBA55ED50
FATBIN_MAGIC_BYTES = struct.pack("<I", FATBIN_MAGIC)
KIND_PTX = 1
KIND_SASS = 2
ENTRY_MIN_HEADER = 32
MAX_CONTAINERS = 10_000


@dataclass
class GpuCode:
    """SASS architectures and PTX targets found, as ints (70 = 7.0)."""

    sass: set[int] = field(default_factory=set)
    ptx: set[int] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.sass or self.ptx)

    def update(self, other: GpuCode) -> None:
        self.sass |= other.sass
        self.ptx |= other.ptx


def is_elf(head: bytes) -> bool:
    return head[:4] == ELF_MAGIC


def elf_sections(data: bytes) -> dict[str, tuple[int, int]]:
    """Section name -> (file offset, size) of a 32/64-bit ELF of either byte order; {} if bad."""
    if len(data) < 52 or not is_elf(data):
        return {}
    is64 = data[4] == 2
    end = "<" if data[5] == 1 else ">"
    try:
        if is64:
            (shoff,) = struct.unpack_from(end + "Q", data, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", data, 0x3A)
        else:
            (shoff,) = struct.unpack_from(end + "I", data, 0x20)
            shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", data, 0x2E)
        if shnum == 0 or shstrndx >= shnum or shoff + shnum * shentsize > len(data):
            return {}
        headers = []
        for i in range(shnum):
            base = shoff + i * shentsize
            if is64:
                name, _t, _f, _a, off, size = struct.unpack_from(end + "IIQQQQ", data, base)
            else:
                name, _t, _f, _a, off, size = struct.unpack_from(end + "IIIIII", data, base)
            headers.append((name, off, size))
        _, str_off, str_size = headers[shstrndx]
        names = data[str_off : str_off + str_size]
    except struct.error:
        return {}
    out = {}
    for name_off, off, size in headers:
        stop = names.find(b"\0", name_off)
        label = names[name_off:stop].decode("ascii", "replace") if stop >= 0 else ""
        if label and off + size <= len(data):
            out[label] = (off, size)
    return out


def read_container(data: bytes, pos: int) -> tuple[GpuCode, int]:
    """Entries of the container at `pos`; returns what they target and where the container ends."""
    code = GpuCode()
    if pos + 16 > len(data):
        return code, len(data)
    magic, _version, header_size, payload = struct.unpack_from("<IHHQ", data, pos)
    if magic != FATBIN_MAGIC or header_size < 16:
        return code, pos + 4
    entry = pos + header_size
    stop = min(len(data), entry + payload)
    while entry + ENTRY_MIN_HEADER <= stop:
        kind, _u, entry_header, entry_size = struct.unpack_from("<HHIQ", data, entry)
        (arch,) = struct.unpack_from("<I", data, entry + 28)
        if entry_header < ENTRY_MIN_HEADER or kind not in (KIND_PTX, KIND_SASS, 4):
            break
        if 10 <= arch < 1000:
            (code.ptx if kind == KIND_PTX else code.sass).add(arch)
        entry += entry_header + entry_size
    return code, max(stop, pos + 4)


def scan_containers(data: bytes, start: int = 0, stop: int | None = None) -> GpuCode:
    """Every fat binary container found by its magic between `start` and `stop`."""
    code = GpuCode()
    pos, stop = start, len(data) if stop is None else stop
    for _ in range(MAX_CONTAINERS):
        pos = data.find(FATBIN_MAGIC_BYTES, pos, stop)
        if pos < 0:
            break
        found, pos = read_container(data[:stop], pos)
        code.update(found)
    return code


def gpu_code_of(data: bytes) -> GpuCode:
    """GPU code in one ELF file: its `.nv_fatbin` section, else containers embedded anywhere
    (statically linked runtimes keep them in `.rodata` or `.nvFatBinSegment`-referenced data)."""
    if not is_elf(data):
        return GpuCode()
    section = elf_sections(data).get(".nv_fatbin")
    if section:
        off, size = section
        return scan_containers(data, off, off + size)
    return scan_containers(data)
