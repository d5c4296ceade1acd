"""The fat binary reader on hand-built containers, and never crashing on hostile bytes."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from portal.preflight.fatbin import FATBIN_MAGIC, elf_sections, gpu_code_of, scan_containers


def entry(kind: int, arch: int, payload: bytes = b"\0" * 16) -> bytes:
    header = struct.pack("<HHIQIIHHI", kind, 0x101, 64, len(payload), 0, 0, 0, 0, arch)
    return header.ljust(64, b"\0") + payload


def container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body


def elf_with_section(name: bytes, content: bytes) -> bytes:
    """A minimal ELF64 LE with a null section, `name` and .shstrtab."""
    strtab = b"\0" + name + b"\0.shstrtab\0"
    data_off = 64
    str_off = data_off + len(content)
    sh_off = str_off + len(strtab)
    header = b"\x7fELF\x02\x01\x01" + b"\0" * 9
    header += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, sh_off, 0, 64, 0, 0, 64, 3, 2)

    def sh(name_off: int, off: int, size: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name_off, 1, 0, 0, off, size, 0, 0, 1, 0)

    sections = sh(0, 0, 0) + sh(1, data_off, len(content)) + sh(len(name) + 2, str_off, len(strtab))
    return header + content + strtab + sections


def test_sass_and_ptx_are_read_from_the_nv_fatbin_section() -> None:
    fat = container(entry(2, 70), entry(2, 80), entry(1, 90))
    elf = elf_with_section(b".nv_fatbin", fat)
    assert elf_sections(elf)[".nv_fatbin"] == (64, len(fat))
    code = gpu_code_of(elf)
    assert (code.sass, code.ptx) == ({70, 80}, {90})


def test_an_embedded_container_is_found_without_the_section() -> None:
    elf = elf_with_section(b".rodata", b"junk" + container(entry(2, 75)) + b"tail")
    assert gpu_code_of(elf).sass == {75}


def test_not_elf_is_no_gpu_code() -> None:
    assert not gpu_code_of(container(entry(2, 70)))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(min_value=0, max_value=3))
def test_hostile_bytes_never_raise(noise: bytes, cut: int) -> None:
    elf = elf_with_section(b".nv_fatbin", container(entry(2, 70)) + noise)
    gpu_code_of(elf[: len(elf) - cut * 7])
    gpu_code_of(b"\x7fELF" + noise)
    scan_containers(struct.pack("<I", FATBIN_MAGIC) + noise)
