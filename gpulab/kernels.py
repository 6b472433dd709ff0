"""Compile a kernel file and launch its kernels on the GPU or the CPU backend.

One interface for both, following CuPy's own: ``load_module(path)`` gives a
module whose ``get_function(name)`` returns ``fn(grid, block, args, shared_mem=0)``.
Before a launch reaches either backend, its arguments are checked against the
kernel's signature (count, array vs scalar, dtype) and scalars are converted to
the exact C type, so a mistake is an error that names the parameter instead of
a kernel that silently reads garbage.
"""
from __future__ import annotations

import functools
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from . import cpu, paths
from .cpu import resources
from .device import default_backend, require_gpu
from .errors import KernelArgumentError, KernelCompileError, KernelLaunchError
from .paths import toolkit_include_options
from .signature import KernelSignature, Param, parse_kernels, strip_comments
from .tensormap import TensorMap

#: CUDA's limits on launch shapes (the same on every GPU since compute capability 3.0).
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIM = (1024, 1024, 64)
MAX_GRID_DIM = (2**31 - 1, 65535, 65535)
DEFAULT_SHARED_LIMIT = 48 * 1024


# --------------------------------------------------------------------------- backends
class Backend:
    """Where arrays live and kernels run: ``gpu`` (CuPy) or ``cpu`` (NumPy)."""

    def __init__(self, name: str):
        if name not in ("gpu", "cpu"):
            raise ValueError(f"backend must be 'gpu' or 'cpu', got {name!r}")
        if name == "gpu":
            require_gpu("the 'gpu' backend")
        self.name = name

    @property
    def caption(self) -> str:
        """Where a table or figure computed in this process came from, for its
        caption: live on this GPU, or live on the CPU backend (correctness only)."""
        if self.name == "gpu":
            from .device import describe
            info = describe()
            return f"computed live on {info['gpu']} (CuPy {info['cupy']}, CUDA {info['cuda_runtime']})"
        return "computed live on the CPU backend (g++; correctness only, no GPU timings)"

    @property
    def xp(self):
        """The array module: cupy on the GPU, numpy on the CPU."""
        if self.name == "gpu":
            import cupy
            return cupy
        return np

    def to_device(self, array) -> Any:
        """A copy of ``array`` in the backend's memory (a no-op copy on the CPU)."""
        if self.name == "gpu":
            import cupy
            return cupy.asarray(array)
        return np.array(array, copy=True, order="C")

    def to_host(self, array) -> np.ndarray:
        if self.name == "gpu":
            import cupy
            return cupy.asnumpy(array)
        return np.asarray(array)

    def poisoned(self, shape, dtype=np.float32):
        """An output array filled with NaN (or the dtype's max for integers), so
        elements a kernel forgets to write fail the reference check."""
        dtype = np.dtype(dtype)
        fill = np.nan if dtype.kind in "fc" else np.iinfo(dtype).max
        return self.xp.full(shape, fill, dtype=dtype)

    def synchronize(self) -> None:
        if self.name == "gpu":
            import cupy
            cupy.cuda.get_current_stream().synchronize()

    def is_array(self, value) -> bool:
        if self.name == "gpu":
            import cupy
            return isinstance(value, cupy.ndarray)
        return isinstance(value, np.ndarray)

    def __repr__(self) -> str:
        return f"Backend({self.name!r})"


def get_backend(backend: str | Backend | None = None) -> Backend:
    """``None`` picks the GPU when one is usable, else the CPU backend."""
    if isinstance(backend, Backend):
        return backend
    return Backend(backend or default_backend())


# --------------------------------------------------------------------------- launches
def _dim3(value, what: str) -> tuple[int, int, int]:
    if isinstance(value, (int, np.integer)):
        dims = (int(value),)
    else:
        try:
            if isinstance(value, (str, bytes)):
                raise TypeError
            dims = tuple(int(v) for v in value)
        except (TypeError, ValueError):
            raise KernelArgumentError(f"{what} must be an int or a tuple of 1-3 ints, got {value!r}") from None
    if not 1 <= len(dims) <= 3:
        raise KernelArgumentError(f"{what} must have 1 to 3 dimensions, got {value!r}")
    if any(d < 1 for d in dims):
        raise KernelArgumentError(f"{what} dimensions must all be at least 1, got {value!r}")
    return dims + (1,) * (3 - len(dims))


