"""What a GPU health event means, after NVIDIA's XID catalogue (pure; no NVML, no Kubernetes).

`classify_xid(xid)` and `classify_ecc(double_bit)` answer with a `Verdict`: FATAL (the device is
lost for every slice on it: drain it, a reset is needed), APPLICATION (one process's own fault:
an illegal address, a page fault, a hung channel; tell that process's pod, the GPU is fine) or
UNKNOWN (not in the table: reported to support, nothing drained). The table follows NVIDIA's
"XID Errors" catalogue (docs.nvidia.com/deploy/xid-errors) and the application XIDs NVIDIA's
own device plugin and DRA driver leave out of device health (13, 31, 43, 45, 68, 109).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Severity(enum.StrEnum):
    FATAL = "fatal"
    APPLICATION = "application"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Verdict:
    severity: Severity
    meaning: str  # NVIDIA's name for it, shown to support and tenants
    taint_value: str = ""  # the device taint's value (a label value) when FATAL


FATAL_XIDS: dict[int, str] = {
    48: "double-bit ECC error",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded (reset needed)",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error (reset needed)",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}

APPLICATION_XIDS: dict[int, str] = {
    13: "graphics engine exception (illegal instruction or address in the program)",
    31: "GPU memory page fault (the program touched memory it does not own)",
    43: "GPU stopped processing (the program's channel was reset)",
    45: "preemptive cleanup after a previous error of the program",
    68: "video decoder exception",
    109: "context switch timeout",
}


def classify_xid(xid: int) -> Verdict:
    """What XID `xid` means for the GPU and its slices."""
    if xid in FATAL_XIDS:
        return Verdict(Severity.FATAL, FATAL_XIDS[xid], f"xid-{xid}")
    if xid in APPLICATION_XIDS:
        return Verdict(Severity.APPLICATION, APPLICATION_XIDS[xid])
    return Verdict(Severity.UNKNOWN, f"XID {xid}, not in the catalogue this agent knows")


def classify_ecc(double_bit: bool) -> Verdict | None:
    """A double-bit (uncorrectable) ECC error loses the device; a single-bit one was corrected
    by the hardware and affects nobody (None: nothing to report)."""
    if double_bit:
        return Verdict(Severity.FATAL, "double-bit ECC error", "ecc-double-bit")
    return None


LOST = Verdict(Severity.FATAL, "GPU stopped answering NVML", "gpu-lost")
