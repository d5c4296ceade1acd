"""Driver-assumption probe: does cuGetProcAddress hand out the driver's exported symbols?

The core's cuGetProcAddress hook (nodeagent/native/src/core.c, lookup.c tr_hook_substitute)
finds the hook for what the real driver returned by comparing that pointer with the dlsym
addresses of the variants hooks.def lists for the base name; a pointer it cannot match is
refused. So if a driver returned anything else (an internal entry, a trampoline), every hooked
lookup would be refused and the CUDA runtime, and PyTorch with it, would break.

This probe checks that assumption against whatever libcuda.so.1 the loader finds (ctypes only,
no preload): for every CUDA base name in hooks.def it asks cuGetProcAddress_v2 (else
cuGetProcAddress) at the driver's own version with flags 0 (default stream) and 2 (per-thread
default stream), and checks the pointer is the dlsym address of one of the listed variants.

    proc_address_probe.py [--hooks PATH]

Prints "key: value" lines (one "proc_address.<base>" per base name, then the summary
"proc_address_identity: MATCHED/TOTAL", "proc_address_mismatches" and "proc_address_absent").
A base name the driver does not have is reported as absent, not counted. Exit status: 0 if
every present base name matched, 1 if one did not, 2 if the driver could not be queried.
"""

from __future__ import annotations

import argparse
import ctypes
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOOKS_DEF = ROOT / "nodeagent" / "native" / "src" / "hooks.def"
HOOK_LINE = re.compile(r"^HOOK\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*\)", re.MULTILINE)
FLAGS = {"default": 0, "ptds": 2}  # CU_GET_PROC_ADDRESS_DEFAULT, _PER_THREAD_DEFAULT_STREAM
CUDA_ERROR_NOT_FOUND = 500


class DlInfo(ctypes.Structure):
    _fields_ = (
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    )


def read_hooks(path: Path) -> dict[str, list[str]]:
    """CUDA base name -> the variant symbols hooks.def lists for it (NVML is not looked up)."""
    variants: dict[str, list[str]] = defaultdict(list)
    for family, symbol, base in HOOK_LINE.findall(path.read_text()):
        if family != "NVML":
            variants[base].append(symbol)
    return dict(variants)


def exported(lib: ctypes.CDLL, name: str) -> int | None:
    """The dlsym address of name in lib, or None."""
    try:
        return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    except AttributeError:
        return None


def symbol_at(address: int) -> str:
    """What dladdr says lives at address: an exported name, or where it is."""
    info = DlInfo()
    try:
        dladdr = ctypes.CDLL(None).dladdr
    except AttributeError:  # glibc < 2.34 keeps it in libdl
        dladdr = ctypes.CDLL("libdl.so.2").dladdr
    if not dladdr(ctypes.c_void_p(address), ctypes.byref(info)):
        return f"{address:#x} (in no loaded object)"
    if info.dli_sname and info.dli_saddr == address:
        return info.dli_sname.decode()
    where = (info.dli_fname or b"?").decode()
    return f"{address:#x} (not an exported symbol; in {where})"


class Driver:
    """libcuda.so.1 as a program without the core sees it."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.version = 0
        self.v2 = exported(self.lib, "cuGetProcAddress_v2") is not None
        gpa = self.lib.cuGetProcAddress_v2 if self.v2 else self.lib.cuGetProcAddress
        gpa.restype = ctypes.c_int
        extra = [ctypes.POINTER(ctypes.c_int)] if self.v2 else []
        gpa.argtypes = [
            ctypes.c_char_p,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_int,
            ctypes.c_uint64,
            *extra,
        ]
        self.gpa = gpa

    def start(self) -> str | None:
        """cuInit and cuDriverGetVersion; an error text if either failed."""
        r = self.lib.cuInit(0)
        if r != 0:
            return f"cuInit(0) returned {r}"
        v = ctypes.c_int()
        r = self.lib.cuDriverGetVersion(ctypes.byref(v))
        if r != 0:
            return f"cuDriverGetVersion returned {r}"
        self.version = v.value
        return None

    def proc_address(self, base: str, flags: int) -> tuple[int, int | None]:
        """(CUresult, pointer) from cuGetProcAddress[_v2] at the driver's own version."""
        fn = ctypes.c_void_p()
        args = [base.encode(), ctypes.byref(fn), self.version, flags]
        if self.v2:
            args.append(ctypes.byref(ctypes.c_int()))
        return self.gpa(*args), fn.value


def probe_base(
    drv: Driver, base: str, names: list[str], others: tuple[str, ...] = ()
) -> tuple[str, str]:
    """(outcome, detail): outcome is "mismatch" if a pointer is not a listed variant's (or the
    lookup failed otherwise), else "absent" if the driver lacks the name, else "ok".

    others: hooked symbols listed under other base names. The core matches by pointer across
    the whole list, because a driver may answer a base name with an entry point of another one
    (CUDA 12 answers "cuGraphInstantiate" with cuGraphInstantiateWithFlags)."""
    listed: dict[int, str] = {}
    for n in (*names, *others):  # a driver may export two names at one address: show both
        if (addr := exported(drv.lib, n)) is not None:
            listed[addr] = f"{listed[addr]}|{n}" if addr in listed else n
    parts, seen = [], set()
    for label, flags in FLAGS.items():
        r, ptr = drv.proc_address(base, flags)
        if r == CUDA_ERROR_NOT_FOUND or (r == 0 and not ptr):
            parts.append(f"{label}=absent")
            seen.add("absent")
        elif r != 0:
            parts.append(f"{label}=error {r}")
            seen.add("mismatch")
        elif ptr in listed:
            parts.append(f"{label}={listed[ptr]}")
        else:
            parts.append(f"{label}=UNLISTED {symbol_at(ptr)}")
            seen.add("mismatch")
    outcome = next((o for o in ("mismatch", "absent") if o in seen), "ok")
    return outcome, " ".join(parts)


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hooks", type=Path, default=HOOKS_DEF, help="hooks.def to check")
    args = parser.parse_args(argv)
    hooks = read_hooks(args.hooks)
    try:
        drv = Driver()
    except (OSError, AttributeError) as exc:
        _emit(f"proc_address_identity: error (libcuda.so.1: {exc})")
        return 2
    err = drv.start()
    if err:
        _emit(f"proc_address_identity: error ({err})")
        return 2
    gpa = "cuGetProcAddress_v2" if drv.v2 else "cuGetProcAddress"
    _emit(f"proc_address_query: {gpa} cudaVersion={drv.version} hooks={args.hooks}")
    outcomes: dict[str, list[str]] = defaultdict(list)
    for base, names in hooks.items():
        others = tuple(n for b, ns in hooks.items() if b != base for n in ns)
        outcome, detail = probe_base(drv, base, names, others)
        outcomes[outcome].append(base)
        _emit(f"proc_address.{base}: {outcome} {detail} (listed: {','.join(names)})")
    mismatched = outcomes["mismatch"]
    total = len(outcomes["ok"]) + len(mismatched)
    _emit(f"proc_address_identity: {len(outcomes['ok'])}/{total}")
    _emit(f"proc_address_mismatches: {','.join(mismatched) or 'none'}")
    _emit(f"proc_address_absent: {','.join(outcomes['absent']) or 'none'}")
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
