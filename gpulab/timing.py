"""Time GPU work honestly: CUDA events, warm-up excluded, the host's dispatch kept out,
repeats until a stated stop rule is met, median with spread, results as tidy rows.

**The one loop** (:func:`_event_loop`, used by :func:`benchmark` and :func:`graph_benchmark`,
and so by every chapter's record). A timed call sits between its own pair of CUDA events
on the stream it runs on, and the calls are **queued**, in batches run back to back: the
loop launches a *guard*, a one-block kernel that spins on the GPU's clock for longer than
the host takes to put the first call and its events into the stream, then up to
:data:`MAX_BATCH` calls (about :data:`BATCH_MS` of GPU time) with no host wait between
them, each while the GPU runs the ones before it. The start event is written when the GPU
reaches the call, not when the host did, so nothing the host does to get a call onto the
GPU (a launch's few microseconds, a graph replay's, an eager PyTorch call's dispatcher and
heuristics: tens of microseconds) is counted as its time; and the card runs the calls as
Triton's ``do_bench`` runs them and as a model runs its layers, at the clock and power that
sustained back-to-back work settles to (untimed calls first, until it has: :func:`_settle`). The loop checks every
sample: one the host may not have finished dispatching before the GPU reached it is
dropped, the guard is lengthened and the call is timed again (the :class:`Timing` counts
them, ``requeued``). ``queued=False`` is the naive method the measuring chapter contrasts
with it (the host waits after every call, the GPU is idle when the start event is written,
so the dispatch is inside the events): only for measuring dispatch itself.

What else this module owns:

* the **stop rule** (:data:`STOP_RULE`): repeat until the 95% confidence interval of the
  median is within 1% of it, after at least ``min_repeats`` calls and at most ``repeats``,
  or until the time budget is spent (each :class:`Timing` keeps why it stopped, and each row
  its CI half-width);
* **cold or warm L2** (``flush_l2=True``: "cold"): a buffer of 256 MiB (do_bench's size, and
  at least twice the GPU's L2 cache) is written before every call, outside the timed region, so a
  small working set cannot stay in L2 from one call to the next; without it the calls run
  back to back on what the previous one left in L2 ("warm"). Every row says which (column
  ``l2_flushed``) and that it was queued (column ``queued``);
* **the cross-check** (:func:`crosschecking`): while a chapter's run is recorded, the rows its
  verdicts rest on are timed again, cold, by this loop, by Triton's ``do_bench`` and by the
  profiler's record of the kernels' own durations (:func:`crosscheck`);
* the summary statistics and the row format every chapter shares;
* the deliberately naive host timers that chapter 1 compares against events.
"""
from __future__ import annotations

