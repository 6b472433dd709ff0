"""The CPU backend: run a CUDA C kernel's very source on the CPU, for correctness.

Each CUDA thread runs as a fiber with its own stack; the fibers of a block are
scheduled on one OS thread (so ``__syncthreads()`` is a real barrier and
``__shared__`` arrays are per block) and blocks run in parallel on all cores
(so atomics are real atomics).  See book/appendix/cpu_backend.md.

    mod = cpu.compile_module(source, filename="kernels/x/01_saxpy.cu")
    mod.get_function("saxpy")((blocks, 1, 1), (256, 1, 1), (n, a, x, y))
    with cpu.checking(schedule="shuffle", seed=3, time_limit_s=10):
        ...
"""
from __future__ import annotations

import contextlib
import contextvars
import ctypes
import os
import select
import signal
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

from ..errors import KernelArgumentError, KernelLaunchError
from ..datasheet import ARCHITECTURES
from ..signature import KernelSignature
from . import counters, crashes
from .compiler import Built, build, check_symbol_accessors, load_time_code

__all__ = ["compile_module", "checking", "current_checking", "CpuModule", "CpuFunction", "Checking",
           "MAX_SHARED_BYTES", "PRINTF_BYTES", "SCHEDULES", "DEFAULT_TIME_LIMIT_S", "WAIT_FACTOR", "LaunchCosts", "launch_costs", "counting",
           "LaunchCounters"]

SCHEDULES = ("in_order", "reverse", "shuffle")
#: Dynamic shared memory cap: the most any GPU in the lab's datasheet gives one block
#: (Hopper: 227 KiB after cudaFuncSetAttribute; 48 KiB without). The CPU backend allows up to this.
MAX_SHARED_BYTES = max(a.shared_per_block_kib for a in ARCHITECTURES.values()) * 1024
_MAX_BLOCK = (1024, 1024, 64)
_MAX_GRID = (2**31 - 1, 65535, 65535)
_ERROR_BYTES = 8192


#: How long one launch may compute before the CPU backend stops it (seconds of CPU time
#: of its busiest thread): about 20 times the longest launch of the book's chapters at their
#: check sizes (1.5 s on a 2-core machine), short enough that a kernel that never ends gets an
#: answer. CPU time, not the clock: on a loaded machine a launch that waits for a core is not
#: stopped for the wait (a thread's CPU time grows as the clock does while it has a core).
DEFAULT_TIME_LIMIT_S = 30.0
#: A launch that waits instead of computing uses no CPU time: it is stopped once this many times
#: its time limit has passed on the clock (as the grader's sandbox does, gpulab.sandbox.WALL_FACTOR).
WAIT_FACTOR = 6
#: Race checking runs an instrumented build one block at a time: its launches get this many times the limit.
RACES_TIME_FACTOR = 4


@dataclass(frozen=True)
class Checking:
    """The checks every CPU-backend launch runs with (see :func:`checking`)."""

    bounds: bool = True
    schedule: str = "in_order"
    seed: int = 0
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S
    races: bool = False


_checking: contextvars.ContextVar[Checking] = contextvars.ContextVar("gpulab_cpu_checking", default=Checking())
_UNSET = object()


def current_checking() -> Checking:
    return _checking.get()


