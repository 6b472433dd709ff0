"""Vendor baselines, declared as data and measured in the same run as the lab's kernels.

A speedup is only as honest as its baseline, so a chapter compares its kernels
with *every* reasonable vendor path on the machine (cuBLAS through CuPy,
PyTorch's cuBLAS and cuBLASLt with fused ReLU epilogues, cuDNN in NCHW and
channels-last, tf32 on and off, eager and in CUDA graphs) and quotes the
**fastest one of matching precision**:

* an fp32 kernel against the fastest fp32 path *without* tf32;
* a tf32 kernel against the fastest tf32 path;
* an fp16 (or bf16) kernel against the fastest fp16/bf16 path.

Each path is a :class:`VendorPath`: a precise label, its library, precision
class, layout, graph or eager, and a ``setup()`` that returns a zero-argument
callable whose return value is the output (checked against the chapter's
float64 reference before anything is timed). :func:`measure` runs every path
with :mod:`gpulab.timing` (tf32 set explicitly for each path and restored
after it) and returns tidy rows in the lab's format with ``library``,
``precision``, ``layout`` and ``mode`` columns; paths whose library is missing,
or whose setup fails, come back in ``skipped`` with the reason instead of
crashing the run. :func:`fastest` picks the baseline a kernel is judged by.

Example, for a chapter's benchmark (x on the GPU, W1..W3 NumPy arrays)::

    from gpulab import baselines

    paths = baselines.matmul_chain_paths(x, [W1, W2, W3], relu=[True, True, False])
    paths += baselines.graph_paths(paths, launches=10)         # the same, captured in CUDA graphs
    result = baselines.measure(paths, reference=y64, experiment="ladder", size=n,
                               flops=flops, bytes=nbytes, graph_experiment="graph")
    rows += result.rows                                        # tidy rows, one per path
    skipped += result.skipped                                  # [{"variant", "reason"}]
    best = baselines.fastest(pd.DataFrame(rows), "fp32", size=n)   # a row (pandas Series)

Convolutions: :func:`conv_paths` (cuDNN through PyTorch, NCHW and channels-last,
fp32 / tf32 / fp16 / bf16, optionally followed by ReLU and max-pooling).
"""
from __future__ import annotations

import importlib
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

#: Which vendor precisions a kernel of each precision is compared with.
MATCHING = {"fp32": ("fp32",), "tf32": ("tf32",), "fp16": ("fp16", "bf16"), "bf16": ("fp16", "bf16")}
PRECISIONS = tuple(MATCHING)

#: The columns :func:`measure` adds to each timing row.
VENDOR_COLUMNS = ["library", "precision", "layout", "mode", "rel_error", "vendor_note"]


@dataclass(frozen=True)
class VendorPath:
    """One way a practitioner would compute the chapter's workload with a vendor library.

    ``setup()`` does everything that is not the computation (conversions to
    the path's precision and layout, workspace allocation, cuDNN's algorithm
    search, graph capture) and returns ``run``: a zero-argument callable that
    computes the output and returns it (a CuPy array or a torch tensor in the
    reference's shape and layout, or ``(array, to_reference)`` where
    ``to_reference`` maps it there). ``calls`` is how many computations one
    ``run()`` makes (a graph of 10 captured calls: 10); times are per call."""

    label: str
    library: str                   # e.g. "cuBLASLt (PyTorch)", "cuBLAS (CuPy)", "cuDNN (PyTorch)"
    precision: str                 # fp32 (no tf32), tf32, fp16 or bf16: the arithmetic's class
    layout: str                    # e.g. "W@X", "X@W", "NCHW", "NHWC"
    setup: Callable[[], Callable[[], Any]] = field(repr=False, compare=False)
    graph: bool = False
    requires: tuple[str, ...] = ("cupy",)
    calls: int = 1
    tolerance: float | None = None  # None: check.TOLERANCE[precision]
    note: str = ""
    #: How the path is captured when wrapped by :func:`in_graph`: "torch" or "cupy".
    capture: str = "torch"

    def __post_init__(self):
        if self.precision not in MATCHING:
            raise ValueError(f"{self.label}: precision must be one of {PRECISIONS}, got {self.precision!r}")

    @property
    def mode(self) -> str:
        return "graph" if self.graph else "eager"

    def missing(self) -> str | None:
        """None when every module in ``requires`` imports, else the reason."""
        for module in self.requires:
            try:
                importlib.import_module(module)
            except Exception as exc:        # ImportError, or a broken CUDA install
                return f"{module} is not available ({type(exc).__name__}: {exc})"
        return None


