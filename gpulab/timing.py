"""Time GPU work honestly: CUDA events, warm-up excluded, repeats until a stated
stop rule is met, median with spread, results as tidy rows.

Every timed call sits between its own pair of CUDA events on the stream it runs
on, and the host waits for the end event before the next call (as
:func:`cupyx.profiler.benchmark` does), so calls never overlap. This module
adds:

* the **stop rule** (:data:`STOP_RULE`): repeat until the 95% confidence
  interval of the median is within 1% of it, after at least ``min_repeats``
  calls and at most ``repeats``, or until the time budget is spent (each
  :class:`Timing` keeps why it stopped, and each row its CI half-width);
* an optional **L2 flush** (``flush_l2=True``): a buffer twice the size of the
  GPU's L2 cache is written between repeats, outside the timed region, so a
  small working set cannot stay in L2 from one call to the next ("cold"); every
  row says whether L2 was flushed (column ``l2_flushed``);
* the summary statistics and the row format every chapter shares;
* the deliberately naive host timers that chapter 1 compares against events.
"""
from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable

import numpy as np

from .device import require_gpu
from .errors import GpulabError

#: The columns every timing row has, in this order (see :mod:`gpulab.runs`).
TIMING_COLUMNS = ["experiment", "variant", "size", "phase", "median_ms", "q1_ms", "q3_ms",
                  "min_ms", "max_ms", "repeats", "flops", "bytes"]


@dataclass(frozen=True)
class StopRule:
    """When to stop repeating a measurement: once the ``confidence`` interval of
    the median (distribution-free, from the order statistics) is within
    ``rel_half_width`` of the median, but never before ``min_repeats`` calls,
    never after ``max_repeats``, and not once ``budget_ms`` of wall-clock time
    has been spent on the timed calls."""

    rel_half_width: float = 0.01
    confidence: float = 0.95
    #: The CI itself needs 6 samples at 95%, so only the time budget stops before 6.
    min_repeats: int = 3
    max_repeats: int = 100
    budget_ms: float | None = None

    def describe(self) -> str:
        budget = f", at most {self.budget_ms:g} ms" if self.budget_ms else ""
        return (f"repeat until the median's {self.confidence:.0%} confidence interval is within "
                f"±{self.rel_half_width:.0%}, after {self.min_repeats} to {self.max_repeats} repeats{budget}")


#: The lab's stop rule (benchmark's defaults): stated once, printed by the notebooks.
STOP_RULE = StopRule()


