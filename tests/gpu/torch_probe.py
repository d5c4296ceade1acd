"""PyTorch probe for bench/gpu_check.sh, run under the core on a real NVIDIA GPU.

torch_probe.py fill            allocate 256 MiB tensors until one fails;
                               print "filled <bytes> <what stopped it>"
torch_probe.py meminfo         print "meminfo <free> <total>" from torch.cuda.mem_get_info
torch_probe.py hold GIB        allocate GIB GiB, print "held <bytes>" and wait for stdin to
                               close; print "oom" if it does not fit
torch_probe.py matmul SECONDS  fp16 4096^3 matmuls for SECONDS; print "tflops <value>"

It catches torch.cuda.OutOfMemoryError: torch.OutOfMemoryError exists only in recent 2.x releases.
"""

from __future__ import annotations

import sys
import time

import torch

MiB = 1 << 20


def _emit(line: str) -> None:
    """One result line on stdout, flushed at once: the shell script reads it while we run."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def fill() -> None:
    blocks = []
    try:
        while True:
            blocks.append(torch.empty(256 * MiB, dtype=torch.uint8, device="cuda"))
    except RuntimeError as exc:  # OutOfMemoryError is one; any other says the cap misbehaved
        stop = type(exc).__name__
    _emit(f"filled {len(blocks) * 256 * MiB} {stop}")


def hold(gib: float) -> None:
    try:
        x = torch.empty(int(gib * 1024) * MiB, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError:
        _emit("oom")
        return
    _emit(f"held {x.numel()}")
    sys.stdin.read()


def matmul(seconds: float) -> None:
    n = 4096
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    start, count = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        for _ in range(20):
            a @ b
        count += 20
        torch.cuda.synchronize()
    elapsed = time.monotonic() - start
    _emit(f"tflops {2 * n**3 * count / elapsed / 1e12:.2f}")


def main() -> None:
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "fill":
        fill()
    elif cmd == "meminfo":
        free, total = torch.cuda.mem_get_info()
        _emit(f"meminfo {free} {total}")
    elif cmd == "hold":
        hold(float(sys.argv[2]))
    elif cmd == "matmul":
        matmul(float(sys.argv[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