@dataclass
class Measured:
    """What :func:`measure` returns: timing rows, and the paths not measured with why."""

    rows: list[dict]
    skipped: list[dict]

    def __iter__(self):          # rows, skipped = measure(...)
        return iter((self.rows, self.skipped))


# --------------------------------------------------------------------------- precision control
@contextmanager
def precision_mode(precision: str):
    """Set tf32 explicitly for one path and restore the previous settings after
    it: on for "tf32", off otherwise (PyTorch's cuBLAS and cuDNN flags and
    CuPy's cuBLAS compute type). cuDNN's algorithm search (benchmark mode) is
    switched on, as a practitioner would."""
    tf32 = precision == "tf32"
    saved = {}
    torch = sys.modules.get("torch") or _try_import("torch")
    if torch is not None:
        saved["matmul"] = torch.backends.cuda.matmul.allow_tf32
        saved["cudnn"] = torch.backends.cudnn.allow_tf32
        saved["benchmark"] = torch.backends.cudnn.benchmark
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = True
    linalg = _cupy_linalg()
    if linalg is not None:
        try:
            saved["cupy"] = linalg.get_compute_type(np.float32)
            linalg.set_compute_type(np.float32, linalg.COMPUTE_TYPE_TF32 if tf32 else linalg.COMPUTE_TYPE_DEFAULT)
        except Exception:            # another CuPy version's signature: leave CuPy's default (no tf32)
            saved.pop("cupy", None)
            linalg = None
    try:
        yield
    finally:
        if torch is not None:
            torch.backends.cuda.matmul.allow_tf32 = saved["matmul"]
            torch.backends.cudnn.allow_tf32 = saved["cudnn"]
            torch.backends.cudnn.benchmark = saved["benchmark"]
        if linalg is not None:
            linalg.set_compute_type(np.float32, saved["cupy"])


def _try_import(name: str):
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def _cupy_linalg():
    """CuPy's switch for the cuBLAS compute type of float32 products (tf32 or not), if present."""
    if "cupy" not in sys.modules and _try_import("cupy") is None:
        return None
    try:
        from cupy._core import _routines_linalg as linalg
        linalg.get_compute_type, linalg.set_compute_type, linalg.COMPUTE_TYPE_TF32   # noqa: B018
        return linalg
    except Exception:
        return None


# --------------------------------------------------------------------------- measuring
def as_reference_array(out):
    """A path's output as an array :func:`gpulab.check.compare` takes (torch
    tensors become CuPy arrays without a copy where possible)."""
    to_reference = None
    if isinstance(out, tuple):
        out, to_reference = out
    if type(out).__module__.split(".")[0] == "torch":
        out = out.detach()
        if out.dtype.is_floating_point and out.dtype not in _torch_plain_dtypes():
            out = out.float()                       # bf16: no CuPy dtype
        out = out.contiguous()
        try:
            import cupy
            out = cupy.from_dlpack(out)
        except Exception:
            out = out.cpu().numpy()
    return to_reference(out) if to_reference is not None else out


def _torch_plain_dtypes():
    import torch
    return (torch.float16, torch.float32, torch.float64)