@contextlib.contextmanager
def checking(*, bounds=_UNSET, schedule=_UNSET, seed=_UNSET, time_limit_s=_UNSET, races=_UNSET):
    """Run the launches inside the ``with`` block with these checks; what is
    not given stays as it was (the defaults: bounds on, in-order schedule,
    a 30 s time limit).

    Every launch runs in a worker process, on copies of its arrays in memory
    shared with it, so nothing a kernel does can harm the Python process: a
    crash of the worker is a :class:`~gpulab.errors.KernelLaunchError`.

    bounds: each array's copy ends against an inaccessible page and starts
        after a canary region, so a read or write past its end names the
        kernel, block, thread, array and index, and a write before its start
        is reported after the launch.  The ``__shared__`` arrays of the
        kernel's functions and its dynamic shared memory are laid out the
        same way (a write before the start found when the block ends).
        ``bounds=False`` packs the copies without guards: an overrun then
        gives wrong results or an "invalid memory access", without naming
        the array.
    schedule: the order in which the threads of a block run between barriers:
        "in_order", "reverse" or "shuffle" (seeded random at every step).  A
        correct kernel gives the same result in every order; a missing
        ``__syncthreads()`` usually does not.
    time_limit_s: seconds a launch may compute before it is stopped with an
        error naming the blocks still running (None: no limit): the CPU time
        of its busiest thread, so a busy machine does not stop a launch that
        waited for a core; a launch that computes nothing is stopped after
        ``WAIT_FACTOR`` times as long on the clock.  An interrupt (Ctrl-C,
        Jupyter's stop button) stops a running launch at any time.
    races: report conflicting accesses (at least one a write, not both
        atomic) by two threads to the same word: of shared memory with no
        ``__syncthreads()`` (or, within a warp, ``__syncwarp()``) between
        them, or of global memory from different blocks or with no barrier
        between them.  The launch then fails naming the kernel, the two lines,
        the two threads and the address.  Runs an instrumented build of the
        kernel, blocks one at a time: slower, for checks at small sizes (the
        time limit counts four times over under it).
    """
    current = _checking.get()
    bounds = current.bounds if bounds is _UNSET else bool(bounds)
    schedule = current.schedule if schedule is _UNSET else schedule
    seed = current.seed if seed is _UNSET else int(seed)
    time_limit_s = current.time_limit_s if time_limit_s is _UNSET else time_limit_s
    races = current.races if races is _UNSET else bool(races)
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if time_limit_s is not None:
        if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float)) or not time_limit_s > 0:
            raise ValueError(f"time_limit_s must be a positive number of seconds or None, got {time_limit_s!r}")
        time_limit_s = float(time_limit_s)
    token = _checking.set(Checking(bounds, schedule, seed, time_limit_s, races))
    try:
        yield
    finally:
        _checking.reset(token)


counting = counters.counting
LaunchCounters = counters.LaunchCounters

_modules: dict[tuple, "CpuModule"] = {}
_modules_lock = threading.Lock()