def check_launch(grid, block, shared_mem: int, shared_limit: int = DEFAULT_SHARED_LIMIT):
    """Normalise and check a launch configuration; return (grid3, block3)."""
    grid3, block3 = _dim3(grid, "grid"), _dim3(block, "block")
    threads = block3[0] * block3[1] * block3[2]
    if threads > MAX_THREADS_PER_BLOCK:
        raise KernelArgumentError(
            f"block {block3} has {threads} threads; a block holds at most {MAX_THREADS_PER_BLOCK}")
    for axis, size, limit in zip("xyz", block3, MAX_BLOCK_DIM):
        if size > limit:
            raise KernelArgumentError(f"block.{axis} = {size} exceeds CUDA's limit of {limit}")
    for axis, size, limit in zip("xyz", grid3, MAX_GRID_DIM):
        if size > limit:
            raise KernelArgumentError(f"grid.{axis} = {size} exceeds CUDA's limit of {limit}")
    if not isinstance(shared_mem, (int, np.integer)) or shared_mem < 0:
        raise KernelArgumentError(f"shared_mem must be a non-negative int of bytes, got {shared_mem!r}")
    if shared_mem > shared_limit:
        raise KernelArgumentError(
            f"shared_mem = {shared_mem} bytes exceeds the {shared_limit}-byte limit for dynamic "
            "shared memory (raise it with Kernel.allow_shared_memory on the GPU)")
    return grid3, block3


def _convert_scalar(param: Param, value, kernel: str, backend: str = "gpu"):
    if param.dtype.kind == "V":   # a struct passed by value: a tensor map (gpulab.tensormap)
        if not isinstance(value, TensorMap):
            raise KernelArgumentError(f"kernel '{kernel}': parameter {param.describe()} got "
                                      f"{type(value).__name__}; pass a gpulab.tensormap.encode_2d(...) map")
        if value.backend != backend:
            raise KernelArgumentError(f"kernel '{kernel}': parameter '{param.name}' got a tensor map made for the "
                                      f"{value.backend} backend (of a {value.backend} array); this kernel runs on "
                                      f"the {backend} backend")
        return value.as_argument()
    if isinstance(value, (np.ndarray,)) or hasattr(value, "__cuda_array_interface__"):
        raise KernelArgumentError(
            f"kernel '{kernel}': parameter {param.describe()} got an array of shape "
            f"{getattr(value, 'shape', '?')}; pass a single number")
    if param.lanes > 1:
        raise KernelArgumentError(f"kernel '{kernel}': vector-typed value parameter {param.describe()} "
                                  "cannot be passed from Python; pass its components as scalars")
    dtype = param.dtype
    if dtype.kind in "iu":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise KernelArgumentError(
                f"kernel '{kernel}': parameter {param.describe()} got {type(value).__name__} {value!r}")
        info = np.iinfo(dtype)
        if not info.min <= int(value) <= info.max:
            raise KernelArgumentError(
                f"kernel '{kernel}': parameter {param.describe()} got {value}, outside "
                f"[{info.min}, {info.max}]")
        return dtype.type(value)
    if dtype.kind == "b":
        return np.bool_(value)
    if not isinstance(value, (int, float, np.integer, np.floating)):
        raise KernelArgumentError(
            f"kernel '{kernel}': parameter {param.describe()} got {type(value).__name__} {value!r}")
    return dtype.type(value)


def _check_array(param: Param, value, backend: Backend, kernel: str):
    if not backend.is_array(value):
        where = "a NumPy array (host memory)" if isinstance(value, np.ndarray) else type(value).__name__
        expected = "a CuPy array in GPU memory (use backend.to_device)" if backend.name == "gpu" \
            else "a NumPy array"
        raise KernelArgumentError(
            f"kernel '{kernel}': parameter {param.describe()} got {where}; the {backend.name} "
            f"backend needs {expected}")
    if value.dtype != param.dtype:
        raise KernelArgumentError(
            f"kernel '{kernel}': parameter {param.describe()} got a {value.dtype} array of shape "
            f"{value.shape}")
    if not value.flags.c_contiguous:
        raise KernelArgumentError(
            f"kernel '{kernel}': parameter '{param.name}' got a non-contiguous array (strides "
            f"{value.strides}); kernels index flat memory, pass xp.ascontiguousarray(...)")
    if param.lanes > 1 and value.size % param.lanes:
        raise KernelArgumentError(
            f"kernel '{kernel}': parameter {param.describe()} is read as {param.ctype}, so its "
            f"size must be a multiple of {param.lanes}; got {value.size} elements")
    return value