def measure(paths: Sequence[VendorPath], *, reference, experiment: str, size: int, flops: float = 0.0,
            bytes: float = 0.0, graph_experiment: str | None = None, phase: str = "kernel",
            repeats: int = 100, budget_ms: float | None = 1500.0, flush_l2: bool = False,
            labels: dict | None = None, on_failure: str = "raise", log=print) -> Measured:
    """Check, then time, every path on the same inputs; return :class:`Measured`.

    Each path's output is compared with ``reference`` (float64) at the
    tolerance of its precision; a path that disagrees raises
    :class:`gpulab.CheckFailed` (``on_failure="skip"``: listed in ``skipped``
    instead). Rows go to ``experiment`` (graph paths to ``graph_experiment``
    when given) with ``labels`` added to each, and say whether L2 was flushed.
    ``bytes`` may be a number or a function of the path (fp16 paths move half
    the bytes of fp32 ones)."""
    from .check import compare
    from .errors import CheckFailed
    from .timing import benchmark

    if on_failure not in ("raise", "skip"):
        raise ValueError(f"on_failure must be 'raise' or 'skip', got {on_failure!r}")
    rows, skipped = [], []
    for path in paths:
        why = path.missing()
        if why is not None:
            skipped.append({"variant": path.label, "library": path.library, "precision": path.precision,
                            "size": size, "reason": f"unavailable: {why}"})
            continue
        with precision_mode(path.precision):
            try:
                run = path.setup()
                out = as_reference_array(run())
            except Exception as exc:     # a missing cuBLASLt, a capture the library refuses, ...
                skipped.append({"variant": path.label, "library": path.library, "precision": path.precision,
                                "size": size, "reason": f"setup failed: {type(exc).__name__}: {exc}"[:300]})
                log(f"vendor path {_fmt(path)}: {skipped[-1]['reason']}")
                continue
            result = compare(out, reference, path.precision, tolerance=path.tolerance,
                             name=f"{path.label} n={size}")
            del out
            if not result.passed:
                if on_failure == "raise":
                    raise CheckFailed(str(result))
                skipped.append({"variant": path.label, "library": path.library, "precision": path.precision,
                                "size": size, "reason": f"check failed: {result}"})
                log(f"vendor path {_fmt(path)}: {skipped[-1]['reason']}")
                continue
            try:
                timing = benchmark(run, repeats=repeats, budget_ms=budget_ms, flush_l2=flush_l2)
            except Exception as exc:
                skipped.append({"variant": path.label, "library": path.library, "precision": path.precision,
                                "size": size, "reason": f"timing failed: {type(exc).__name__}: {exc}"[:300]})
                log(f"vendor path {_fmt(path)}: {skipped[-1]['reason']}")
                continue
        if path.calls > 1:
            timing.samples_ms = timing.samples_ms / path.calls
            timing.method = f"cuda graph of {path.calls} calls, queued"
            timing.calls = path.calls      # a cross-check of ``run`` divides by them too
        moved = bytes(path) if callable(bytes) else bytes
        exp = graph_experiment if (path.graph and graph_experiment) else experiment
        rows.append(timing.row(exp, path.label, size, phase, flops=flops, bytes=moved,
                               library=path.library, precision=path.precision, layout=path.layout,
                               mode=path.mode, rel_error=result.rel_error, vendor_note=path.note,
                               **(labels or {})))
        log(f"vendor {exp:8s} n={size:<10,} {path.label:60s} {rows[-1]['median_ms']:.4f} ms"
            + (" (L2 flushed)" if flush_l2 else ""))
        del run
    _release_memory()
    return Measured(rows, skipped)


def _release_memory() -> None:
    try:
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()
    except Exception:
        pass
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            torch.cuda.empty_cache()
        except Exception:
            pass


def is_vendor(rows: pd.DataFrame) -> pd.Series:
    """Which rows are vendor paths: they have a ``library`` (rows recorded before
    this module: their variant names cuBLAS or cuDNN)."""
    named = rows["variant"].astype(str).str.contains("cuBLAS|cuDNN", regex=True)
    if "library" not in rows.columns:
        return named
    return rows["library"].notna() & (rows["library"].astype(str) != "")