def compile_module(source: str, *, filename: str, include_dirs=(), options=(),
                   instrumented: bool = False) -> "CpuModule":
    """Compile ``source`` (CUDA C, as for NVRTC) for the CPU; cached on disk
    and in this process.  Raises KernelCompileError naming file and line.
    ``instrumented`` builds the variant with counters and race checking (the
    launches of an ordinary module use it by themselves when asked to)."""
    key = (source, filename, tuple(map(str, include_dirs)), tuple(options), bool(instrumented))
    with _modules_lock:
        module = _modules.get(key)
    if module is None:
        module = CpuModule(build(source, filename=filename, include_dirs=include_dirs, options=options,
                                 instrumented=instrumented), filename)
        module._origin = (source, filename, tuple(map(str, include_dirs)), tuple(options))
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
        self.instrumented = built.instrumented
        self._origin = None
        self._twin = None
        # Refused before it is loaded: a module that would run code of its own at load.
        loaded = load_time_code(built.library.read_bytes(), built.instrumented, filename)
        self._lib = ctypes.CDLL(str(built.library))
        start = self._lib.gpulab_launch_start
        start.restype = ctypes.c_void_p
        start.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint),
                          ctypes.POINTER(ctypes.c_uint), ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int,
                          ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_ulonglong, ctypes.c_int,
                          ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                          ctypes.c_uint, ctypes.POINTER(ctypes.c_uint), ctypes.c_char_p, ctypes.c_size_t]
        self._start = start
        self._pid = self._lib.gpulab_launch_pid
        self._pid.restype, self._pid.argtypes = ctypes.c_int, [ctypes.c_void_p]
        self._progress = self._lib.gpulab_launch_progress
        self._progress.restype = None
        self._progress.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        self._printed = self._lib.gpulab_launch_printed
        self._printed.restype = ctypes.c_ulonglong
        self._printed.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
        self._run_cpu_ns = self._lib.gpulab_launch_run_cpu_ns
        self._run_cpu_ns.restype, self._run_cpu_ns.argtypes = ctypes.c_longlong, [ctypes.c_void_p]
        self._finish = self._lib.gpulab_launch_finish
        self._finish.restype = ctypes.c_int
        self._finish.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                                 ctypes.c_void_p, ctypes.c_size_t]
        counts_bytes = self._lib.gpulab_counts_bytes
        counts_bytes.restype = ctypes.c_size_t
        self.counts_bytes = counts_bytes()
        # The variables' bytes travel back from the worker process after each launch.
        addresses, sizes = [], []
        for name in self.symbols:
            accessor = getattr(self._lib, f"gpulab_symbol_{name}")
            accessor.restype = ctypes.c_void_p
            size = ctypes.c_size_t()
            addresses.append(accessor(ctypes.byref(size)))
            sizes.append(size.value)
        if loaded is not None and self.symbols:
            base = ctypes.cast(self._lib.gpulab_counts_bytes, ctypes.c_void_p).value \
                - loaded.symbols["gpulab_counts_bytes"].value
            check_symbol_accessors(loaded, base, dict(zip(self.symbols, zip(addresses, sizes))), filename)
        n = max(len(addresses), 1)
        self._symbol_addresses = (ctypes.c_void_p * n)(*addresses)
        self._symbol_sizes = (ctypes.c_size_t * n)(*sizes)
        self._symbol_constant = (ctypes.c_int * n)(*[int(name in built.constants) for name in self.symbols])
        self._functions: dict[str, CpuFunction] = {}

    def instrumented_twin(self) -> "CpuModule":
        """The same source built with counters and race checking."""
        if self.instrumented:
            return self
        if self._twin is None:
            source, filename, include_dirs, options = self._origin
            self._twin = compile_module(source, filename=filename, include_dirs=include_dirs, options=options,
                                        instrumented=True)
        return self._twin

    def _copy_symbols(self, source: "CpuModule") -> None:
        for name in self.symbols:
            self.get_global(name)[:] = source.get_global(name)

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
        self.signature.check_clusters(grid)
        settings = _checking.get()
        collector = counters.active()
        if (settings.races or collector is not None) and not self.module.instrumented:
            twin = self.module.instrumented_twin()
            twin._copy_symbols(self.module)
            try:
                twin.get_function(self.name)(grid, block, args, shared_mem)
            finally:
                self.module._copy_symbols(twin)
            return
        self._launch(grid, block, args, shared_mem, settings, collector)

    def _launch(self, grid, block, args, shared_mem, settings, collector) -> None:
        params = self.signature.params
        args = tuple(args)
        if len(args) != len(params):
            raise KernelArgumentError(
                f"kernel '{self.name}' takes {len(params)} arguments "
                f"({', '.join(p.name for p in params)}), got {len(args)}")

        # Every argument's bytes live in one slot of this buffer, 16 bytes (128 for a tensor
        # map) aligned as large, so vector values (float4, double2) and the 128-byte aligned
        # CUtensorMap are aligned as the kernel assumes.
        offsets, end = [], 0
        for p in params:
            size = 16 if p.is_pointer else max(16, p.dtype.itemsize)
            end = -(-end // size) * size
            offsets.append(end)
            end += size
        storage = np.zeros(end + 128, dtype=np.uint8)
        base = (-storage.ctypes.data) % 128
        addresses, keep, guarded = [], [], []
        for i, (param, value) in enumerate(zip(params, args)):
            slot = base + offsets[i]
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

        n = len(guarded)
        names = [g[3].encode() for g in guarded]
        arg_index = (ctypes.c_int * max(n, 1))(*[g[0] for g in guarded])
        nbytes = (ctypes.c_size_t * max(n, 1))(*[g[1] for g in guarded])
        itemsize = (ctypes.c_size_t * max(n, 1))(*[g[2] for g in guarded])
        name_ptrs = (ctypes.c_char_p * max(n, 1))(*names)
        writable = (ctypes.c_int * max(n, 1))(*[int(g[4]) for g in guarded])
        arg_ptrs = (ctypes.c_void_p * max(len(addresses), 1))(*addresses)
        module = self.module
        limit = settings.time_limit_s
        if limit is not None and settings.races:
            limit *= RACES_TIME_FACTOR  # the instrumented build, one block at a time
        error = ctypes.create_string_buffer(_ERROR_BYTES)
        # 1: the counters (only when a counting() collects them), 2: race checking
        instrument = ((1 if collector is not None or not settings.races else 0)
                      | (2 if settings.races else 0)) if module.instrumented else 0
        record = ctypes.create_string_buffer(module.counts_bytes) if instrument else None
        before = os.times()
        handle = module._start(
            self._thunk, self._name_bytes, (ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block),
            shared_mem, ctypes.cast(arg_ptrs, ctypes.c_void_p), len(addresses), n,
            ctypes.cast(arg_index, ctypes.c_void_p), ctypes.cast(nbytes, ctypes.c_void_p),
            ctypes.cast(itemsize, ctypes.c_void_p), ctypes.cast(name_ptrs, ctypes.c_void_p),
            ctypes.cast(writable, ctypes.c_void_p), int(settings.bounds), SCHEDULES.index(settings.schedule),
            settings.seed & (2**64 - 1), 1 if settings.races else _worker_count(), len(module.symbols),
            ctypes.cast(module._symbol_addresses, ctypes.c_void_p),
            ctypes.cast(module._symbol_sizes, ctypes.c_void_p),
            ctypes.cast(module._symbol_constant, ctypes.c_void_p), instrument,
            0 if limit is None else int(limit * WAIT_FACTOR) + 10, (ctypes.c_uint * 3)(*self.signature.cluster),
            error, _ERROR_BYTES)
        if not handle:
            raise KernelLaunchError(error.value.decode(errors="replace"))
        stopped, status = None, _UNKNOWN
        try:
            status = _wait(module._pid(handle), limit)
            if status == _COMPUTED:
                stopped = self._stopped(handle, f"did not finish within the time limit of {limit:g} s (CPU "
                                                "time of its busiest thread)", grid, block)
            elif status == _WAITED:
                stopped = self._stopped(handle, f"did not finish within {limit * WAIT_FACTOR:g} s on the clock "
                                                f"({WAIT_FACTOR} times its time limit of {limit:g} s) while "
                                                "computing less than the limit: it was waiting", grid, block)
        except BaseException as exc:  # KeyboardInterrupt: the launch stops, the interrupt goes on
            stopped = self._stopped(handle, "was interrupted", grid, block)
            if hasattr(exc, "add_note"):
                exc.add_note(stopped)
            raise
        finally:
            kernel_ns = module._run_cpu_ns(handle)
            self._print_output(handle)
            failed = module._finish(handle, 0 if stopped is None else 1,
                                    -1 if stopped is not None or status in (_COMPUTED, _WAITED) else status,
                                    error, _ERROR_BYTES, record, 0 if record is None else len(record))
            del keep
            _costs.add(before, os.times(), kernel_ns)
        if stopped is not None:
            raise KernelLaunchError(stopped)
        if failed == _DIED:
            raise KernelLaunchError(crashes.worker_died(self.name, status, error.value.decode(errors="replace"),
                                                        settings.bounds))
        if failed:
            raise KernelLaunchError(error.value.decode(errors="replace"))
        if record is not None:
            result = counters.read(record, self, grid, block, names=[g[3] for g in guarded])
            if collector is not None:
                collector.add(result)
            if settings.races and result.races:
                raise KernelLaunchError(result.race_report())

    def _print_output(self, handle) -> None:
        """Print what the launch's kernel printed (after the launch, as a GPU
        does): at most the last PRINTF_BYTES, after a line saying how much
        went, as a GPU's printf buffer keeps only its latest output."""
        text, capacity = ctypes.c_void_p(), ctypes.c_size_t()
        total = self.module._printed(handle, ctypes.byref(text), ctypes.byref(capacity))
        if not total or not text.value:
            return
        size = capacity.value
        if total <= size:
            data = ctypes.string_at(text.value, total)
        else:
            start = total % size
            data = ctypes.string_at(text.value + start, size - start) + ctypes.string_at(text.value, start)
            data = data[data.find(b"\n") + 1:]   # from the first whole line
            data = truncated_printf_line(self.name, total, total - len(data)).encode() + data
        sys.stdout.write(data.decode(errors="replace"))
        sys.stdout.flush()

    def _stopped(self, handle, what: str, grid, block) -> str:
        """Stop a running launch's worker process; the message saying where it was."""
        pid = self.module._pid(handle)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        where = ctypes.create_string_buffer(2048)
        self.module._progress(handle, where, len(where))
        return (f"kernel '{self.name}' (grid {grid}, block {block}) {what} on the CPU backend and was "
                f"stopped: {where.value.decode(errors='replace')}. A loop that never ends is the usual "
                "cause; gpulab.cpu.checking(time_limit_s=...) sets the limit")

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


#: The most printf output one launch shows (the size of the CPU backend's
#: buffer, that of a GPU's by default: cudaLimitPrintfFifoSize, 1 MiB).
PRINTF_BYTES = 1 << 20


def truncated_printf_line(kernel: str, total: int, dropped: int) -> str:
    return (f"[gpulab: printf output truncated: kernel '{kernel}' printed {total:,} bytes in this launch; "
            f"the first {dropped:,} are dropped and the rest shown: a launch keeps at most "
            f"{PRINTF_BYTES // 2**20} MiB of printf output, the latest, as a GPU's printf buffer does "
            "(cudaLimitPrintfFifoSize, 1 MiB by default)]\n")


_UNKNOWN = -1
#: What :func:`_wait` answers when the launch reached its time limit (CPU time), or waited out
#: ``WAIT_FACTOR`` times it on the clock, before it ended.
_COMPUTED, _WAITED = "computed past the limit", "waited past the limit"
_DIED = 2   # gpulab_launch_finish: the worker process died


@dataclass(frozen=True)
class LaunchCosts:
    """CPU time of the CPU backend's launches in this process so far: ``cpu_s``
    in all (this process and the worker processes, copies and fork included),
    ``kernel_cpu_s`` of it running the kernels' blocks.  The difference is
    what running each launch in its own process costs."""

    launches: int = 0
    cpu_s: float = 0.0
    kernel_cpu_s: float = 0.0

    def __sub__(self, other: "LaunchCosts") -> "LaunchCosts":
        return LaunchCosts(self.launches - other.launches, self.cpu_s - other.cpu_s,
                           self.kernel_cpu_s - other.kernel_cpu_s)

    @property
    def overhead(self) -> float:
        """The share of ``cpu_s`` not spent running blocks."""
        return (self.cpu_s - self.kernel_cpu_s) / self.cpu_s if self.cpu_s > 0 else 0.0


class _Costs:
    def __init__(self):
        self._lock = threading.Lock()
        self._total = LaunchCosts()

    def add(self, before, after, kernel_ns: int) -> None:
        spent = sum(getattr(after, f) - getattr(before, f)
                    for f in ("user", "system", "children_user", "children_system"))
        with self._lock:
            t = self._total
            self._total = LaunchCosts(t.launches + 1, t.cpu_s + spent, t.kernel_cpu_s + kernel_ns / 1e9)

    def snapshot(self) -> LaunchCosts:
        with self._lock:
            return self._total


_costs = _Costs()


def launch_costs() -> LaunchCosts:
    """The CPU time of this process's CPU-backend launches so far (see LaunchCosts)."""
    return _costs.snapshot()


_TICK_S = 1 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def _busiest_thread_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) of the busiest live thread of process ``pid``, from Linux's
    /proc; None where that cannot be read."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    busiest = 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue                      # a thread that has just ended
        busiest = max(busiest, int(fields[11]) + int(fields[12]))   # utime, stime
    return busiest * _TICK_S