import ctypes
import os
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
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
    ``rel_half_width`` of the median, but never before ``min_repeats`` calls and
    ``min_span_ms`` of timed GPU time (as Triton's do_bench times ``rep`` = 100 ms of calls:
    a card at its power limit lowers its clock over tens of milliseconds, so a few calls'
    median is not the median of sustained work), never after ``max_repeats`` calls once that
    span is reached (nor after :data:`MAX_SPAN_REPEATS` to reach it), and not once
    ``budget_ms`` of wall-clock time has been spent on the timed calls."""

    rel_half_width: float = 0.01
    confidence: float = 0.95
    #: The CI itself needs 6 samples at 95%, so only the time budget stops before 6.
    min_repeats: int = 3
    max_repeats: int = 100
    budget_ms: float | None = None
    min_span_ms: float = 100.0

    def describe(self) -> str:
        budget = f", at most {self.budget_ms:g} ms" if self.budget_ms else ""
        span = f" and {self.min_span_ms:g} ms of timed calls" if self.min_span_ms else ""
        return (f"repeat until the median's {self.confidence:.0%} confidence interval is within "
                f"±{self.rel_half_width:.0%}, after {self.min_repeats} to {self.max_repeats} repeats{span}{budget}")


#: The most samples the stop rule takes to reach its ``min_span_ms`` (calls of a few microseconds).
MAX_SPAN_REPEATS = 4000


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
    #: True: every sample was queued behind a guard (the host's dispatch excluded); False: the
    #: naive method (the host waited and the GPU was idle when the start event was written).
    queued: bool = True
    #: Samples timed again because the host's dispatch outlasted the guard in front of them.
    requeued: int = 0
    #: The timed callable and how many calls one of its calls makes (a graph of 20 launches: 20),
    #: kept only while a cross-check is active (see :func:`crosschecking`), for the row to use.
    fn: Callable | None = field(default=None, repr=False, compare=False)
    calls: int = field(default=1, repr=False, compare=False)

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
        row = {"experiment": experiment, "variant": variant, "size": int(size), "phase": phase,
               **self.summary(), "flops": float(flops), "bytes": float(bytes),
               "l2_flushed": bool(self.l2_flushed), "ci_half_width": ci_half_width(self.samples_ms),
               "queued": bool(self.queued), **extra}
        if self.fn is not None and _CROSSCHECK:
            _CROSSCHECK[-1].offer(row, self.fn, self.calls)
        self.fn = None       # the callable holds the inputs' GPU memory: only a cross-check keeps it
        return row

    def __str__(self) -> str:
        s = self.summary()
        l2 = ", L2 flushed" if self.l2_flushed else ""
        queued = "" if self.queued else ", dispatch included"
        return (f"median {s['median_ms']:.4f} ms (IQR {s['q1_ms']:.4f}-{s['q3_ms']:.4f}, "
                f"min {s['min_ms']:.4f}, max {s['max_ms']:.4f}, n={s['repeats']}, {self.method}{l2}{queued})")


class L2Flusher:
    """Writes a buffer of 256 MiB (the size Triton's do_bench zeroes; at least twice the GPU's L2
    cache), evicting whatever a previous call left there. One per device, made on first use."""

    _by_device: dict = {}

    def __init__(self):
        import cupy
        dev = cupy.cuda.Device()
        l2 = int(cupy.cuda.runtime.getDeviceProperties(dev.id).get("l2CacheSize", 0)) or 64 * 2**20
        self.nbytes = -(-max(2 * l2, 256 * 2**20) // 16) * 16       # whole 16-byte stores
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
        import cupy

        self.value += 1          # a new value each time: nothing can skip an unchanged write
        if "flush" not in _WARM:
            # A kernel of the lab's own (not ndarray.fill), so a profiler's record names it.
            _WARM["flush"] = cupy.RawKernel(_FLUSH_SOURCE, "gpulab_l2_flush")
        n4 = self.buffer.size // 4
        with stream:
            _WARM["flush"](((n4 + 255) // 256,), (256,), (self.buffer, np.int64(n4), np.int32(self.value)))


_FLUSH_SOURCE = r"""
extern "C" __global__ void gpulab_l2_flush(int4 *buffer, long long n4, int value)
{
    // One 16-byte store per thread, as PyTorch's zero_ (do_bench's flush) writes an int32
    // tensor: the same bytes written the same way take the same time and leave L2 and the card's
    // power in the same state for the timed call that follows.
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n4)
        buffer[i] = make_int4(value, value, value, value);
}
"""


#: The shortest guard put in front of a timed call, in microseconds: longer than a lab kernel's
#: launch and the two events (about 10 us together), so most calls never need a longer one.
GUARD_MIN_US = 50.0
#: The longest guard: a call whose dispatch takes longer than this on the host is timed with
#: its dispatch partly inside the events, and its Timing says so (``queued`` False).
GUARD_MAX_US = 200_000.0
#: A sample counts as queued when the host finished dispatching within this share of the guard
#: (the guard may start on the GPU a few microseconds before its launch call returns).
GUARD_MARGIN = 0.7

_GUARD_SOURCE = r"""
extern "C" __global__ void gpulab_guard(long long nanoseconds)
{
    // One thread spins on the GPU's clock: the stream is busy for that long and nothing else is
    // touched (no memory, one SM), so the timed call behind it starts as it would have anyway.
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < (unsigned long long)nanoseconds);
}
"""


def describe_method() -> str:
    """How this module times a call, in words, for a run's conditions (``device.conditions``)."""
    return ("CUDA events around each call; the calls queued in batches run back to back (up to "
            f"{MAX_BATCH} calls, about {BATCH_MS:g} ms of GPU time, behind a guard kernel of at least "
            f"{GUARD_MIN_US:g} us), so the host's dispatch is not counted; untimed calls first until the "
            f"card settles ({WARMUP_MS:g} to {MAX_SETTLE_MS:g} ms, until a batch's time per call is within "
            f"{SETTLE_TOLERANCE:.0%} of the one before); cold: 256 MiB written before each call; medians under "
            "the stop rule: "
            + STOP_RULE.describe()
            + (f"; SMOKE RUN ({SMOKE_ENV} set): the card not settled and no minimum span, numbers not for reading"
               if smoke() else ""))


def _guard(stream, microseconds: float) -> None:
    """Queue the guard kernel for ``microseconds`` on ``stream``."""
    import cupy

    if "guard" not in _WARM:
        _WARM["guard"] = cupy.RawKernel(_GUARD_SOURCE, "gpulab_guard")
    with stream:
        _WARM["guard"]((1,), (1,), (np.int64(microseconds * 1e3),))


#: The calls a timing runs back to back, per batch, aim at about this much GPU time (ms), and at
#: most MAX_BATCH calls: a card that idles between calls runs cooler and at a higher clock than one
#: that runs them back to back (the trial runs of 2026-12-06 read 8192^3 GEMMs 5-14% faster with
#: the host waiting after every call than Triton's do_bench, which queues its calls).
BATCH_MS = 20.0
MAX_BATCH = 50
#: Before its first timed call the loop runs ``fn`` untimed, back to back, in batches of about
#: BATCH_MS, until the card's state settles: at least WARMUP_MS (four times do_bench's default), then
#: until a batch's time per call is within SETTLE_TOLERANCE of the batch before, at most
#: MAX_SETTLE_MS. A GEMM that draws more than the card's power limit runs at the boost clock for
#: its first tens of milliseconds and then slows (an H100 SXM at 700 W: 4096^3 fp16 at 1980 MHz
#: for about 30 ms, 0.181 ms a call, then about 1650 MHz and 0.19-0.20 ms; probe of 2026-12-07):
#: a time taken before that is of a card no sustained workload runs on.
WARMUP_MS = 100.0
MAX_SETTLE_MS = 400.0
SETTLE_TOLERANCE = 0.01


#: Set (to 1) in the environment of a smoke run, such as the GPU check's notebooks executed eight
#: at once on one GPU: the loop neither settles the card nor waits for ``min_span_ms``, and every
#: Timing's method says so. Such numbers show that the notebook runs, not how fast anything is
#: (eight processes share the GPU), and a recorded run never uses it.
SMOKE_ENV = "GPULAB_SMOKE_TIMING"


def smoke() -> bool:
    """Whether this process times as a smoke run (see :data:`SMOKE_ENV`)."""
    return os.environ.get(SMOKE_ENV, "") not in ("", "0")