def fastest(rows: pd.DataFrame, precision: str, *, mode: str | None = None, **where) -> pd.Series | None:
    """The fastest vendor row of matching precision (see :data:`MATCHING`):
    fp32 kernels are judged against fp32 paths without tf32, tf32 against tf32,
    fp16 and bf16 against fp16/bf16. ``mode`` ("eager" or "graph") restricts
    the paths; ``where`` filters further by column (``size=n``,
    ``experiment="ladder"``, ``layer=2``). None when no such row exists."""
    if precision not in MATCHING:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    chosen = rows[is_vendor(rows) & rows["precision"].isin(MATCHING[precision])]
    if mode is not None:
        if mode not in ("eager", "graph"):
            raise ValueError(f"mode must be 'eager', 'graph' or None, got {mode!r}")
        chosen = chosen[chosen["mode"] == mode]
    for column, value in where.items():
        if column not in chosen.columns:
            raise KeyError(f"the rows have no column '{column}'; they have {list(rows.columns)}")
        chosen = chosen[chosen[column] == value]
    if chosen.empty:
        return None
    return chosen.loc[chosen["median_ms"].idxmin()]


def fastest_table(rows: pd.DataFrame, by=("size",), precisions=("fp32", "tf32", "fp16")) -> pd.DataFrame:
    """The fastest vendor path per precision class (and per ``by`` value): what
    a chapter's text and targets quote; one row each, with every path's time."""
    out = []
    vendor_rows = rows[is_vendor(rows)]
    keys = [c for c in by if c in vendor_rows.columns]
    groups = vendor_rows.groupby(keys, sort=False) if keys else [((), vendor_rows)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        for precision in precisions:
            best = fastest(group, precision)
            if best is None:
                continue
            out.append({**dict(zip(keys, key)), "precision class": "/".join(MATCHING[precision]),
                        "fastest vendor path": best["variant"], "library": best.get("library", ""),
                        "median_ms": best["median_ms"], "paths compared": int(
                            group["precision"].isin(MATCHING[precision]).sum())})
    return pd.DataFrame(out)


def with_output(path: VendorPath, to_reference: Callable[[Any], Any], note: str = "") -> VendorPath:
    """``path`` whose output is mapped by ``to_reference`` before the check
    (e.g. the three images of a large batch that the reference covers); the
    timed calls are unchanged."""
    inner = path.setup

    def setup():
        run = inner()

        def mapped():
            return run(), to_reference
        return mapped
    return replace(path, setup=setup, note=(path.note + "; " + note).strip("; ") if note else path.note)


# --------------------------------------------------------------------------- CUDA graphs
def in_graph(path: VendorPath, launches: int = 10) -> VendorPath:
    """``path`` captured in a CUDA graph of ``launches`` calls and replayed (its
    times are per call). PyTorch paths are captured with ``torch.cuda.graph``
    after three warm-up calls on a side stream (cuDNN's algorithm search
    happens then, outside the capture); CuPy paths with stream capture."""
    if path.graph:
        raise ValueError(f"{path.label} is already a graph path")
    inner = path.setup
    if path.capture == "torch":
        def setup():
            return _torch_graph(inner(), launches)
    elif path.capture == "cupy":
        def setup():
            return _cupy_graph(inner(), launches)
    else:
        raise ValueError(f"{path.label}: cannot capture a path of kind {path.capture!r}")
    return replace(path, label=f"{path.label}, CUDA graph", setup=setup, graph=True, calls=launches)


def graph_paths(paths: Sequence[VendorPath], launches: int = 10) -> list[VendorPath]:
    """Every eager path of ``paths`` that can be captured, in a CUDA graph."""
    return [in_graph(p, launches) for p in paths if not p.graph and p.capture in ("torch", "cupy")]


def _torch_graph(run: Callable[[], Any], launches: int) -> Callable[[], Any]:
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            run()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            out = run()
    # The output lives in the graph's memory pool and holds whatever was there (on the H100 once,
    # after a capture that failed earlier in the process, the right answer of an earlier path, so a
    # graph that replayed nothing passed its check): poison it, so the check sees only the replay.
    tensor = out[0] if isinstance(out, tuple) else out
    if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
        tensor.fill_(float("nan"))
        torch.cuda.synchronize()

    def replay():
        graph.replay()
        return out
    replay.graph = graph            # keeps the graph (and its memory pool) alive
    # The graph holds the captured kernels' pointers, not the tensors ``run`` launches on (its
    # inputs, weights, workspace): the replay keeps ``run`` alive, or a replay kept for the
    # cross-check ran on freed memory (an illegal address in fcnet's H100 record of 2026-12-07).
    replay.keeps_alive = run
    return replay


def _cupy_graph(run: Callable[[], Any], launches: int) -> Callable[[], Any]:
    """CuPy stream capture of ``run`` (which must launch on the current stream
    and allocate nothing: see :func:`cublas_chain`)."""
    import cupy

    stream = getattr(run, "stream", None) or cupy.cuda.Stream(non_blocking=True)
    state = getattr(run, "state", {})
    with stream:
        run()
        stream.synchronize()
        stream.begin_capture()
        state["capturing"] = True
        try:
            for _ in range(launches):
                out = run()
        finally:
            state["capturing"] = False
            graph = stream.end_capture()
    done = cupy.cuda.get_current_stream()

    def replay():
        # Replayed on the capture stream, ordered after and before the current
        # stream, so events recorded on the current stream bracket it.
        stream.wait_event(done.record())
        graph.launch(stream)
        done.wait_event(stream.record())
        return out
    replay.graph = graph
    replay.keeps_alive = run        # what the captured kernels read and write (see _torch_graph)
    return replay


# --------------------------------------------------------------------------- matrix-product chains
_TORCH_DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _torch_dtype(precision: str):
    import torch
    return getattr(torch, _TORCH_DTYPES[precision])


def torch_chain(x, weights: Sequence[np.ndarray], relu: Sequence[bool], *, precision: str,
                layout: str = "W@X", epilogue: bool = True) -> VendorPath:
    """The chain h <- relu?(W h) through PyTorch, starting from h = x (features
    x vectors, feature-major, as a CuPy array or torch tensor on the GPU).

    ``layout`` "W@X": each layer is ``W @ H`` (outputs x vectors), as the lab's
    data is laid out; "X@W": ``H^T @ W^T`` (vectors x outputs), the layout of
    ``torch.nn.Linear``, reading the same input through a transposed view.
    ``epilogue``: the ReLU is fused into the product by cuBLASLt
    (``torch._addmm_activation`` with a zero bias); otherwise ``matmul`` then
    an in-place ``relu_``. The output is returned in the reference's layout
    (a view; the check copies it, the timed calls do not)."""
    if layout not in ("W@X", "X@W"):
        raise ValueError(f"layout must be 'W@X' or 'X@W', got {layout!r}")
    if len(weights) != len(relu):
        raise ValueError(f"one relu flag per weight matrix: got {len(weights)} weights, {len(relu)} flags")
    how = "ReLU epilogue" if epilogue else "matmul + relu_"
    library = "cuBLASLt (PyTorch)" if epilogue else "cuBLAS (PyTorch)"
    label = f"{library} {precision}, {how}, {layout}"

    def setup():
        import torch
        dtype = _torch_dtype(precision)
        h0 = _as_torch(x).to(dtype)
        ws = [torch.as_tensor(np.asarray(w), device=h0.device).to(dtype) for w in weights]
        if layout == "W@X":
            mats = ws                                    # out (M x n) = W (M x K) @ H (K x n)
            biases = [torch.zeros(h0.shape[1], dtype=dtype, device=h0.device)] * len(ws)
            start = h0
        else:
            mats = [w.t() for w in ws]                   # out (n x M) = H^T (n x K) @ W^T (K x M)
            biases = [torch.zeros(w.shape[0], dtype=dtype, device=h0.device) for w in ws]
            start = h0.t()
        fused = torch._addmm_activation if epilogue else None

        def run():
            h = start
            for w, b, r in zip(mats, biases, relu):
                if layout == "W@X":
                    a, bmat = w, h
                else:
                    a, bmat = h, w
                if r and fused is not None:
                    h = fused(b, a, bmat)
                else:
                    h = torch.matmul(a, bmat)
                    if r:
                        h.relu_()
            return h if layout == "W@X" else h.t()
        return run
    return VendorPath(label, library, precision, layout, setup, requires=("cupy", "torch"),
                      note="zero bias (the epilogue needs one)" if epilogue else "")


def cupy_chain(x, weights: Sequence[np.ndarray], relu: Sequence[bool], *, precision: str) -> VendorPath:
    """The chain through CuPy's ``matmul`` (cuBLAS GEMM, fp32 accumulation) and
    ``maximum``, every buffer allocated up front, W@X layout. fp32 and fp16;
    tf32 through CuPy's compute-type switch."""
    label = f"cuBLAS (CuPy) {precision}, matmul + maximum, W@X"

    def setup():
        import cupy
        dtype = cupy.float16 if precision == "fp16" else cupy.float32
        h0 = cupy.asarray(x, dtype=dtype)
        ws = [cupy.asarray(w, dtype=dtype) for w in weights]
        outs = [cupy.empty((w.shape[0], h0.shape[1]), dtype) for w in ws]

        def run():
            h = h0
            for w, o, r in zip(ws, outs, relu):
                cupy.matmul(w, h, out=o)
                if r:
                    cupy.maximum(o, 0, out=o)
                h = o
            return h
        return run
    if precision not in ("fp32", "tf32", "fp16"):
        raise ValueError(f"the CuPy chain runs fp32, tf32 or fp16, not {precision!r}")
    # CuPy's matmul re-binds its cuBLAS handle to the stream on every call, which
    # stream capture forbids: the graph version is cublas_chain.
    return VendorPath(label, "cuBLAS (CuPy)", precision, "W@X", setup, capture="none")


def cublas_chain(x, weights: Sequence[np.ndarray], relu: Sequence[bool], *, precision: str) -> VendorPath:
    """The chain of :func:`cupy_chain` with the GEMMs called on cuBLAS directly
    (``cublasGemmEx`` through ctypes, on its own handle bound once to its own
    stream, with a fixed workspace), so that it can be captured in a CUDA graph
    (:func:`in_graph`). fp32 (no tf32) or fp16 data, fp32 accumulation."""
    if precision not in ("fp32", "fp16"):
        raise ValueError(f"the direct cuBLAS chain runs fp32 or fp16, not {precision!r}")
    label = f"cuBLAS (cublasGemmEx) {precision}, GEMM + maximum, W@X"

    def setup():
        import ctypes
        import cupy

        lib = _libcublas()
        stream = cupy.cuda.Stream(non_blocking=True)
        handle = ctypes.c_void_p()
        workspace = cupy.empty(32 * 2**20, cupy.uint8)
        for status in (lib.cublasCreate_v2(ctypes.byref(handle)),
                       lib.cublasSetStream_v2(handle, ctypes.c_void_p(stream.ptr)),
                       lib.cublasSetWorkspace_v2(handle, ctypes.c_void_p(workspace.data.ptr), workspace.nbytes)):
            if status != 0:
                raise RuntimeError(f"cuBLAS setup failed with status {status}")
        dtype = cupy.float16 if precision == "fp16" else cupy.float32
        h0 = cupy.asarray(x, dtype=dtype)
        ws = [cupy.asarray(w, dtype=dtype) for w in weights]
        n = h0.shape[1]
        outs = [cupy.empty((w.shape[0], n), dtype) for w in ws]
        one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)   # host scalars, kept alive
        cuda_type = 2 if precision == "fp16" else 0                    # CUDA_R_16F / CUDA_R_32F
        compute_32f, default_algo = 68, -1                             # CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT
        keep = (workspace, one, zero, handle)

        def gemm(a, b, c):    # c[M, n] = a[M, K] @ b[K, n], all row-major: column-major c^T = b^T a^T
            m_rows, k = a.shape
            status = lib.cublasGemmEx(handle, 0, 0, n, m_rows, k, one.ctypes.data, b.data.ptr, cuda_type, n,
                                      a.data.ptr, cuda_type, k, zero.ctypes.data, c.data.ptr, cuda_type, n,
                                      compute_32f, default_algo)
            if status != 0:
                raise RuntimeError(f"cublasGemmEx failed with status {status}")

        current = cupy.cuda.get_current_stream()
        state = {"capturing": False}        # set by _cupy_graph while it captures

        def run():
            assert keep
            if not state["capturing"]:      # order the chain between the current stream's events
                stream.wait_event(current.record())
            with stream:
                h = h0
                for w, o, r in zip(ws, outs, relu):
                    gemm(w, h, o)
                    if r:
                        cupy.maximum(o, 0, out=o)
                    h = o
            if not state["capturing"]:
                current.wait_event(stream.record())
            return h
        run.stream, run.state = stream, state
        return run
    return VendorPath(label, "cuBLAS (CuPy)", precision, "W@X", setup, capture="cupy",
                      note="cublasGemmEx on its own handle and stream, so that it can be captured")


