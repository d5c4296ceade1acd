"""SIMULATED PyTorch, TEST-ONLY: the few calls tests/gpu/torch_probe.py makes, on simgpu.

It lets the native tier run the torch half of bench/gpu_check.sh (containers, the FIFO holder,
the parsing of every figure) without a GPU. Like the CUDA runtime under real PyTorch, it finds
driver entry points with cuGetProcAddress_v2, so under the core it gets the core's hooks. It
measures nothing real: every PYTORCH_CUDA_ALLOC_CONF is a plain cuMemAlloc_v2, and a matmul is
one simulated kernel lasting 2·n³ / SIM_TFLOPS.
"""

from __future__ import annotations

import ctypes
import types
from ctypes import POINTER, byref, c_int, c_size_t, c_uint, c_uint64, c_void_p

__version__ = "0.0+simgpu.fake"
version = types.SimpleNamespace(cuda="12.9")
float16, uint8 = 2, 1  # dtypes are their element sizes here
SIM_TFLOPS = 400e12
CUDA_VERSION = 12090
CUDA_ERROR_OUT_OF_MEMORY = 2
_driver: _Driver | None = None


class _Driver:
    """libcuda.so.1, initialised with device 0's primary context current."""

    def __init__(self) -> None:
        lib = ctypes.CDLL("libcuda.so.1")
        gpa = lib.cuGetProcAddress_v2
        gpa.argtypes = [ctypes.c_char_p, POINTER(c_void_p), c_int, c_uint64, POINTER(c_int)]
        self._gpa = gpa
        self._entry: dict[str, ctypes._CFuncPtr] = {}
        self.call("cuInit", [c_uint], 0)
        dev, ctx = c_int(), c_void_p()
        self.call("cuDeviceGet", [POINTER(c_int), c_int], byref(dev), 0)
        self.call("cuDevicePrimaryCtxRetain", [POINTER(c_void_p), c_int], byref(ctx), dev)
        self.call("cuCtxSetCurrent", [c_void_p], ctx)
        mod, self.fn = c_void_p(), c_void_p()
        self.call("cuModuleLoadData", [POINTER(c_void_p), c_void_p], byref(mod), b"matmul")
        self.call(
            "cuModuleGetFunction",
            [POINTER(c_void_p), c_void_p, ctypes.c_char_p],
            byref(self.fn),
            mod,
            b"matmul",
        )

    def status(self, name: str, argtypes: list, *args: object) -> int:
        """The CUresult of calling base name `name` as cuGetProcAddress_v2 hands it out."""
        fn = self._entry.get(name)
        if fn is None:
            ptr, found = c_void_p(), c_int()
            r = self._gpa(name.encode(), byref(ptr), CUDA_VERSION, 0, byref(found))
            if r != 0 or not ptr.value:
                raise RuntimeError(f"CUDA driver: cuGetProcAddress_v2({name}) returned {r}")
            fn = self._entry[name] = ctypes.CFUNCTYPE(c_int, *argtypes)(ptr.value)
        return fn(*args)

    def call(self, name: str, argtypes: list, *args: object) -> None:
        r = self.status(name, argtypes, *args)
        if r == CUDA_ERROR_OUT_OF_MEMORY:
            raise cuda.OutOfMemoryError(f"CUDA out of memory ({name})")
        if r != 0:
            raise RuntimeError(f"CUDA error {r} from {name}")


def _drv() -> _Driver:
    global _driver  # noqa: PLW0603 - lazy initialisation, as torch does it
    if _driver is None:
        _driver = _Driver()
    return _driver


class Tensor:
    def __init__(self, shape: tuple[int, ...], dtype: int) -> None:
        self.shape = shape
        self.ptr = c_uint64()
        size = dtype
        for n in shape:
            size *= n
        _drv().call("cuMemAlloc", [POINTER(c_uint64), c_size_t], byref(self.ptr), size)

    def numel(self) -> int:
        count = 1
        for n in self.shape:
            count *= n
        return count

    def __matmul__(self, other: Tensor) -> Tensor:
        n = self.shape[0]
        duration = c_uint64(int(2 * n**3 / SIM_TFLOPS * 1e9))
        params = (c_void_p * 1)(ctypes.cast(byref(duration), c_void_p))
        argtypes = [c_void_p, *[c_uint] * 7, c_void_p, c_void_p, c_void_p]
        _drv().call("cuLaunchKernel", argtypes, _drv().fn, 1, 1, 1, 1, 1, 1, 0, None, params, None)
        return self


def empty(n: int, dtype: int, device: str) -> Tensor:
    assert device == "cuda"
    return Tensor((n,), dtype)


def randn(n: int, m: int, device: str, dtype: int) -> Tensor:
    assert device == "cuda"
    return Tensor((n, m), dtype)


class _Cuda(types.SimpleNamespace):
    class OutOfMemoryError(RuntimeError):
        pass

    @staticmethod
    def is_available() -> bool:
        try:
            _drv()
        except (OSError, RuntimeError):
            return False
        return True

    @staticmethod
    def mem_get_info() -> tuple[int, int]:
        free, total = c_size_t(), c_size_t()
        _drv().call("cuMemGetInfo", [POINTER(c_size_t)] * 2, byref(free), byref(total))
        return free.value, total.value

    @staticmethod
    def synchronize() -> None:
        _drv().call("cuCtxSynchronize", [])


cuda = _Cuda()
OutOfMemoryError = cuda.OutOfMemoryError