class Kernel:
    """A compiled kernel: call it as ``kernel(grid, block, args, shared_mem=0)``."""

    def __init__(self, module: "Module", signature: KernelSignature, raw):
        self.module = module
        self.signature = signature
        self.name = signature.name
        self.raw = raw           # the backend's own callable (cupy.RawKernel on the GPU)
        self.shared_limit = DEFAULT_SHARED_LIMIT

    def convert_args(self, args: Sequence) -> tuple:
        """Check ``args`` against the signature; return them as the backend needs them."""
        params = self.signature.params
        if not isinstance(args, (tuple, list)):
            raise KernelArgumentError(f"kernel '{self.name}': args must be a tuple, got {type(args).__name__}")
        if len(args) != len(params):
            listed = ", ".join(p.declaration for p in params)
            raise KernelArgumentError(
                f"kernel '{self.name}' takes {len(params)} arguments ({listed}); got {len(args)}")
        return tuple(
            _check_array(p, a, self.module.backend, self.name) if p.is_pointer
            else _convert_scalar(p, a, self.name, self.module.backend.name)
            for p, a in zip(params, args))

    def __call__(self, grid, block, args: Sequence, shared_mem: int = 0) -> None:
        grid3, block3 = check_launch(grid, block, shared_mem, self.shared_limit)
        self.signature.check_clusters(grid3)
        converted = self.convert_args(args)
        if self.module.backend.name == "gpu":
            try:
                self.raw(grid3, block3, converted, shared_mem=int(shared_mem))
            except Exception as exc:  # CUDA errors from the launch itself
                raise KernelLaunchError(f"kernel '{self.name}' from {self.module.path} failed to "
                                        f"launch with grid {grid3}, block {block3}: {exc}") from exc
        else:
            self.raw(grid3, block3, converted, shared_mem=int(shared_mem))

    def bind(self, grid, block, args: Sequence, shared_mem: int = 0):
        """Check the launch once and return a no-argument function that repeats
        it: what the timers call, so argument checks stay out of the timed region."""
        grid3, block3 = check_launch(grid, block, shared_mem, self.shared_limit)
        self.signature.check_clusters(grid3)
        converted = self.convert_args(args)
        raw, shared = self.raw, int(shared_mem)

        def launch():
            raw(grid3, block3, converted, shared_mem=shared)
        launch.__name__ = f"launch_{self.name}"
        # A tensor map is converted to its 128 bytes, which hold only its array's address: the
        # launch keeps the arguments themselves (each map keeps its array), so that an array made
        # for the launch alone is not freed, and its memory handed out again, before the launch runs.
        launch.args = tuple(args)
        return launch

    def allow_shared_memory(self, nbytes: int) -> None:
        """Opt in to more than 48 KiB of dynamic shared memory (GPU: sets the
        function attribute, as CUDA requires). More than the device allows a block
        (or the simulated device: :func:`gpulab.device.simulate`) is refused with
        the reason, on either backend."""
        from .device import limits
        here = limits()
        why = here.shared_fits(int(nbytes)) if here is not None else None
        if why:
            raise KernelArgumentError(f"kernel '{self.name}' {why}")
        if self.module.backend.name == "gpu":
            self.raw.max_dynamic_shared_size_bytes = int(nbytes)
        self.shared_limit = int(nbytes)

    def __repr__(self) -> str:
        return f"<Kernel {self.name} from {self.module.path} on {self.module.backend.name}>"