def _libcublas():
    """The libcublas that CuPy loaded, through ctypes, with the entry points
    :func:`cublas_chain` needs."""
    import ctypes
    import cupy
    cupy.cuda.device.get_cublas_handle()          # makes sure CuPy has loaded libcublas
    with open("/proc/self/maps") as maps:
        found = {line.split()[-1] for line in maps if "/libcublas.so" in line}
    if not found:
        raise RuntimeError("libcublas is not loaded in this process")
    lib = ctypes.CDLL(sorted(found)[0])
    p, i = ctypes.c_void_p, ctypes.c_int
    lib.cublasCreate_v2.argtypes = [ctypes.POINTER(p)]
    lib.cublasSetStream_v2.argtypes = [p, p]
    lib.cublasSetWorkspace_v2.argtypes = [p, p, ctypes.c_size_t]
    lib.cublasGemmEx.argtypes = [p, i, i, i, i, i, p, p, i, i, p, i, i, p, p, i, i, i, i]
    for name in ("cublasCreate_v2", "cublasSetStream_v2", "cublasSetWorkspace_v2", "cublasGemmEx"):
        getattr(lib, name).restype = i
    return lib


def matmul_chain_paths(x, weights: Sequence[np.ndarray], relu: Sequence[bool], *,
                       precisions=("fp32", "tf32", "fp16", "bf16"), layouts=("W@X", "X@W"),
                       epilogues=(True, False), cupy_paths: bool = True) -> list[VendorPath]:
    """Every reasonable eager vendor path for a chain of matrix products with
    ReLUs (add :func:`graph_paths` for the captured ones): CuPy's cuBLAS chain
    and the direct cuBLAS chain (fp32, fp16), and PyTorch with and without
    cuBLASLt ReLU epilogues in both layouts, per precision."""
    paths = []
    if cupy_paths:
        paths += [cupy_chain(x, weights, relu, precision=p) for p in ("fp32", "fp16") if p in precisions]
        paths += [cublas_chain(x, weights, relu, precision=p) for p in ("fp32", "fp16") if p in precisions]
    for precision in precisions:
        for layout in layouts:
            for epilogue in epilogues:
                paths.append(torch_chain(x, weights, relu, precision=precision, layout=layout,
                                         epilogue=epilogue))
    return paths


