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


TAIL_BYTES = 1 << 20  # the end of a file, where `.shstrtab` lies just before the section table
MAX_SECTION_TABLE = 65535 * 64


class FatbinStream:
    """The same answer as `gpu_code_of`, from an ELF file fed in order in chunks, in bounded
    memory: a 256 MiB member of a layer once cost 582 MB for one scan.

    Containers are found by their magic as the bytes pass and their entry headers read as they
    arrive (payloads are skipped, never kept). The section header table is copied as it passes
    and the last TAIL_BYTES kept, so at the end the containers inside `.nv_fatbin` are chosen
    when the section names can be read; otherwise every container counts (as `gpu_code_of`
    does for a file without that section). Memory: the chunk, the tail and the section table."""

    def __init__(self) -> None:
        self.base = 0  # absolute offset of buf[0]
        self.buf = b""
        self.offset = 0  # bytes fed so far
        self.cursor = 0  # where the magic search resumes
        self.entry: int | None = None  # next entry header of the open container
        self.start = 0
        self.stop = 0
        self.found: list[tuple[int, GpuCode]] = []
        self.head = b""
        self.sht = b""
        self.tail = b""
        self.layout: tuple[bool, str, int, int, int, int] | None = None

    def feed(self, chunk: bytes) -> None:
        if len(self.head) < 64:
            self.head += chunk[: 64 - len(self.head)]
            if len(self.head) == 64:
                self.layout = _layout(self.head)
        if self.layout is not None:
            _, _, shoff, shentsize, shnum, _ = self.layout
            lo = max(shoff, self.offset)
            hi = min(shoff + shentsize * shnum, self.offset + len(chunk))
            if lo < hi and shentsize * shnum <= MAX_SECTION_TABLE:
                self.sht += chunk[lo - self.offset : hi - self.offset]
        self.tail = (self.tail + chunk)[-TAIL_BYTES:]
        self.buf += chunk
        self.offset += len(chunk)
        self._advance()
        keep = min(self.entry if self.entry is not None else self.cursor, self.offset)
        if keep > self.base:
            self.buf, self.base = self.buf[keep - self.base :], keep

    def _close(self, code: GpuCode) -> None:
        self.found.append((self.start, code))
        self.cursor, self.entry = max(self.stop, self.start + 4), None

    def _advance(self) -> None:
        code = self.found.pop()[1] if self.entry is not None else GpuCode()
        while len(self.found) < MAX_CONTAINERS:
            if self.entry is not None:
                if self.entry + ENTRY_MIN_HEADER > self.stop:
                    self._close(code)
                    continue
                if self.entry + ENTRY_MIN_HEADER > self.offset:
                    break  # wait for the entry header to arrive
                at = self.entry - self.base
                kind, _u, entry_header, entry_size = struct.unpack_from("<HHIQ", self.buf, at)
                (arch,) = struct.unpack_from("<I", self.buf, at + 28)
                if entry_header < ENTRY_MIN_HEADER or kind not in (KIND_PTX, KIND_SASS, 4):
                    self._close(code)
                    continue
                if 10 <= arch < 1000:
                    (code.ptx if kind == KIND_PTX else code.sass).add(arch)
                self.entry += entry_header + entry_size
                continue
            at = self.buf.find(FATBIN_MAGIC_BYTES, max(self.cursor - self.base, 0))
            if at < 0:
                self.cursor = max(self.cursor, self.offset - 3)
                break
            self.cursor = self.base + at
            if self.cursor + 16 > self.offset:
                break
            _magic, _version, header_size, payload = struct.unpack_from("<IHHQ", self.buf, at)
            if header_size < 16:
                self.cursor += 4
                continue
            self.start, code = self.cursor, GpuCode()
            self.entry, self.stop = self.start + header_size, self.start + header_size + payload
        if self.entry is not None:
            self.found.append((self.start, code))  # still open: kept until more bytes arrive

    def result(self) -> GpuCode:
        """What the file carries: the containers in `.nv_fatbin` if known, else all of them."""
        section = self._fatbin_section()
        code = GpuCode()
        for start, found in self.found:
            if section is None or section[0] <= start < section[0] + section[1]:
                code.update(found)
        return code

    def _fatbin_section(self) -> tuple[int, int] | None:
        if self.layout is None:
            return None
        is64, end, _shoff, shentsize, shnum, shstrndx = self.layout
        if len(self.sht) != shentsize * shnum or shstrndx >= shnum:
            return None
        fmt = end + ("IIQQQQ" if is64 else "IIIIII")
        try:
            headers = [
                (h[0], h[4], h[5])
                for h in (struct.unpack_from(fmt, self.sht, i * shentsize) for i in range(shnum))
            ]
        except struct.error:
            return None
        _, str_off, str_size = headers[shstrndx]
        tail_start = self.offset - len(self.tail)
        if str_off < tail_start or str_off + str_size > self.offset:
            return None
        names = self.tail[str_off - tail_start : str_off - tail_start + str_size]
        for name_off, off, size in headers:
            stop = names.find(b"\0", name_off)
            if stop >= 0 and names[name_off:stop] == b".nv_fatbin" and off + size <= self.offset:
                return off, size
        return None


def _layout(head: bytes) -> tuple[bool, str, int, int, int, int] | None:
    """(is64, byte order, section table offset, entry size, count, names index) of an ELF."""
    if not is_elf(head):
        return None
    is64, end = head[4] == 2, "<" if head[5] == 1 else ">"
    if is64:
        (shoff,) = struct.unpack_from(end + "Q", head, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", head, 0x3A)
    else:
        (shoff,) = struct.unpack_from(end + "I", head, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", head, 0x2E)
    if shentsize < (64 if is64 else 40):
        return None
    return is64, end, shoff, shentsize, shnum, shstrndx
