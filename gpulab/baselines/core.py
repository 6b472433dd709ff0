"""A vendor path as data (:class:`VendorPath`), the precision switch a path runs under, the
one measuring loop over paths (:func:`measure`) and the pick of the baseline a kernel is judged by
(:func:`fastest`): the core of :mod:`gpulab.baselines`."""
from __future__ import annotations

import importlib
import sys
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
    from ..check import compare
    from ..errors import CheckFailed
    from ..timing import benchmark

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


_TORCH_DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _torch_dtype(precision: str):
    import torch
    return getattr(torch, _TORCH_DTYPES[precision])


def _as_torch(array):
    """A torch tensor sharing a CuPy array's memory (torch tensors pass through)."""
    import torch
    if isinstance(array, torch.Tensor):
        return array
    if isinstance(array, np.ndarray):
        return torch.as_tensor(array, device="cuda")
    return torch.from_dlpack(array)


def _fmt(path: VendorPath) -> str:
    return f"{path.label} [{path.library}, {path.precision}, {path.layout}, {path.mode}]"