# --------------------------------------------------------------------------- convolutions
def conv_path(x, w, *, stride: int = 1, padding: int = 0, precision: str, layout: str = "NCHW",
              relu: bool = False, pool: tuple[int, int] | None = None, tolerance: float | None = None,
              bias=None) -> VendorPath:
    """One cuDNN convolution through ``torch.nn.functional.conv2d`` on
    ``x`` (N x C x H x W) and ``w`` (M x C x R x S), converted in setup to the
    precision and to ``layout`` ("NCHW", or "NHWC": PyTorch's channels_last
    memory format, cuDNN's fastest for tensor cores), optionally followed by
    ReLU and max-pooling (``pool`` = (kernel, stride)); ``bias`` (M values) is added by the
    convolution itself, as ``conv2d`` does. Returns the output in
    NCHW order (a view for NHWC; the check copies it, timed calls do not)."""
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"layout must be 'NCHW' or 'NHWC', got {layout!r}")
    ops = "conv" + (" + ReLU" if relu else "") + (f" + maxpool {pool[0]}/{pool[1]}" if pool else "")
    label = f"cuDNN (PyTorch) {precision}, {layout}, {ops}"

    def setup():
        import torch
        import torch.nn.functional as F
        dtype = _torch_dtype(precision)
        fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
        tx = _as_torch(x).to(dtype).contiguous(memory_format=fmt)
        tw = _as_torch(w).to(dtype).contiguous(memory_format=fmt)
        tb = None if bias is None else _as_torch(bias).to(dtype)

        def run():
            y = F.conv2d(tx, tw, tb, stride=stride, padding=padding)
            if relu:
                y = F.relu(y, inplace=True)
            if pool:
                y = F.max_pool2d(y, pool[0], pool[1])
            return y
        return run
    return VendorPath(label, "cuDNN (PyTorch)", precision, layout, setup, requires=("cupy", "torch"),
                      tolerance=tolerance)