class Module:
    """A compiled kernel file; ``get_function`` gives its kernels by name."""

    def __init__(self, path: str, source: str, backend: Backend, raw):
        self.path = path
        self.source = source
        self.backend = backend
        self.raw = raw
        self.signatures = parse_kernels(source)
        self._kernels: dict[str, Kernel] = {}

    @property
    def kernel_names(self) -> list[str]:
        return list(self.signatures)

    def get_function(self, name: str) -> Kernel:
        if name not in self._kernels:
            if name not in self.signatures:
                raise KernelArgumentError(
                    f"{self.path} has no __global__ kernel named '{name}'; it defines: "
                    f"{', '.join(self.signatures) or 'none'}")
            self._kernels[name] = Kernel(self, self.signatures[name], self.raw.get_function(name))
        return self._kernels[name]

    def set_constant(self, name: str, values) -> None:
        """Copy ``values`` (host array) into the ``__constant__`` symbol ``name``,
        which must be exactly as large."""
        host = np.ascontiguousarray(self.backend.to_host(values))
        try:
            symbol = self.raw.get_global(name)
        except Exception as exc:
            raise KernelArgumentError(f"{self.path} has no __constant__ or __device__ symbol "
                                      f"'{name}' ({exc})") from None
        size = self._gpu_symbol_size(name) if self.backend.name == "gpu" else symbol.nbytes
        if host.nbytes != size:
            raise KernelArgumentError(
                f"{self.path}: symbol '{name}' holds {size} bytes; got {host.nbytes} bytes "
                f"({host.dtype} array of shape {host.shape})")
        if self.backend.name == "gpu":
            symbol.copy_from_host(host.ctypes.data, host.nbytes)
        else:
            symbol[:] = host.view(np.uint8).ravel()

    def _gpu_symbol_size(self, name: str) -> int:
        try:
            holder = self.raw.get_global(SIZEOF_PREFIX + name)
        except Exception:
            raise KernelArgumentError(f"{self.path}: '{name}' is not a __constant__ symbol gpulab can "
                                      "size; declare it as `__constant__ T name[N];`") from None
        size = np.zeros(1, np.uint64)
        holder.copy_to_host(size.ctypes.data, size.nbytes)
        return int(size[0])

    def __getattr__(self, name: str) -> Kernel:
        # Lets notebooks write module.saxpy(...) as well as get_function("saxpy").
        if name.startswith("_") or name not in self.__dict__.get("signatures", {}):
            raise AttributeError(name)
        return self.get_function(name)

    def __repr__(self) -> str:
        return f"<Module {self.path} on {self.backend.name}: {', '.join(self.signatures)}>"


# --------------------------------------------------------------------------- compiling
_NVRTC_ERROR = re.compile(r"^(?P<file>[^\n(]*)\((?P<line>\d+)\): (?:catastrophic )?error:?\s*(?P<msg>.*)$", re.M)


def _compile_error(path: Path, source: str, log: str, file_re=_NVRTC_ERROR) -> KernelCompileError:
    shown = paths.display_path(path)
    match = file_re.search(log)
    if not match:
        return KernelCompileError(f"{shown} did not compile:\n{log.strip()}", path=shown, line=None, log=log)
    line = int(match.group("line"))
    where_file = match.group("file").strip()
    lines = source.splitlines()
    quoted = ""
    # An error inside an #included header names that header (found beside the
    # kernel or in kernels/); any other name is the compiler's temporary copy of ours.
    # NVRTC compiles a temporary copy named <hash>.cubin.cu; any other name is a
    # header (ours in kernels/, or the toolkit's), and its line is not ours to quote.
    ours = not where_file or where_file.endswith(".cubin.cu") or Path(where_file).name == path.name
    if not ours:
        header = Path(where_file)
        local = [p for p in (path.parent / header.name, paths.KERNELS / header.name) if p.is_file()]
        shown = paths.display_path(local[0]) if local else where_file
    elif 1 <= line <= len(lines):
        quoted = f"\n{line:5d} | {lines[line - 1]}"
    message = f"{shown} line {line}: error: {match.group('msg').strip()}{quoted}"
    return KernelCompileError(message, path=shown, line=line, log=log)


_CONSTANT_DECL = re.compile(r"__constant__\s+[^;{}()]*?\b([A-Za-z_]\w*)\s*(?:\[[^;]*\])?\s*;")
SIZEOF_PREFIX = "gpulab_sizeof_"


def _with_symbol_sizes(source: str) -> str:
    """Append, for each ``__constant__`` symbol, a device variable holding its
    size: CuPy's ``get_global`` gives a symbol's address but not its size, and
    ``set_constant`` must refuse a host array of the wrong size. Appended at
    the end, so compiler messages keep the user's line numbers."""
    names = _CONSTANT_DECL.findall(strip_comments(source))
    lines = [f"__device__ unsigned long long {SIZEOF_PREFIX}{n} = sizeof({n});" for n in names]
    return source + ("\n" + "\n".join(lines) + "\n" if lines else "")