def _settle(fn, stream, flusher, call_ms: float, guard_us: float) -> float:
    """Run ``fn`` untimed until the card settles (see :data:`WARMUP_MS`); returns the ms spent.
    The batches run back to back (the host reads one's events while the GPU runs the next), as
    the timed calls will."""
    import cupy

    per_batch = int(min(MAX_BATCH * 4, max(1, BATCH_MS // call_ms)))
    events = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(2)]
    spent, previous, pending, which = 0.0, None, None, 0
    while True:
        a, b = events[which]
        which ^= 1
        a.record(stream)
        for _ in range(per_batch):
            if flusher:
                flusher.flush(stream)
            fn()
        b.record(stream)
        if pending is not None:
            pending[1].synchronize()
            batch_ms = cupy.cuda.get_elapsed_time(*pending)
            spent += batch_ms
            per_call = batch_ms / per_batch
            if spent >= MAX_SETTLE_MS or (spent >= WARMUP_MS and previous is not None
                                          and abs(per_call - previous) <= SETTLE_TOLERANCE * previous):
                return spent          # the batch in flight runs on; the timed calls queue behind it
            previous = per_call
        pending = (a, b)


def _between_events(fn, stream, start, end) -> tuple[float, float]:
    """Record ``start``, call ``fn``, record ``end`` on ``stream``; the host's clock (s) before
    and after, so the caller knows how long the dispatch took."""
    t0 = time.perf_counter()
    start.record(stream)
    fn()
    end.record(stream)
    return t0, time.perf_counter()


def _longer_guard(late_us: float) -> float:
    """A guard long enough for a dispatch that was ``late_us`` behind the GPU, with the margin."""
    return min(2.0 * late_us / GUARD_MARGIN, GUARD_MAX_US)


def _event_loop(fn: Callable[[], object], stream, *, warmup: int, rule: StopRule | None,
                repeats: int, flush_l2: bool, divide: int = 1, queued: bool = True,
                batch: int | None = None) -> tuple[np.ndarray, np.ndarray, str, int, bool]:
    """The one timing loop. ``warmup`` untimed calls measure the host's dispatch and the call's
    length; then, ``queued``, the calls run in batches: a guard kernel, then up to ``batch``
    calls (by default as many as fill :data:`BATCH_MS`), each between its own two events, with
    no host wait inside a batch, so the GPU runs them back to back as do_bench's calls run (and
    as a model's layers run). The guard covers the host's dispatch of the first call; every later
    call is dispatched while the GPU runs the earlier ones. Each sample is checked: the GPU
    cannot have reached call i's start event before the guard's end plus the GPU time between
    the batch's first start event and call i's, so a call the host finished dispatching within
    that time (less a margin) was queued; one that was not is dropped, the guard is lengthened
    and the call timed again (``requeued``). ``flush_l2``: L2 is flushed before every call,
    before its start event. ``queued=False``: the naive method (the host waits after every call,
    the GPU is idle when the start event is written, the dispatch is inside the events).
    Returns the GPU samples, the host's dispatch times, why the repeats stopped, how many samples
    were dropped and timed again, and whether every kept sample was queued."""
    import cupy

    flusher = L2Flusher.get() if flush_l2 else None
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    dispatch_us, once_ms = [], []
    for _ in range(max(warmup, 1 if queued else 0)):
        if flusher:
            flusher.flush(stream)
        t0, t1 = _between_events(fn, stream, start, end)
        dispatch_us.append((t1 - t0) * 1e6)
        end.synchronize()
        once_ms.append(cupy.cuda.get_elapsed_time(start, end))
    stream.synchronize()
    max_repeats = repeats if rule is None else rule.max_repeats
    reason = f"fixed {repeats} repeats" if rule is None else f"reached the maximum of {max_repeats} repeats"
    if not queued:
        return _host_waits_loop(fn, stream, flusher, rule, max_repeats, reason, divide)
    # The first dispatch may include a one-time set-up (a plan, a handle): the guard follows the
    # later ones, and grows by itself if it is too short.
    typical = max(dispatch_us[1:] or dispatch_us or [0.0])
    guard_us = max(GUARD_MIN_US, _longer_guard(typical))
    # An upper bound of the call's GPU time (the warm-up's events held its dispatch).
    call_ms = max(min(once_ms), 1e-3)
    per_batch = max(1, batch or int(min(MAX_BATCH, max(1, BATCH_MS // call_ms))))
    if not smoke():
        _settle(fn, stream, flusher, call_ms, guard_us)
    # Two sets of events: the host reads one batch's while the GPU runs the next, so the GPU never
    # waits for the host between batches (an idle gap each batch let a card over its power limit
    # run 3-10% faster than do_bench, which queues all its calls: hopper's H100 run of 2026-12-07).
    pools = [[(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(per_batch)] for _ in range(2)]
    gpu, host = [], []
    span_ms = 0.0
    requeued, all_queued = 0, True
    #: A segment: the batches queued behind one guard, each checked against the guard's end.
    segment = None                 # [host time at the guard's launch, start event, guard_us, batches]
    # Batches a segment may hold (None: as many as the host keeps up with); ``batch=1`` times
    # each call alone, behind its own guard, the GPU idle before it (for contrast only).
    max_batches = 1 if batch == 1 else None
    pending = None                 # (pairs, dispatched, segment, index in segment): queued, not yet read
    segment_start = cupy.cuda.Event()
    began = time.perf_counter()
    stop = ""

    def read(batch) -> float:
        """Wait for ``batch``, keep its queued samples; the lateness (us) of the latest late one."""
        nonlocal span_ms, requeued, all_queued
        pairs, dispatched, (g, first, guard, _), _ = batch
        pairs[-1][1].synchronize()
        late_us = 0.0
        for (a, b), (t0, t1) in zip(pairs, dispatched):
            # How long after the guard's launch the host finished call i, less the GPU time from
            # the guard's end (the segment's start event) to call i's start: under the guard's
            # length, call i was in the queue before the GPU could reach it.
            lag_us = (t1 - g) * 1e6 - cupy.cuda.get_elapsed_time(first, a) * 1e3
            if lag_us > GUARD_MARGIN * guard:
                if guard < GUARD_MAX_US:          # the GPU may have waited for the host: time it again
                    requeued += 1
                    late_us = max(late_us, lag_us)
                    continue
                all_queued = False                # longer than the longest guard: kept, and said so
            ms = cupy.cuda.get_elapsed_time(a, b)
            span_ms += ms
            gpu.append(ms / divide)
            host.append((t1 - t0) * 1e3 / divide)
        return late_us

    which = 0
    while True:
        in_flight = len(pending[0]) if pending else 0
        n = per_batch if rule is not None else min(per_batch, repeats - len(gpu) - in_flight)
        if rule is not None and rule.budget_ms is not None:
            # No batch runs far past the budget: as many calls as it has left, and the minimum.
            spent = (time.perf_counter() - began) * 1e3
            left = int(np.ceil(max(rule.budget_ms - spent, 0.0) / call_ms)) - in_flight
            n = min(n, max(left, rule.min_repeats - len(gpu) - in_flight))
        current = None
        if n > 0:
            if segment is None or (max_batches is not None and segment[3] >= max_batches):
                if pending is not None:           # a new guard waits behind the batch in flight
                    late = read(pending)
                    pending = None
                    if late:
                        guard_us = _longer_guard(late)
                # The GPU idle when the guard is launched (the settling's last batch done), so that
                # it cannot reach the first call before the guard's launch plus its length.
                stream.synchronize()
                _guard(stream, guard_us)
                g = time.perf_counter()
                # The segment's own start event, written when the guard ends (the batches' events
                # are reused every other batch, so none of them can be the segment's reference).
                segment_start.record(stream)
                segment = [g, segment_start, guard_us, 0]
            pairs = pools[which][:n]
            which ^= 1
            dispatched = []
            for a, b in pairs:
                if flusher:
                    flusher.flush(stream)
                dispatched.append(_between_events(fn, stream, a, b))
            current = (pairs, dispatched, segment, segment[3])
            segment[3] += 1
        if pending is not None:
            index = pending[3]
            late = read(pending)
            if late:
                # Late in a segment's first batch: the guard did not cover the batch's dispatch.
                # Late in a later batch: the host did not keep up with the GPU across batches.
                if index == 0:
                    guard_us = _longer_guard(late)
                else:
                    max_batches = index
                segment = None
        pending = current
        if rule is None:
            if pending is None and len(gpu) >= repeats:
                break
            continue
        stop = _stopped(rule, gpu, (time.perf_counter() - began) * 1e3, span_ms)
        if stop:
            if pending is not None:               # the batch in flight is timed too
                read(pending)
                stop = _stopped(rule, gpu, (time.perf_counter() - began) * 1e3, span_ms) or stop
            reason = stop
            break
    if rule is None:
        del gpu[repeats:], host[repeats:]
    stream.synchronize()
    return np.asarray(gpu), np.asarray(host), reason, requeued, all_queued


def _stopped(rule: StopRule, gpu: list, spent_ms: float, span_ms: float) -> str:
    """Why the stop rule ends the repeats now, or '' while it does not."""
    n = len(gpu)
    if n < rule.min_repeats:
        return ""
    if rule.budget_ms is not None and spent_ms >= rule.budget_ms:
        return f"time budget of {rule.budget_ms:g} ms spent after {n} repeats"
    if span_ms < rule.min_span_ms and n < MAX_SPAN_REPEATS:
        return ""
    if n >= max(rule.max_repeats, rule.min_repeats) and span_ms >= rule.min_span_ms:
        return f"reached the maximum of {rule.max_repeats} repeats ({span_ms:.0f} ms of calls)"
    if n >= MAX_SPAN_REPEATS:
        return f"reached {MAX_SPAN_REPEATS} repeats ({span_ms:.1f} ms of calls)"
    half = ci_half_width(gpu, rule.confidence)
    if half == half and half <= rule.rel_half_width:
        return (f"median's {rule.confidence:.0%} CI within ±{rule.rel_half_width:.0%} after {n} repeats "
                f"({span_ms:.0f} ms of calls)")
    return ""


def _host_waits_loop(fn, stream, flusher, rule, max_repeats, reason, divide):
    """The naive method, for measuring dispatch itself: the host waits for each call (and for the
    flush before it) before it records the next start event, so the GPU is idle when that event
    is written and the host's dispatch of the call falls inside the events."""
    import cupy

    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    gpu, host = [], []
    spent_ms = 0.0
    while len(gpu) < max_repeats:
        if flusher:
            flusher.flush(stream)
            stream.synchronize()
        t0, t1 = _between_events(fn, stream, start, end)
        dispatched_us = (t1 - t0) * 1e6
        end.synchronize()
        spent_ms += (time.perf_counter() - t0) * 1e3
        gpu.append(cupy.cuda.get_elapsed_time(start, end) / divide)
        host.append(dispatched_us / 1e3 / divide)
        # The naive method is for dispatch, not sustained work: no minimum span.
        stop = _stopped(replace(rule, min_span_ms=0.0), gpu, spent_ms, 0.0) if rule else ""
        if stop:
            reason = stop
            break
    return np.asarray(gpu), np.asarray(host), reason, 0, False


def _rule(repeats: int, min_repeats: int, budget_ms: float | None, rel_ci: float | None,
          confidence: float, min_span_ms: float = STOP_RULE.min_span_ms) -> StopRule | None:
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if rel_ci is None and budget_ms is None:
        return None
    return StopRule(rel_half_width=rel_ci if rel_ci is not None else 0.0, confidence=confidence,
                    min_repeats=max(1, min(min_repeats, repeats)), max_repeats=repeats,
                    budget_ms=budget_ms, min_span_ms=0.0 if smoke() else min_span_ms)


def _as_run(method: str) -> str:
    """A Timing's method, marked when this process times as a smoke run (:data:`SMOKE_ENV`)."""
    return method + (f", smoke run ({SMOKE_ENV}: not settled, not for reading)" if smoke() else "")


def benchmark(fn: Callable[[], object], *, warmup: int = 10, repeats: int = 100,
              budget_ms: float | None = None, min_repeats: int = STOP_RULE.min_repeats,
              rel_ci: float | None = STOP_RULE.rel_half_width, confidence: float = STOP_RULE.confidence,
              flush_l2: bool = False, stream=None, queued: bool = True, batch: int | None = None,
              min_span_ms: float = STOP_RULE.min_span_ms) -> Timing:
    """Time ``fn()`` on the GPU with CUDA events: ``warmup`` untimed calls,
    then timed ones, each between its own pair of events and queued behind a
    guard (the host's dispatch excluded; ``queued=False``: included, the naive
    method, for measuring dispatch itself), under the stop rule:
    at least ``min_repeats`` and at most ``repeats`` calls, stopping once the
    median's ``confidence`` interval is within ``rel_ci`` of it (``rel_ci=None``:
    exactly ``repeats`` calls) or once ``budget_ms`` of time is spent.

    With ``budget_ms``, one untimed call first estimates the time, and slow
    work gets at most 3 warm-up calls (1 above 20 ms), so a chapter's whole run
    stays within minutes. With ``flush_l2``, L2 is flushed before every call,
    outside the timed region (the row says so). ``stream``: the stream ``fn``
    runs on (default: the current one). ``batch``: calls per batch run back to back (default:
    as many as fill about :data:`BATCH_MS`; 1 leaves the GPU idle between calls).
    ``min_span_ms``: the timed GPU time the stop rule waits for (see :class:`StopRule`)."""
    require_gpu("timing with CUDA events")
    import cupy

    stream = stream or cupy.cuda.get_current_stream()
    if budget_ms is not None:
        once = event_region(fn, stream)
        warmup = min(warmup, 1 if once > 20 else 3)
    rule = _rule(repeats, min_repeats, budget_ms, rel_ci, confidence, min_span_ms)
    gpu, host, stop, requeued, all_queued = _event_loop(fn, stream, warmup=warmup, rule=rule, repeats=repeats,
                                                        flush_l2=flush_l2, queued=queued, batch=batch)
    method = _as_run("cuda events, queued" if queued else "cuda events, host waits (dispatch included)")
    return Timing(gpu, method=method, host_ms=host, l2_flushed=flush_l2, stop=stop, queued=all_queued,
                  requeued=requeued, **_kept(fn, stream, 1))


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
                    flush_l2: bool = False, node_priorities: bool = False, queued: bool = True) -> Timing:
    """Time ``fn()`` per call when ``launches`` calls are captured in a CUDA
    graph and replayed as one launch: the time per call of calls that run back
    to back on the GPU, as a model's layers do, without the host launching each
    (the replay itself is queued behind the guard, as :func:`benchmark`'s calls
    are). Same stop rule as :func:`benchmark`. With ``flush_l2`` the graph holds one
    call (``launches`` is ignored), so that every timed call starts with L2
    flushed; compare it with ``launches=1`` unflushed, the same structure warm.

    ``stream``: capture on this stream (for work bound to a stream of its own,
    such as a cuBLAS handle); by default a new one. ``node_priorities``: the
    graph keeps the priority of each stream its kernels were captured on
    (instantiated through the driver with cudaGraphInstantiateFlagUseNodePriority),
    for work that forks onto high-priority streams. Each replay is queued behind a
    guard, as :func:`benchmark`'s calls are (``queued=False``: the replay's dispatch
    is inside the events)."""
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
        replay = lambda: launch(stream)      # noqa: E731
        gpu, host, stop, requeued, all_queued = _event_loop(replay, stream, warmup=warmup, rule=rule,
                                                            repeats=repeats, flush_l2=flush_l2, divide=launches,
                                                            queued=queued)
    finally:
        if destroy is not None:
            stream.synchronize()
            destroy()
    method = _as_run(f"cuda graph of {launches} launches" + (", node priorities" if node_priorities else "")
                     + (", queued" if queued else ", host waits (dispatch included)"))
    # A graph instantiated with node priorities is destroyed here: nothing is left to cross-check.
    kept = {} if node_priorities else _kept(replay, stream, launches)
    if kept:
        # The graph holds the captured kernels' pointers, not their arrays: the replay kept for a
        # cross-check keeps ``fn`` (and so what it launches on) alive, or it would run on freed
        # memory once the caller drops its arrays (an illegal address in the H200 run of 12-06).
        kept["fn"].keeps_alive = fn
    return Timing(gpu, method=method, host_ms=host, l2_flushed=flush_l2, stop=stop, queued=all_queued,
                  requeued=requeued, **kept)


# ------------------------------------------------------------------ the cross-check
class Crosscheck:
    """The rows a run's verdicts rest on, kept to be timed again (see :func:`crosschecking`):
    for each group of comparable rows (:func:`crosscheck_group`) that ``select`` accepts, the
    fastest so far and its callable. :meth:`run` times each group's fastest three more ways
    (:func:`crosscheck`) and writes the results into the matching rows."""

    def __init__(self, select: Callable[[dict], bool]):
        self.select = select
        self.best: dict = {}

    def offer(self, row: dict, fn, calls: int) -> None:
        if not self.select(row):
            return
        group = crosscheck_group(row)
        if group not in self.best or row["median_ms"] < self.best[group][0]["median_ms"]:
            self.best[group] = (dict(row), fn, calls)

    def run(self, rows: list[dict], log=print) -> int:
        """Cross-check every group's fastest row and copy the columns into the row of ``rows``
        with the same labels and median; returns how many rows were cross-checked."""
        done = 0
        # The rows of one comparison (the same experiment, size, precision and layer: the lab's
        # fastest and the vendor's) are cross-checked together, round by round.
        comparisons: dict = {}
        for group, kept in sorted(self.best.items(), key=lambda kv: str(kv[0])):
            comparisons.setdefault(group[:-1], []).append(kept)
        checked = []
        for kept in comparisons.values():
            try:
                found = crosscheck_interleaved([(fn, calls) for _, fn, calls in kept])
            except Exception as exc:       # noqa: BLE001 (the rows stay, their cross-check says why)
                failed = {c: float("nan") for c in CROSSCHECK_COLUMNS}
                failed["crosscheck_note"] = f"cross-check failed: {type(exc).__name__}: {exc}"[:300]
                found = [dict(failed) for _ in kept]
            checked += [(row, result) for (row, _, _), result in zip(kept, found)]
        for row, found in checked:
            if found["crosscheck_cold_ms"] < 0.5 * row["median_ms"]:      # cold is never half the warm time
                found["crosscheck_note"] = "; ".join(filter(None, [
                    found["crosscheck_note"], f"the cross-check's time is not the row's ({found['crosscheck_cold_ms']:.4g} "
                                              f"against {row['median_ms']:.4g} ms): it did not time the same work"]))
            same = [r for r in rows if all(r.get(k) == row.get(k) for k in ("experiment", "variant", "size",
                                                                               "median_ms"))]
            for r in same:
                r.update(found)
            done += bool(same)
            log(f"cross-check {row['experiment']} {row['variant']} n={row['size']}: lab {row['median_ms']:.4f} ms "
                f"(cold {found['crosscheck_cold_ms']:.4f}), do_bench {found['do_bench_ms']:.4f}, "
                f"profiler {found['profiler_ms']:.4f} ({found['profiler_kernels']:g} kernels)"
                + (f" [{found['crosscheck_note']}]" if found["crosscheck_note"] else ""), flush=True)
        self.best.clear()
        return done


def crosscheck_group(row: dict) -> tuple:
    """What makes rows comparable for the cross-check: their experiment, size, precision and
    layer, and whether they are the lab's or a vendor's (a ``library``, or a vendor's name)."""
    vendor = bool(row.get("library")) and str(row.get("library")) != "nan" or any(
        name in str(row.get("variant", "")) for name in ("cuBLAS", "cuDNN", "PyTorch"))
    return (row.get("experiment"), row.get("size"), str(row.get("precision", "")), str(row.get("layer", "")),
            "vendor" if vendor else "lab")


#: The cross-checks in force (innermost last): see :func:`crosschecking`.
_CROSSCHECK: list[Crosscheck] = []


@contextmanager
def crosschecking(select: Callable[[dict], bool]):
    """While active, every :class:`Timing` made by :func:`benchmark` or :func:`graph_benchmark`
    keeps its callable until it becomes a row; of the rows ``select(row)`` accepts, the fastest
    of each group (:func:`crosscheck_group`) keeps it longer, to be timed again by
    ``Crosscheck.run``. A chapter's recording names the rows its verdicts rest on this way
    (:class:`gpulab.recorder.Recording`'s ``crosscheck``); yields the :class:`Crosscheck`."""
    check = Crosscheck(select)
    _CROSSCHECK.append(check)
    try:
        yield check
    finally:
        _CROSSCHECK.pop()


def crosscheck_fields(fn, stream=None, calls: int = 1) -> dict:
    """The :class:`Timing` fields that keep ``fn`` (run on ``stream``, ``calls`` calls per call)
    for a cross-check, if one is active; for a Timing a chapter assembles from samples itself."""
    if not _CROSSCHECK:
        return {}
    import cupy
    return {"fn": _on_stream(fn, stream or cupy.cuda.get_current_stream()), "calls": calls}


_kept = crosscheck_fields


def _on_stream(fn, stream):
    """``fn`` made to run with ``stream`` as CuPy's and PyTorch's current stream, so that another
    timer's events, recorded on the current stream, are ordered with its work."""
    def run():
        with stream:
            with _torch_stream(stream):
                return fn()
    run.stream = stream
    return run


@contextmanager
def _torch_stream(stream):
    if stream is None:
        yield
        return
    try:
        import torch
    except ImportError:            # no PyTorch: only CuPy's current stream matters
        yield
        return
    if not torch.cuda.is_available() or stream.ptr == 0:
        # CuPy's null stream is the legacy default stream, PyTorch's default stream too: wrapping
        # it as an ExternalStream put PyTorch's kernels elsewhere (an H100 run of 2026-12-06 timed
        # torch.matmul at 1 us, its kernels outside the events)
        yield
        return
    with torch.cuda.stream(torch.cuda.ExternalStream(stream.ptr)):
        yield


#: The rounds of the cross-check (see :func:`crosscheck`): five, so that the median of each timer
#: is not one round's clock.
CROSSCHECK_ROUNDS = 5
#: The columns a cross-checked row gains (see :func:`crosscheck`).
CROSSCHECK_COLUMNS = ["crosscheck_cold_ms", "crosscheck_warm_ms", "do_bench_ms", "profiler_ms",
                      "profiler_kernels", "crosscheck_note"]


def crosscheck(fn: Callable[[], object], *, calls: int = 1, rounds: int = CROSSCHECK_ROUNDS) -> dict:
    """Three independent times of ``fn()`` (per call of the ``calls`` it makes), in ms:

    * ``crosscheck_cold_ms`` and ``crosscheck_warm_ms``: this module's loop, queued, with L2
      flushed before each call and back to back;
    * ``do_bench_ms``: Triton's ``triton.testing.do_bench`` (median; it zeroes a 256 MB buffer
      before each call, here the lab's own flush buffer, and queues the calls with no host wait
      between them);
    * ``profiler_ms``: the kernels' own durations as the profiler records them (PyTorch's
      profiler, over CUPTI's activity records: each kernel's start and end on the GPU), summed
      over the kernels of one call, median over calls with L2 flushed before each, and
      ``profiler_kernels`` the number of kernels one call runs (a sum of several kernels leaves
      out the gaps between them).

    Each is the median of ``rounds`` rounds, the timers interleaved, their order rotated
    (:func:`crosscheck_interleaved` for several calls, round by round). A timer that is not
    available (no Triton, no PyTorch) leaves its column NaN and says why in ``crosscheck_note``."""
    return crosscheck_interleaved([(fn, calls)], rounds=rounds)[0]


def crosscheck_interleaved(items: list[tuple[Callable[[], object], int]], *, rounds: int = CROSSCHECK_ROUNDS) -> list[dict]:
    """:func:`crosscheck` of several ``(fn, calls)`` at once, round by round: in each round every
    call's four timers, so that the calls of one comparison (a lab step and the vendor's path)
    are timed in the same stretch of the card's state, as the ladders time their variants."""
    states = [_crosscheck_timers(fn) for fn, _ in items]
    # In rounds, each timer once per round, the order rotated from round to round, and the medians
    # of the rounds kept: a card running large GEMMs at its power limit moves its clock by 10-20%
    # over seconds (an H100's 4096^3 fp16 GEMM: 1290-1980 MHz from one timer to the next in the
    # probe of 2026-12-07), and a timer that always ran first, or always after a given one, would
    # always find the card in the same part of that swing.
    for r in range(rounds):
        for timers, _, _ in states:
            for timer in timers[r % len(timers):] + timers[:r % len(timers)]:
                timer()
    results = []
    for (_, found, notes), (_, calls) in zip(states, items):
        out = {c: float("nan") for c in CROSSCHECK_COLUMNS}
        for column, key in (("crosscheck_cold_ms", "cold"), ("crosscheck_warm_ms", "warm"),
                            ("do_bench_ms", "do_bench"), ("profiler_ms", "profiler")):
            if found[key]:
                out[column] = float(np.median(found[key])) / calls
        if found["kernels"]:
            out["profiler_kernels"] = int(np.median(found["kernels"]))
        out["crosscheck_note"] = "; ".join(dict.fromkeys(notes))
        results.append(out)
    return results


def _crosscheck_timers(fn) -> tuple[list[Callable[[], None]], dict, list]:
    """The cross-check's four timers of ``fn`` (lab cold, do_bench, lab warm, profiler), each
    adding its time to ``found``, and the notes of those that could not run."""
    notes: list[str] = []
    stream = getattr(fn, "stream", None)
    found: dict[str, list] = {"cold": [], "warm": [], "do_bench": [], "profiler": [], "kernels": []}

    def lab(flushed: bool):
        key = "cold" if flushed else "warm"
        try:
            found[key].append(benchmark(fn, warmup=3, repeats=60, rel_ci=STOP_RULE.rel_half_width, flush_l2=flushed,
                                        stream=stream).median_ms)
        except Exception as exc:       # noqa: BLE001 (the row stays, its cross-check says why)
            notes.append(f"lab's loop ({key}): {type(exc).__name__}: {exc}"[:200])

    def settle():
        # do_bench and the profiler find the card as the lab's loop leaves it, settled (their own
        # warm-ups are 25 ms and three calls: a GEMM over the power limit is still at its boost clock).
        reference = found["cold"] or found["warm"]
        _settle(fn, stream or _current_stream(), L2Flusher.get(), max(min(reference or [1e-3]), 1e-3), GUARD_MIN_US)

    def triton_do_bench():
        settle()
        try:
            from triton.testing import do_bench
            # On the stream the work runs on, so that do_bench's own events are ordered with it
            # (a graph replayed on its capture stream timed at 0.4 us on the default stream).
            with (stream if stream is not None else nullcontext()), _torch_stream(stream), _do_bench_clears_the_labs_buffer():
                found["do_bench"].append(float(do_bench(fn, warmup=25, rep=100, return_mode="median")))
        except Exception as exc:       # noqa: BLE001 (no Triton here, or it cannot run this call)
            notes.append(f"do_bench: {type(exc).__name__}: {exc}"[:200])

    def profiler():
        settle()
        try:
            ms, kernels = _profiled_ms(fn, 1)
            found["profiler"].append(ms)
            found["kernels"].append(kernels)
        except Exception as exc:       # noqa: BLE001
            notes.append(f"profiler: {type(exc).__name__}: {exc}"[:200])

    return [lambda: lab(True), triton_do_bench, lambda: lab(False), profiler], found, notes


@contextmanager
def _do_bench_clears_the_labs_buffer():
    """While active, do_bench zeroes the lab's 256 MiB flush buffer (with its own ``zero_``, before
    each call, as always) instead of a tensor of its own. For a call of a few microseconds the time
    after a flush depends on where in memory the flushed buffer lies, by up to about 0.6 us: in
    the probe of 2026-12-07 (tools/flush_probe.py) a 6 us SAXPY read 6.5 us after either timer's
    flush of the lab's buffer and 6.0-6.1 us after either timer's flush of PyTorch's, and do_bench
    alone read the same calls up to 0.56 us apart from one run to the next. With one buffer the two
    timers differ only in what is cross-checked: their events, queueing and statistics."""
    try:
        import torch
        from triton import runtime
        active = runtime.driver.active
    except Exception:               # noqa: BLE001 (no Triton or PyTorch: do_bench's own note says so)
        yield
        return
    buffer = torch.as_tensor(L2Flusher.get().buffer, device="cuda")
    active.get_empty_cache_for_benchmark = lambda: buffer
    try:
        yield
    finally:
        del active.get_empty_cache_for_benchmark


def _current_stream():
    import cupy
    return cupy.cuda.get_current_stream()


#: The cross-check's criterion: the lab's cold median and do_bench's agree within 3%, or within
#: CROSSCHECK_FLOOR_MS for calls of a few microseconds. There every timer's reading of one call
#: takes one of two levels 0.54-0.67 us apart from one timing to the next, whichever timer and
#: whichever flush (do_bench's own included: tools/flush_mode_probe.py, H100 2026-12-07,
#: labdata/trials/2026-12-07-settled-timing/round3/), so two timers can be a level apart on a
#: 5 us call with neither wrong; the floor is the largest step seen, rounded up. It is above a
#: CUDA event's resolution (about 0.5 us, CUDA's documentation of cudaEventElapsedTime).
CROSSCHECK_TOLERANCE = 0.03
CROSSCHECK_FLOOR_MS = 0.0007


def crosscheck_agrees(median_ms: float, do_bench_ms: float) -> bool:
    """Whether a cross-checked row meets :data:`CROSSCHECK_TOLERANCE`."""
    return abs(median_ms - do_bench_ms) <= max(CROSSCHECK_TOLERANCE * do_bench_ms, CROSSCHECK_FLOOR_MS)


def crosscheck_disagreements(table):
    """The rows of a run's cross-check table (``median_ms``, ``do_bench_ms``) that do not meet
    :func:`crosscheck_agrees`: what keeps a run out of labdata/runs (tests/test_runs.py,
    tools/accept_runs.py)."""
    agrees = [crosscheck_agrees(m, d) for m, d in zip(table["median_ms"], table["do_bench_ms"])]
    return table[[not a for a in agrees]]


def _profiled_ms(fn, calls: int, repeats: int = 30) -> tuple[float, int]:
    """(median of the summed kernel durations per call, kernels per call) from PyTorch's
    profiler, L2 flushed before each call, the calls queued back to back behind one guard as
    the lab's loop runs them (calls alone, the host waiting after each, ran up to 15% slower on
    a hot H100 in the probe of 2026-12-07). A call's kernels are those between one flush (a
    kernel named ``gpulab_l2_flush``) and the next."""
    import cupy
    import torch
    from torch.profiler import ProfilerActivity, profile

    stream = getattr(fn, "stream", None) or cupy.cuda.get_current_stream()
    flusher = L2Flusher.get()
    for _ in range(3):
        fn()
    stream.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        _guard(stream, GUARD_MIN_US)
        for _ in range(repeats):
            flusher.flush(stream)
            fn()
        flusher.flush(stream)
        stream.synchronize()
    on_gpu = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    per_call, current = [], None
    for e in sorted(on_gpu, key=lambda e: e.time_range.start):
        if e.name.startswith("gpulab_l2_flush"):
            current = [0.0, 0]
            per_call.append(current)
        elif e.name.startswith("gpulab_guard"):
            current = None
        elif current is not None:
            current[0] += e.time_range.elapsed_us() / 1e3
            current[1] += 1
    per_call = [c for c in per_call if c[1]]
    if len(per_call) < repeats // 2:
        raise GpulabError(f"the profiler recorded the kernels of {len(per_call)} of {repeats} calls")
    return (float(np.median([c[0] for c in per_call])) / calls, int(np.median([c[1] for c in per_call])))


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


def span_samples(run: Callable, stream=None, *, repeats: int = 30, warmup: int = 3) -> dict[str, np.ndarray]:
    """Time the parts of one piece of work as it runs: ``run(span)`` enqueues the work, wrapping
    each part in ``with span(name, stream):`` (the stream the part runs on); each part's GPU time
    between its two events, over ``repeats`` runs after ``warmup``. Like :func:`benchmark`'s
    calls, every run is queued behind a guard longer than the host's enqueueing of the whole
    run (measured in the warm-up), so a part's span holds the GPU's time for it, not the time
    the host took to launch it. Returns {name: samples in ms}."""
    require_gpu("timing the parts of a run with CUDA events")
    import cupy

    stream = stream or cupy.cuda.get_current_stream()
    samples: dict[str, list] = {}
    guard_us, dispatch_us = GUARD_MIN_US, 0.0
    r = 0
    while r < warmup + repeats:
        marks = []

        @contextmanager
        def span(name, on_stream, marks=marks):
            a, b = cupy.cuda.Event(), cupy.cuda.Event()
            a.record(on_stream)
            yield
            b.record(on_stream)
            marks.append((name, a, b))

        _guard(stream, guard_us)
        t0 = time.perf_counter()
        run(span)
        dispatch_us = (time.perf_counter() - t0) * 1e6
        stream.synchronize()
        cupy.cuda.Device().synchronize()
        if r < warmup or dispatch_us > GUARD_MARGIN * guard_us:
            guard_us = max(guard_us, _longer_guard(dispatch_us))
            r += r < warmup          # a timed run that outlasted its guard is run again
            continue
        for name, a, b in marks:
            samples.setdefault(name, []).append(cupy.cuda.get_elapsed_time(a, b))
        r += 1
    return {name: np.asarray(s) for name, s in samples.items()}


def event_region(fn: Callable[[], object], stream=None) -> float:
    """Milliseconds of GPU time between two events around one call of ``fn``, the host's dispatch
    included: for work measured end to end (an epoch of training, which the host enqueues while
    the GPU runs it), not for comparing kernels (use :func:`benchmark`)."""
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