def conv_paths(x, w, *, stride: int = 1, padding: int = 0, precisions=("fp32", "tf32", "fp16", "bf16"),
               layouts=("NCHW", "NHWC"), relu: bool = False, pool=None,
               fp32_tolerance: float | None = 1e-4, bias=None) -> list[VendorPath]:
    """Every cuDNN path for one convolution (add :func:`graph_paths` for graphs).
    cuDNN may compute fp32 with Winograd or FFT, which round differently from a
    direct sum: its fp32 check allows ``fp32_tolerance`` (default 1e-4)."""
    return [conv_path(x, w, stride=stride, padding=padding, precision=p, layout=layout, relu=relu, pool=pool,
                      tolerance=fp32_tolerance if p == "fp32" else None, bias=bias)
            for p in precisions for layout in layouts]


def _as_torch(array):
    """A torch tensor sharing a CuPy array's memory (torch tensors pass through)."""
    import torch
    if isinstance(array, torch.Tensor):
        return array
    if isinstance(array, np.ndarray):
        return torch.as_tensor(array, device="cuda")
    return torch.from_dlpack(array)


# --------------------------------------------------------------------------- which algorithm
def cudnn_kernels(run: Callable[[], Any], warmup: int = 3) -> list[str]:
    """The GPU kernels one call of ``run`` launches, by name, from the PyTorch
    profiler: cuDNN's names say which algorithm it chose (``winograd``,
    ``fft``, ``implicit_gemm``/``xmma``, ...). Empty where the profiler fails."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
        for _ in range(warmup):
            run()
        torch.cuda.synchronize()
        # One profiling cycle, read whole: PyTorch's notice that it clears events between
        # cycles (there is no second one here) would only alarm the reader, so it is ignored.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Warning: Profiler clears events at the end of each cycle",
                                    category=UserWarning)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                run()
                torch.cuda.synchronize()
        names = [e.name for e in prof.events() if _on_gpu(e)]
        return list(dict.fromkeys(names))
    except Exception as exc:
        print(f"could not read cuDNN's kernels: {type(exc).__name__}: {exc}", file=sys.stderr)
        return []


def path_kernels(path: VendorPath) -> list[str]:
    """The GPU kernels one call of ``path`` launches (set up under its own
    precision settings), by name; ``["not read: ..."]`` where that fails."""
    try:
        with precision_mode(path.precision):
            return cudnn_kernels(path.setup())
    except Exception as exc:
        return [f"not read: {type(exc).__name__}"]


def _on_gpu(event) -> bool:
    kind = str(getattr(event, "device_type", "")).lower()
    return "cuda" in kind


def algorithm_family(kernel_names: Sequence[str]) -> str:
    """A one-word reading of cuDNN's kernel names: winograd, fft, implicit GEMM, ..."""
    text = " ".join(kernel_names).lower()
    for key, family in (("winograd", "Winograd"), ("fft", "FFT"),
                        ("sm90_xmma_fprop_implicit_gemm", "implicit GEMM, tensor cores (Hopper kernel)"),
                        ("implicit_gemm", "implicit GEMM, tensor cores"),
                        ("precomputed_convolve_sgemm", "implicit GEMM, CUDA cores (precomputed indices)"),
                        ("convolve_common_engine", "direct convolution, CUDA cores"),
                        ("nvjet", "GEMM, tensor cores"), ("xmma_gemm", "GEMM (xmma)"), ("gemm", "GEMM"),
                        ("direct", "direct")):
        if key in text:
            return family
    return "unknown" if text else "not read"


def _fmt(path: VendorPath) -> str:
    return f"{path.label} [{path.library}, {path.precision}, {path.layout}, {path.mode}]"