_ARCH_OPTION = ("-arch=", "--gpu-architecture=")


def _compile_gpu_for_arch(path: Path, source: str, options: tuple[str, ...]):
    """A module built for the architecture that ``options`` name (``-arch=sm_90a``: Hopper's
    wgmma and setmaxnreg exist only in that target): NVRTC compiles it to a cubin that CuPy
    then loads, since CuPy's own compile adds the device's plain architecture to the options."""
    import cupy

    arch = next(o.split("=", 1)[1] for o in options if o.startswith(_ARCH_OPTION))
    rest = tuple(o for o in options if not o.startswith(_ARCH_OPTION)) + ("--generate-line-info",)
    try:
        cubin = resources.compile_cubin(source, paths.display_path(path), arch, (str(paths.KERNELS), str(path.parent)),
                                        rest)
    except KernelCompileError as exc:
        raise _compile_error(path, source, exc.log) from None
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as file:
        file.write(cubin)
    return cupy.RawModule(path=file.name)


def _compile_gpu(path: Path, source: str, options: tuple[str, ...]):
    import cupy

    if any(o.startswith(_ARCH_OPTION) for o in options):
        return _compile_gpu_for_arch(path, source, options)
    include = ("-I" + str(paths.KERNELS), "-I" + str(path.parent)) + toolkit_include_options()
    opts = ("-std=c++17", "--generate-line-info") + include + tuple(options)
    module = cupy.RawModule(code=_with_symbol_sizes(source), options=opts)
    try:
        module.compile()
    except cupy.cuda.compiler.CompileException as exc:
        log = exc.get_message() if hasattr(exc, "get_message") else str(exc)
        raise _compile_error(path, source, log) from None
    return module


@functools.lru_cache(maxsize=64)
def _compile_cached(path: str, source: str, backend: str, options: tuple[str, ...]):
    real = Path(path)
    if backend == "gpu":
        return _compile_gpu(real, source, options)
    return cpu.compile_module(source, filename=paths.display_path(real),
                              include_dirs=[str(paths.KERNELS), str(real.parent)], options=options)


def load_module(path: str | Path, backend: str | Backend | None = None,
                options: Sequence[str] = ()) -> Module:
    """Compile a kernel file for ``backend`` ("gpu", "cpu", or None for the GPU
    when one is usable) and return its :class:`Module`.

    ``path`` is relative to the repository root, to ``kernels/``, or absolute.
    A compile error raises :class:`KernelCompileError` naming the file, the line
    and the offending source line. Compiled modules are cached per process.
    """
    real = paths.kernel_path(path)
    source = real.read_text()
    be = get_backend(backend)
    raw = _compile_cached(str(real), source, be.name, tuple(options))
    return Module(paths.display_path(real), source, be, raw)


def resource_table(module: Module) -> pd.DataFrame:
    """Registers, static shared memory, local (spilled) memory and the largest
    block each kernel of ``module`` can launch with, as compiled for this GPU.

    On the CPU backend the figures come from NVRTC compiling the file for the
    recording GPU (an H100, sm_90) without a GPU, where NVRTC is installed
    (``attrs["source"]`` says so); where it is not, the table says why in
    ``attrs["unavailable"]`` instead of inventing figures."""
    rows = []
    cpu_figures, why = None, None
    if module.backend.name != "gpu":
        why = resources.unavailable()
        if why is None:
            try:
                cpu_figures = resources.compile_resources(module.path)
            except (KernelCompileError, RuntimeError) as exc:
                why = str(exc)
    for name in module.kernel_names:
        if module.backend.name == "gpu":
            attrs = module.get_function(name).raw.attributes
            rows.append({"kernel": name, "registers": attrs["num_regs"],
                         "static_shared_bytes": attrs["shared_size_bytes"],
                         "local_bytes": attrs["local_size_bytes"],
                         "const_bytes": attrs["const_size_bytes"],
                         "max_threads_per_block": attrs["max_threads_per_block"]})
        elif cpu_figures is not None and name in cpu_figures.index:
            figures = cpu_figures.loc[name]
            rows.append({"kernel": name, "registers": int(figures["registers"]),
                         "static_shared_bytes": int(figures["static_shared_bytes"]),
                         "local_bytes": int(figures["local_bytes"]), "const_bytes": None,
                         "max_threads_per_block": None})
        else:
            rows.append({"kernel": name, "registers": None, "static_shared_bytes": None,
                         "local_bytes": None, "const_bytes": None, "max_threads_per_block": None})
    table = pd.DataFrame(rows).set_index("kernel")
    table.attrs["backend"] = module.backend.name
    if cpu_figures is not None:
        table.attrs["source"] = cpu_figures.attrs["source"]
    if why:
        table.attrs["unavailable"] = why
    return table