def median_ci(samples, confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval of the median: the order
    statistics ``x[k]`` and ``x[n-1-k]`` (0-based, sorted) for the largest ``k``
    whose exact coverage, ``1 - 2 P(B <= k)`` with ``B ~ Binomial(n, 1/2)``, is
    still at least ``confidence``. (nan, nan) when even the whole range covers
    less (n < 6 at 95%: four samples span the median only 87.5% of the time).
    The normal approximation of the binomial is not used: it undercovers, and at
    n = 4 and 5 it calls the whole range a 95% interval."""
    x = np.sort(np.asarray(samples, dtype=np.float64).ravel())
    n = x.size
    k = _median_rank(n, confidence)
    if k is None:
        return float("nan"), float("nan")
    return float(x[k]), float(x[n - 1 - k])


def _median_rank(n: int, confidence: float) -> int | None:
    """The largest k with 1 - 2 P(Binomial(n, 1/2) <= k) >= confidence, in exact
    integer arithmetic (None if not even k = 0 qualifies)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")
    allowed = (1 - Fraction(confidence)) * 2 ** n      # 2 * sum_{i<=k} C(n, i) must stay within this
    k, term, tail = None, 1, 1                          # term = C(n, i), tail = sum of C(n, j) for j <= i
    for i in range(n // 2 + 1):
        if 2 * tail > allowed:
            break
        k = i
        term = term * (n - i) // (i + 1)
        tail += term
    return k


def ci_half_width(samples, confidence: float = 0.95) -> float:
    """Half the width of :func:`median_ci`, relative to the median (nan if undefined)."""
    lo, hi = median_ci(samples, confidence)
    med = float(np.median(samples)) if len(samples) else float("nan")
    if not np.isfinite(lo) or med <= 0:
        return float("nan")
    return (hi - lo) / 2 / med


@dataclass
class Timing:
    """Repeated measurements of one region, in milliseconds."""

    samples_ms: np.ndarray
    method: str = "cuda events"
    host_ms: np.ndarray | None = field(default=None, repr=False)
    l2_flushed: bool = False
    stop: str = ""           # why the repeats stopped (see StopRule)

    def __post_init__(self):
        self.samples_ms = np.asarray(self.samples_ms, dtype=np.float64).ravel()
        if self.samples_ms.size == 0:
            raise ValueError("a Timing needs at least one sample")

    @property
    def median_ms(self) -> float:
        return float(np.median(self.samples_ms))

    def summary(self) -> dict:
        q1, med, q3 = np.percentile(self.samples_ms, [25, 50, 75])
        return {"median_ms": float(med), "q1_ms": float(q1), "q3_ms": float(q3),
                "min_ms": float(self.samples_ms.min()), "max_ms": float(self.samples_ms.max()),
                "repeats": int(self.samples_ms.size)}

    def row(self, experiment: str, variant: str, size: int = 0, phase: str = "kernel",
            flops: float = 0.0, bytes: float = 0.0, **extra) -> dict:
        """One tidy row: the labels, the summary statistics, and the work done
        (FLOPs and bytes moved) so rates can be derived later; then whether L2
        was flushed between repeats and the median's relative 95% CI half-width."""
        return {"experiment": experiment, "variant": variant, "size": int(size), "phase": phase,
                **self.summary(), "flops": float(flops), "bytes": float(bytes),
                "l2_flushed": bool(self.l2_flushed), "ci_half_width": ci_half_width(self.samples_ms),
                **extra}

    def __str__(self) -> str:
        s = self.summary()
        l2 = ", L2 flushed" if self.l2_flushed else ""
        return (f"median {s['median_ms']:.4f} ms (IQR {s['q1_ms']:.4f}-{s['q3_ms']:.4f}, "
                f"min {s['min_ms']:.4f}, max {s['max_ms']:.4f}, n={s['repeats']}, {self.method}{l2})")


class L2Flusher:
    """Writes a buffer twice the size of the GPU's L2 cache (at least 8 MiB),
    evicting whatever a previous call left there. One per device, made on first use."""

    _by_device: dict = {}

    def __init__(self):
        import cupy
        dev = cupy.cuda.Device()
        l2 = int(cupy.cuda.runtime.getDeviceProperties(dev.id).get("l2CacheSize", 0)) or 64 * 2**20
        self.nbytes = max(2 * l2, 8 * 2**20)
        self.buffer = cupy.empty(self.nbytes // 4, dtype=cupy.int32)
        self.value = 0

    @classmethod
    def get(cls) -> "L2Flusher":
        import cupy
        key = cupy.cuda.Device().id
        if key not in cls._by_device:
            cls._by_device[key] = cls()
        return cls._by_device[key]

    def flush(self, stream) -> None:
        """Queue the write on ``stream``: it runs before the next start event there."""
        self.value += 1          # a new value each time: nothing can skip an unchanged write
        with stream:
            self.buffer.fill(self.value)


def _event_loop(fn: Callable[[], object], stream, *, warmup: int, rule: StopRule | None,
                repeats: int, flush_l2: bool, divide: int = 1) -> tuple[np.ndarray, np.ndarray, str]:
    """The one timing loop: ``warmup`` untimed calls, then timed calls, each
    between two events on ``stream`` with the host waiting for the end event;
    with ``flush_l2``, L2 is flushed before every call (outside the events)."""
    import cupy

    flusher = L2Flusher.get() if flush_l2 else None
    for _ in range(warmup):
        if flusher:
            flusher.flush(stream)
        fn()
    stream.synchronize()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    max_repeats = repeats if rule is None else rule.max_repeats
    gpu, host = [], []
    spent_ms = 0.0
    reason = f"fixed {repeats} repeats" if rule is None else f"reached the maximum of {max_repeats} repeats"
    for i in range(max_repeats):
        if flusher:
            # The host waits for the flush, so the timed call starts as an unflushed
            # one does: on an idle GPU, after the host waited for the previous call.
            flusher.flush(stream)
            stream.synchronize()
        t0 = time.perf_counter()
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        host_ms = (time.perf_counter() - t0) * 1e3
        gpu.append(cupy.cuda.get_elapsed_time(start, end) / divide)
        host.append(host_ms / divide)
        spent_ms += host_ms
        if rule is None or len(gpu) < rule.min_repeats:
            continue
        half = ci_half_width(gpu, rule.confidence)
        if half == half and half <= rule.rel_half_width:
            reason = (f"median's {rule.confidence:.0%} CI within ±{rule.rel_half_width:.0%} "
                      f"after {len(gpu)} repeats")
            break
        if rule.budget_ms is not None and spent_ms >= rule.budget_ms:
            reason = f"time budget of {rule.budget_ms:g} ms spent after {len(gpu)} repeats"
            break
    return np.asarray(gpu), np.asarray(host), reason


def _rule(repeats: int, min_repeats: int, budget_ms: float | None, rel_ci: float | None,
          confidence: float) -> StopRule | None:
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if rel_ci is None and budget_ms is None:
        return None
    return StopRule(rel_half_width=rel_ci if rel_ci is not None else 0.0, confidence=confidence,
                    min_repeats=max(1, min(min_repeats, repeats)), max_repeats=repeats,
                    budget_ms=budget_ms)


def benchmark(fn: Callable[[], object], *, warmup: int = 10, repeats: int = 100,
              budget_ms: float | None = None, min_repeats: int = STOP_RULE.min_repeats,
              rel_ci: float | None = STOP_RULE.rel_half_width, confidence: float = STOP_RULE.confidence,
              flush_l2: bool = False, stream=None) -> Timing:
    """Time ``fn()`` on the GPU with CUDA events: ``warmup`` untimed calls,
    then timed ones, each between its own pair of events, under the stop rule:
    at least ``min_repeats`` and at most ``repeats`` calls, stopping once the
    median's ``confidence`` interval is within ``rel_ci`` of it (``rel_ci=None``:
    exactly ``repeats`` calls) or once ``budget_ms`` of time is spent.

    With ``budget_ms``, one untimed call first estimates the time, and slow
    work gets at most 3 warm-up calls (1 above 20 ms), so a chapter's whole run
    stays within minutes. With ``flush_l2``, L2 is flushed before every call,
    outside the timed region (the row says so). ``stream``: the stream ``fn``
    runs on (default: the current one)."""
    require_gpu("timing with CUDA events")
    import cupy

    stream = stream or cupy.cuda.get_current_stream()
    if budget_ms is not None:
        once = event_region(fn, stream)
        warmup = min(warmup, 1 if once > 20 else 3)
    rule = _rule(repeats, min_repeats, budget_ms, rel_ci, confidence)
    gpu, host, stop = _event_loop(fn, stream, warmup=warmup, rule=rule, repeats=repeats, flush_l2=flush_l2)
    return Timing(gpu, method="cuda events", host_ms=host, l2_flushed=flush_l2, stop=stop)


#: cudaGraphInstantiateFlagUseNodePriority: replay each kernel node at the priority of the stream it was captured on.
USE_NODE_PRIORITY = 8


def _priority_graph(graph):
    """``graph`` (a captured CuPy graph) instantiated through the driver with
    cudaGraphInstantiateFlagUseNodePriority (CuPy instantiates without flags,
    and a graph then replays every node at the launch stream's priority).
    Returns (launch(stream), destroy())."""
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuGraphInstantiateWithFlags.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_ulonglong]
    lib.cuGraphLaunch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.cuGraphExecDestroy.argtypes = [ctypes.c_void_p]
    if not getattr(graph, "graph", 0):
        raise GpulabError("CuPy's captured graph exposes no cudaGraph_t: it cannot be instantiated with node priorities")
    exe = ctypes.c_void_p()
    rc = lib.cuGraphInstantiateWithFlags(ctypes.byref(exe), graph.graph, USE_NODE_PRIORITY)
    if rc:
        raise GpulabError(f"cuGraphInstantiateWithFlags(USE_NODE_PRIORITY) failed with CUresult {rc}")

    def launch(stream):
        err = lib.cuGraphLaunch(exe, stream.ptr)
        if err:
            raise GpulabError(f"cuGraphLaunch failed with CUresult {err}")
    return launch, lambda: lib.cuGraphExecDestroy(exe)


def graph_benchmark(fn: Callable[[], object], *, launches: int = 20, warmup: int = 5,
                    repeats: int = 50, stream=None, min_repeats: int = STOP_RULE.min_repeats,
                    rel_ci: float | None = STOP_RULE.rel_half_width, budget_ms: float | None = None,
                    flush_l2: bool = False, node_priorities: bool = False) -> Timing:
    """Time ``fn()`` per call when ``launches`` calls are captured in a CUDA
    graph and replayed: the host's launch overhead (several microseconds per
    CuPy launch) drops out, leaving the GPU's own time per call. What
    :func:`benchmark` reports for a tiny kernel is mostly that overhead.
    Same stop rule as :func:`benchmark`. With ``flush_l2`` the graph holds one
    call (``launches`` is ignored), so that every timed call starts with L2
    flushed; compare it with ``launches=1`` unflushed, the same structure warm.

    ``stream``: capture on this stream (for work bound to a stream of its own,
    such as a cuBLAS handle); by default a new one. ``node_priorities``: the
    graph keeps the priority of each stream its kernels were captured on
    (instantiated through the driver with cudaGraphInstantiateFlagUseNodePriority),
    for work that forks onto high-priority streams."""
    require_gpu("timing a CUDA graph")
    import cupy

    stream = stream or cupy.cuda.Stream(non_blocking=True)
    if flush_l2:
        launches = 1
    # ``fn``'s inputs were most likely written on the caller's stream; a non-blocking
    # stream does not wait for the legacy default one, so order it after them.
    stream.wait_event(cupy.cuda.get_current_stream().record())
    with stream:
        fn()  # compile and load outside the capture
        stream.begin_capture()
        try:
            for _ in range(launches):
                fn()
        finally:
            # Always leave capture mode: a stream left capturing breaks every later launch.
            graph = stream.end_capture()
    rule = _rule(repeats, min_repeats, budget_ms, rel_ci, STOP_RULE.confidence)
    launch, destroy = _priority_graph(graph) if node_priorities else (graph.launch, None)
    try:
        gpu, host, stop = _event_loop(lambda: launch(stream), stream, warmup=warmup, rule=rule,
                                      repeats=repeats, flush_l2=flush_l2, divide=launches)
    finally:
        if destroy is not None:
            stream.synchronize()
            destroy()
    method = f"cuda graph of {launches} launches" + (", node priorities" if node_priorities else "")
    return Timing(gpu, method=method, host_ms=host, l2_flushed=flush_l2, stop=stop)


def host_timer(fn: Callable[[], object], *, synchronize: bool, warmup: int = 10,
               repeats: int = 100) -> Timing:
    """Time ``fn()`` with the host's clock. Without ``synchronize`` this
    measures only how long the *launch* takes, because kernels run
    asynchronously: chapter 1 shows the difference."""
    require_gpu("timing GPU work with a host timer")
    import cupy

    stream = cupy.cuda.get_current_stream()
    for _ in range(warmup):
        fn()
    stream.synchronize()
    samples = np.empty(repeats)
    for i in range(repeats):
        start = time.perf_counter()
        fn()
        if synchronize:
            stream.synchronize()
        samples[i] = (time.perf_counter() - start) * 1e3
    stream.synchronize()
    method = "host timer + synchronize" if synchronize else "host timer, no synchronize"
    return Timing(samples, method=method, stop=f"fixed {repeats} repeats")


def event_region(fn: Callable[[], object], stream=None) -> float:
    """Milliseconds of GPU time between two events around one call of ``fn``."""
    require_gpu("timing with CUDA events")
    import cupy

    stream = stream or cupy.cuda.get_current_stream()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(stream)
    fn()
    end.record(stream)
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end)


_SPIN = r"""
extern "C" __global__ void gpulab_spin(long long nanoseconds, float *sink)
{
    unsigned long long start, now;
    float acc = threadIdx.x;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        for (int i = 0; i < 64; ++i) acc = acc * 0.999f + 1.0f;     // keep the FMA pipes busy
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < (unsigned long long)nanoseconds);
    if (acc == -1.0f) sink[0] = acc;                                 // never true: keeps the loop
}
"""


def warm_up_gpu(ms: float = 5.0, stream=None) -> None:
    """Queue ``ms`` of busy work on every SM, on ``stream``, so that the timed
    work behind it runs at the clock the GPU reaches under load. After an idle
    gap (a pageable copy the host waits on, a pause) the SM clock can sit far
    below its boost clock, and the first kernels then run slower than the same
    kernels a moment later: chapter 1 shows it. Not timed: call it before the
    start event."""
    require_gpu("warming the GPU")
    import cupy

    if "kernel" not in _WARM:
        _WARM["kernel"] = cupy.RawKernel(_SPIN, "gpulab_spin")
        _WARM["sink"] = cupy.zeros(1, dtype=cupy.float32)
        _WARM["sms"] = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["multiProcessorCount"]
    stream = stream or cupy.cuda.get_current_stream()
    with stream:
        _WARM["kernel"]((_WARM["sms"] * 4,), (256,), (np.int64(ms * 1e6), _WARM["sink"]))


_WARM: dict = {}
