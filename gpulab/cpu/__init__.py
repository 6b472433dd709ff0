"""The CPU backend: run a CUDA C kernel's very source on the CPU, for correctness.

Each CUDA thread runs as a fiber with its own stack; the fibers of a block are
scheduled on one OS thread (so ``__syncthreads()`` is a real barrier and
``__shared__`` arrays are per block) and blocks run in parallel on all cores
(so atomics are real atomics).  See book/appendix/cpu_backend.md.

    mod = cpu.compile_module(source, filename="kernels/x/01_saxpy.cu")
    mod.get_function("saxpy")((blocks, 1, 1), (256, 1, 1), (n, a, x, y))
    with cpu.checking(bounds=True, schedule="shuffle", seed=3):
        ...
"""
from __future__ import annotations

import contextlib
import contextvars
import ctypes
import os
import threading
from dataclasses import dataclass

import numpy as np

from ..errors import KernelArgumentError, KernelLaunchError
from ..datasheet import ARCHITECTURES
from ..signature import KernelSignature
from .compiler import Built, build

__all__ = ["compile_module", "checking", "current_checking", "CpuModule", "CpuFunction", "Checking",
           "MAX_SHARED_BYTES", "SCHEDULES"]

SCHEDULES = ("in_order", "reverse", "shuffle")
#: Dynamic shared memory cap: the most any GPU in the lab's datasheet gives one block
#: (Hopper: 227 KiB after cudaFuncSetAttribute; 48 KiB without). The CPU backend allows up to this.
MAX_SHARED_BYTES = max(a.shared_per_block_kib for a in ARCHITECTURES.values()) * 1024
_MAX_BLOCK = (1024, 1024, 64)
_MAX_GRID = (2**31 - 1, 65535, 65535)
_ERROR_BYTES = 8192


@dataclass(frozen=True)
class Checking:
    bounds: bool = False
    schedule: str = "in_order"
    seed: int = 0


_checking: contextvars.ContextVar[Checking] = contextvars.ContextVar("gpulab_cpu_checking", default=Checking())


def current_checking() -> Checking:
    return _checking.get()