def occupancy(kernel: Kernel, block_threads: int, shared_mem: int = 0) -> dict:
    """Resident blocks and warps per SM for a launch shape, from the CUDA
    occupancy calculator (GPU only)."""
    if kernel.module.backend.name != "gpu":
        require_gpu("occupancy")
    import cupy
    from cupy.cuda import driver, runtime

    blocks = driver.occupancyMaxActiveBlocksPerMultiprocessor(
        kernel.raw.kernel.ptr, int(block_threads), int(shared_mem))
    props = runtime.getDeviceProperties(cupy.cuda.Device().id)
    max_warps = props["maxThreadsPerMultiProcessor"] // 32
    warps = blocks * -(-block_threads // 32)
    return {"blocks_per_sm": blocks, "warps_per_sm": warps, "occupancy": warps / max_warps}


# --------------------------------------------------------------------------- showing source
#: A region of a kernel file that the book shows on its own: ``// region: NAME`` ... ``// endregion``
#: (comments only, so marking one changes no machine code); the marker lines are never shown.
REGION_START = re.compile(r"^\s*//\s*region:\s*(?P<name>[\w.-]+)\s*$")
REGION_END = re.compile(r"^\s*//\s*endregion\b.*$")


@dataclass
class KernelSource:
    """A kernel file rendered for the book: its path and text, shown as a
    highlighted CUDA block in a notebook; ``part`` says which part of the file
    it is (a function or a region, with its lines), when not the whole file."""

    path: str
    text: str
    part: str = ""

    def _repr_markdown_(self) -> str:
        where = f"**`{self.path}`**" + (f", {self.part}" if self.part else "")
        return f"{where}\n\n```cuda\n{self.text.rstrip()}\n```\n"

    def __str__(self) -> str:
        return self.text


def show_source(path: str | Path, kernel: str | None = None, *, function: str | None = None,
                region: str | None = None) -> KernelSource:
    """The source of a kernel file for display in a notebook (never another lab's: see
    :func:`gpulab.paths.require_this_lab`): the whole file, or one part of it:

    kernel: one ``__global__`` kernel, with the comment block just above it;
    function: the first definition of any function of that name (``__device__``, a template,
        an inline helper of a header), with its ``template <...>`` line and the comments just
        above it;
    region: the lines between ``// region: NAME`` and ``// endregion``, dedented.

    Region markers are never shown, in any of the four."""
    paths.require_this_lab()
    if sum(x is not None for x in (kernel, function, region)) > 1:
        raise KernelArgumentError("show_source shows a kernel, a function or a region: name one of them")
    real = paths.kernel_path(path)
    text, part = real.read_text(), ""
    where = paths.display_path(real)
    if kernel is not None:
        signatures = parse_kernels(text)
        if kernel not in signatures:
            raise KernelArgumentError(f"{where} has no kernel '{kernel}'")
        text = _kernel_text(text, signatures[kernel].line)
    elif function is not None:
        first, last = _function_lines(text, function, where)
        text, part = "\n".join(text.splitlines()[first:last + 1]), f"`{function}` (lines {first + 1}-{last + 1})"
    elif region is not None:
        first, last = _region_lines(text, region, where)
        text = _dedent(text.splitlines()[first:last + 1])
        part = f"lines {first + 1}-{last + 1}"
    return KernelSource(where, _without_markers(text), part)


def _dedent(lines: list[str]) -> str:
    """The lines less the indent all their code lines share (preprocessor lines such as
    ``#pragma unroll``, written from the first column, do not count and stay as they are)."""
    code = [l for l in lines if l.strip() and not l.lstrip().startswith("#")]
    cut = min((len(l) - len(l.lstrip()) for l in code), default=0)
    return "\n".join(l[cut:] if l[:cut].isspace() else l.lstrip() if l.lstrip().startswith("#") else l
                     for l in lines)


def _without_markers(text: str) -> str:
    return "\n".join(l for l in text.splitlines() if not (REGION_START.match(l) or REGION_END.match(l)))


def _region_lines(source: str, name: str, where: str) -> tuple[int, int]:
    """The first and last line (0-based) inside the region ``name``; regions may nest."""
    lines = source.splitlines()
    starts = [i for i, l in enumerate(lines) if (m := REGION_START.match(l)) and m["name"] == name]
    if not starts:
        names = [m["name"] for l in lines if (m := REGION_START.match(l))]
        raise KernelArgumentError(f"{where} has no region '{name}' (a line '// region: {name}'); "
                                  f"its regions: {', '.join(names) or 'none'}")
    depth = 0
    for i in range(starts[0] + 1, len(lines)):
        if REGION_START.match(lines[i]):
            depth += 1
        elif REGION_END.match(lines[i]):
            if depth == 0:
                return starts[0] + 1, i - 1
            depth -= 1
    raise KernelArgumentError(f"{where}: region '{name}' (line {starts[0] + 1}) has no '// endregion'")


def _code_mask(source: str) -> list[bool]:
    """For each character of ``source``: whether it is code (not in a comment, a string or a
    character literal), so that braces in comments are not counted."""
    mask, i, n = [True] * len(source), 0, len(source)
    while i < n:
        two = source[i:i + 2]
        if two == "//" or two == "/*":
            end = source.find("\n", i) if two == "//" else source.find("*/", i + 2) + 2
            end = n if end < (1 if two == "//" else 2) else end
            mask[i:end] = [False] * (end - i)
            i = end
        elif source[i] in "\"'":
            j = i + 1
            while j < n and source[j] != source[i]:
                j += 2 if source[j] == "\\" else 1
            mask[i:j + 1] = [False] * (j + 1 - i)
            i = j + 1
        else:
            i += 1
    return mask


def _function_lines(source: str, name: str, where: str) -> tuple[int, int]:
    """The first and last line (0-based) of the first definition of function ``name``: from its
    comments and ``template`` line to its closing brace."""
    code = _code_mask(source)
    text = "".join(c if ok else " " for c, ok in zip(source, code))
    # A definition: the name after a type (a word, maybe * or &), then its parameters, then a body.
    for m in re.finditer(rf"(?<![\w.>:])(?<=[\w*&>\s]){re.escape(name)}\s*\(", text):
        before = text[:m.start()].rstrip()
        if not before or not re.search(r"[\w*&>]$", before) or re.search(r"\b(return|else|new)$", before):
            continue
        if before.endswith(("=", ",")):
            continue
        depth, i = 0, m.end() - 1
        while i < len(text):                       # past the parameter list
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
            if depth == 0:
                break
        rest = re.match(r"[^;{()]*", text[i:])
        if rest is None or i + rest.end() >= len(text) or text[i + rest.end()] != "{":
            continue                               # a declaration or a call, not a definition
        open_at, depth = i + rest.end(), 0
        for j in range(open_at, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                break
        lines = source.splitlines()
        first = source.count("\n", 0, m.start())
        last = source.count("\n", 0, j)
        line_start = source.rfind("\n", 0, m.start()) + 1
        if not text[line_start:m.start()].strip() and first > 0:
            first -= 1                             # the return type on the line before
        while first > 0 and re.match(r"\s*template\s*<", lines[first - 1]):
            first -= 1
        while first > 0 and lines[first - 1].strip().startswith("//") and not REGION_END.match(lines[first - 1]):
            first -= 1
        while first < last and REGION_START.match(lines[first]):
            first += 1
        return first, last
    raise KernelArgumentError(f"{where} defines no function '{name}'")


def _kernel_text(source: str, line: int) -> str:
    lines = source.splitlines()
    start = line - 1
    while start > 0 and ("__global__" not in lines[start]):
        start -= 1
    while start > 0 and lines[start - 1].strip().startswith(("//", "/*", "*", "extern", "__launch")):
        start -= 1
    depth, seen_brace, end = 0, False, start
    for end in range(start, len(lines)):
        depth += lines[end].count("{") - lines[end].count("}")
        seen_brace = seen_brace or "{" in lines[end]
        if seen_brace and depth == 0:
            break
    return "\n".join(lines[start:end + 1])
