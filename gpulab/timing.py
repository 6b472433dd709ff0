"""Time GPU work honestly: CUDA events, warm-up excluded, many repeats,
median with spread, results as tidy rows.

The event timing itself is CuPy's (:func:`cupyx.profiler.benchmark` records a
start and an end event around each call on the current stream); this module
adds the summary statistics, the row format every chapter shares, and the
deliberately naive host timers that chapter 1 compares against events.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .device import require_gpu

#: The columns every timing row has, in this order (see :mod:`gpulab.runs`).
TIMING_COLUMNS = ["experiment", "variant", "size", "phase", "median_ms", "q1_ms", "q3_ms",
                  "min_ms", "max_ms", "repeats", "flops", "bytes"]


@dataclass
class Timing:
    """Repeated measurements of one region, in milliseconds."""

    samples_ms: np.ndarray
    method: str = "cuda events"
    host_ms: np.ndarray | None = field(default=None, repr=False)

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
        (FLOPs and bytes moved) so rates can be derived later."""
        return {"experiment": experiment, "variant": variant, "size": int(size), "phase": phase,
                **self.summary(), "flops": float(flops), "bytes": float(bytes), **extra}

    def __str__(self) -> str:
        s = self.summary()
        return (f"median {s['median_ms']:.4f} ms (IQR {s['q1_ms']:.4f}-{s['q3_ms']:.4f}, "
                f"min {s['min_ms']:.4f}, max {s['max_ms']:.4f}, n={s['repeats']}, {self.method})")


def benchmark(fn: Callable[[], object], *, warmup: int = 10, repeats: int = 100,
              budget_ms: float | None = None, min_repeats: int = 3) -> Timing:
    """Time ``fn()`` on the GPU with CUDA events: ``warmup`` untimed calls,
    then ``repeats`` timed ones, each between its own pair of events.

    With ``budget_ms``, one untimed call first estimates the time, and slow
    work gets fewer repeats (never fewer than ``min_repeats``) and at most 3
    warm-up calls (1 above 20 ms), so a chapter's whole run stays within minutes."""
    require_gpu("timing with CUDA events")
    from cupyx.profiler import benchmark as cupy_benchmark

    if budget_ms is not None:
        once = event_region(fn)
        repeats = int(max(min_repeats, min(repeats, budget_ms / max(once, 1e-3))))
        warmup = min(warmup, 1 if once > 20 else 3)

    result = cupy_benchmark(fn, (), n_warmup=warmup, n_repeat=repeats)
    return Timing(result.gpu_times[0] * 1e3, method="cuda events",
                  host_ms=np.asarray(result.cpu_times) * 1e3)


def graph_benchmark(fn: Callable[[], object], *, launches: int = 20, warmup: int = 5,
                    repeats: int = 50, stream=None) -> Timing:
    """Time ``fn()`` per call when ``launches`` calls are captured in a CUDA
    graph and replayed: the host's launch overhead (several microseconds per
    CuPy launch) drops out, leaving the GPU's own time per call. What
    :func:`benchmark` reports for a tiny kernel is mostly that overhead.

    ``stream``: capture on this stream (for work bound to a stream of its own,
    such as a cuBLAS handle); by default a new one."""
    require_gpu("timing a CUDA graph")
    import cupy
    from cupyx.profiler import benchmark as cupy_benchmark

    stream = stream or cupy.cuda.Stream(non_blocking=True)
    with stream:
        fn()  # compile and load outside the capture
        stream.begin_capture()
        try:
            for _ in range(launches):
                fn()
        finally:
            # Always leave capture mode: a stream left capturing breaks every later launch.
            graph = stream.end_capture()
        result = cupy_benchmark(lambda: graph.launch(stream), (), n_warmup=warmup, n_repeat=repeats)
    return Timing(result.gpu_times[0] * 1e3 / launches, method=f"cuda graph of {launches} launches")


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
    return Timing(samples, method=method)


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