@contextlib.contextmanager
def checking(*, bounds: bool = False, schedule: str = "in_order", seed: int = 0):
    """Run the launches inside the ``with`` block with extra checks.

    bounds: copy every array argument next to an inaccessible page, so that a
        read or write past its end (or before its start) names the kernel,
        block, thread, array and index.
    schedule: the order in which the threads of a block run between barriers:
        "in_order", "reverse" or "shuffle" (seeded random at every step).  A
        correct kernel gives the same result in every order; a missing
        ``__syncthreads()`` usually does not.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    token = _checking.set(Checking(bool(bounds), schedule, int(seed)))
    try:
        yield
    finally:
        _checking.reset(token)


_modules: dict[tuple, "CpuModule"] = {}
_modules_lock = threading.Lock()


def compile_module(source: str, *, filename: str, include_dirs=(), options=()) -> "CpuModule":
    """Compile ``source`` (CUDA C, as for NVRTC) for the CPU; cached on disk
    and in this process.  Raises KernelCompileError naming file and line."""
    key = (source, filename, tuple(map(str, include_dirs)), tuple(options))
    with _modules_lock:
        module = _modules.get(key)
    if module is None:
        module = CpuModule(build(source, filename=filename, include_dirs=include_dirs, options=options),
                           filename)
        with _modules_lock:
            _modules[key] = module
    return module


class CpuModule:
    """A compiled source: its kernels and its global variables."""

    def __init__(self, built: Built, filename: str):
        self.filename = filename
        self.path = built.library
        self.signatures = built.kernels
        self.symbols = built.symbols
        self._lib = ctypes.CDLL(str(built.library))
        launch = self._lib.gpulab_launch
        launch.restype = ctypes.c_int
        launch.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint),
                           ctypes.POINTER(ctypes.c_uint), ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int,
                           ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_void_p, ctypes.c_int, ctypes.c_ulonglong, ctypes.c_int,
                           ctypes.c_char_p, ctypes.c_size_t]
        self._launch = launch
        self._functions: dict[str, CpuFunction] = {}

    @property
    def kernel_names(self) -> list[str]:
        return list(self.signatures)

    def get_function(self, name: str) -> "CpuFunction":
        if name not in self.signatures:
            known = ", ".join(self.signatures) or "none"
            raise KernelArgumentError(
                f"{self.filename} has no __global__ kernel named '{name}' (its kernels: {known})")
        if name not in self._functions:
            thunk = ctypes.cast(getattr(self._lib, f"gpulab_thunk_{name}"), ctypes.c_void_p).value
            self._functions[name] = CpuFunction(self, self.signatures[name], thunk)
        return self._functions[name]

    def get_global(self, name: str) -> np.ndarray:
        """A writable uint8 view of exactly the bytes of a ``__constant__`` or
        ``__device__`` variable: ``view[:] = host.view(np.uint8).ravel()``."""
        if name not in self.symbols:
            known = ", ".join(self.symbols) or "none"
            raise KernelArgumentError(
                f"{self.filename} has no __constant__ or __device__ variable named '{name}' "
                f"(its variables: {known})")
        accessor = getattr(self._lib, f"gpulab_symbol_{name}")
        accessor.restype = ctypes.c_void_p
        size = ctypes.c_size_t()
        address = accessor(ctypes.byref(size))
        view = np.ctypeslib.as_array((ctypes.c_uint8 * size.value).from_address(address))
        view.flags.writeable = True
        return view


def _dims(value, what: str) -> tuple[int, int, int]:
    if isinstance(value, (int, np.integer)):
        value = (value,)
    try:
        dims = tuple(int(v) for v in value)
    except TypeError:
        raise KernelArgumentError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}") from None
    if not 1 <= len(dims) <= 3:
        raise KernelArgumentError(f"{what} must have 1 to 3 dimensions, got {value!r}")
    return dims + (1,) * (3 - len(dims))


def _check_config(grid, block, shared_mem) -> None:
    if any(g < 1 for g in grid):
        raise KernelArgumentError(f"grid {grid} has a zero or negative dimension: nothing would run")
    if any(b < 1 for b in block):
        raise KernelArgumentError(f"block {block} has a zero or negative dimension")
    for axis, size, limit in zip("xyz", block, _MAX_BLOCK):
        if size > limit:
            raise KernelArgumentError(f"block {block}: blockDim.{axis} = {size} exceeds the limit of {limit}")
    if block[0] * block[1] * block[2] > 1024:
        raise KernelArgumentError(
            f"block {block} has {block[0] * block[1] * block[2]} threads; a block holds at most 1024")
    for axis, size, limit in zip("xyz", grid, _MAX_GRID):
        if size > limit:
            raise KernelArgumentError(f"grid {grid}: gridDim.{axis} = {size} exceeds the limit of {limit}")
    if not 0 <= shared_mem <= MAX_SHARED_BYTES:
        raise KernelArgumentError(
            f"shared_mem = {shared_mem} bytes: dynamic shared memory must be between 0 and "
            f"{MAX_SHARED_BYTES} bytes ({MAX_SHARED_BYTES // 1024} KiB, the most an H100 block may have; "
            "a GPU gives 48 KiB unless the kernel opts in to more)")


class CpuFunction:
    """One kernel; call it like a CuPy RawKernel: ``fn(grid, block, args, shared_mem=0)``."""

    def __init__(self, module: CpuModule, signature: KernelSignature, thunk: int):
        self.module = module
        self.signature = signature
        self.name = signature.name
        self._thunk = thunk
        self._name_bytes = signature.name.encode()

    def __call__(self, grid, block, args, shared_mem: int = 0) -> None:
        grid, block = _dims(grid, "grid"), _dims(block, "block")
        shared_mem = int(shared_mem)
        _check_config(grid, block, shared_mem)
        params = self.signature.params
        args = tuple(args)
        if len(args) != len(params):
            raise KernelArgumentError(
                f"kernel '{self.name}' takes {len(params)} arguments "
                f"({', '.join(p.name for p in params)}), got {len(args)}")

        # Every argument's bytes live in one 16-byte slot of this buffer, so
        # vector values (float4, double2) are aligned as the kernel assumes.
        storage = np.zeros(16 * (len(params) + 1), dtype=np.uint8)
        base = (-storage.ctypes.data) % 16
        addresses, keep, guarded = [], [], []
        for i, (param, value) in enumerate(zip(params, args)):
            slot = base + 16 * i
            if param.is_pointer:
                array = self._array_argument(param, value)
                keep.append(array)
                storage[slot:slot + 8] = np.array([array.ctypes.data], dtype=np.uint64).view(np.uint8)
                guarded.append((i, array.nbytes, param.dtype.itemsize * param.lanes, param.name,
                                not param.is_const))
            else:
                raw = self._value_argument(param, value)
                storage[slot:slot + len(raw)] = np.frombuffer(raw, dtype=np.uint8)
            addresses.append(storage.ctypes.data + slot)

        settings = _checking.get()
        if not settings.bounds:
            guarded = []
        n = len(guarded)
        names = [g[3].encode() for g in guarded]
        arg_index = (ctypes.c_int * max(n, 1))(*[g[0] for g in guarded])
        nbytes = (ctypes.c_size_t * max(n, 1))(*[g[1] for g in guarded])
        itemsize = (ctypes.c_size_t * max(n, 1))(*[g[2] for g in guarded])
        name_ptrs = (ctypes.c_char_p * max(n, 1))(*names)
        writable = (ctypes.c_int * max(n, 1))(*[int(g[4]) for g in guarded])
        arg_ptrs = (ctypes.c_void_p * max(len(addresses), 1))(*addresses)
        error = ctypes.create_string_buffer(_ERROR_BYTES)
        status = self.module._launch(
            self._thunk, self._name_bytes, (ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block),
            shared_mem, ctypes.cast(arg_ptrs, ctypes.c_void_p), len(addresses), n,
            ctypes.cast(arg_index, ctypes.c_void_p), ctypes.cast(nbytes, ctypes.c_void_p),
            ctypes.cast(itemsize, ctypes.c_void_p), ctypes.cast(name_ptrs, ctypes.c_void_p),
            ctypes.cast(writable, ctypes.c_void_p), SCHEDULES.index(settings.schedule),
            settings.seed & (2**64 - 1), _worker_count(), error, _ERROR_BYTES)
        del keep
        if status:
            raise KernelLaunchError(error.value.decode(errors="replace"))

    def _array_argument(self, param, value) -> np.ndarray:
        if not isinstance(value, np.ndarray):
            raise KernelArgumentError(
                f"kernel '{self.name}': argument {param.describe()} got {type(value).__name__}; "
                "pass a NumPy array")
        if value.dtype != param.dtype:
            raise KernelArgumentError(
                f"kernel '{self.name}': argument {param.describe()} got a {value.dtype} array")
        if not value.flags.c_contiguous:
            raise KernelArgumentError(
                f"kernel '{self.name}': argument '{param.name}' is not C-contiguous; "
                "pass np.ascontiguousarray(...)")
        if value.size % param.lanes:
            raise KernelArgumentError(
                f"kernel '{self.name}': argument {param.describe()} needs a multiple of "
                f"{param.lanes} elements ({param.ctype}), got {value.size}")
        return value

    def _value_argument(self, param, value) -> bytes:
        if param.lanes > 1:
            if isinstance(value, np.ndarray) and value.dtype == param.dtype and value.size == param.lanes:
                return np.ascontiguousarray(value).tobytes()
            raise KernelArgumentError(
                f"kernel '{self.name}': argument {param.describe()} needs a {param.dtype} array of "
                f"{param.lanes} elements ({param.ctype})")
        if isinstance(value, np.generic) and value.dtype == param.dtype:
            return value.tobytes()
        got = f"a {value.dtype} scalar" if isinstance(value, np.generic) else type(value).__name__
        raise KernelArgumentError(
            f"kernel '{self.name}': argument {param.describe()} got {got}; "
            f"pass np.{param.dtype.name}(...)")


def _worker_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