def _wait(pid: int, limit: float | None):
    """Wait for the worker process ``pid``; its wait status, ``_UNKNOWN`` if
    someone else reaped it, ``_COMPUTED`` once its busiest thread has used
    ``limit`` seconds of CPU time, or ``_WAITED`` once ``WAIT_FACTOR * limit``
    seconds have passed on the clock (without /proc, the clock stands in for
    the CPU time, which never runs faster).  An interrupt raises
    KeyboardInterrupt here, with the process still running."""
    started = time.monotonic()
    pidfd = None
    if hasattr(os, "pidfd_open"):
        with contextlib.suppress(OSError):
            pidfd = os.pidfd_open(pid)
    try:
        pause = 0.0005
        while True:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return _UNKNOWN
            if done:
                return status
            left = None
            if limit is not None:
                elapsed = time.monotonic() - started
                if elapsed >= limit * WAIT_FACTOR:
                    return _WAITED
                used = _busiest_thread_cpu_s(pid)
                used = elapsed if used is None else used
                if used >= limit:
                    return _COMPUTED
                # A thread's CPU time grows no faster than the clock: the limit cannot be reached
                # sooner than this (at least a tick later, the resolution of /proc's counts).
                left = max(min(limit - used, limit * WAIT_FACTOR - elapsed), _TICK_S)
            if pidfd is not None:
                select.select([pidfd], [], [], left)
            else:
                time.sleep(pause if left is None else min(pause, left))
                pause = min(pause * 2, 0.05)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _worker_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
