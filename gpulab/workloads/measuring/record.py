"""What ``python -m gpulab record measuring`` (and the notebook's live run) measures: the ladder
over sizes beside cuBLAS's SAXPY, warm, in a CUDA graph and with L2 flushed; the timers against
each other; the first launch and the first kernel after idle; the host-device copies; the
device's ceilings. Every kernel is checked at full size before it is timed."""
from __future__ import annotations

import time

import numpy as np

from ... import recorder, roofline, transfers
from ...check import check
from ...device import gpu_state
from ...kernels import _compile_gpu
from ...paths import kernel_path
from ...timing import Timing, benchmark, event_region, graph_benchmark, host_timer, warm_up_gpu
from ...recorder import Variant
from .launchers import BLOCK, SAXPY, kernel, transfers_launch
from .problem import A, MAIN_SIZE, NAME as CHAPTER, SIZES, Vectors, fits_in_l2, make_inputs, reference, work
from .steps import STEPS


def _setup(rec) -> dict:
    """The run's context: every step compiled for this GPU."""
    return {"fns": {step.kernel: kernel(step, "gpu") for step in STEPS}}


def time_ladder(rec, ctx):
    """The ladder over sizes, with cuBLAS's SAXPY (in place: y += a*x) as the vendor line."""
    for n in (SIZES[:3] if rec.quick else SIZES):
        _ladder_at(rec, ctx["fns"], n)


def _ladder_at(rec, fns, n: int):
    """Every step and cuBLAS at size ``n``, each checked at full size before it is timed: warm,
    in a CUDA graph and (where the arrays fit in L2) cold. (A function, so that its arrays are
    freed before the next size's.)"""
    import cupy             # here, not at the top: the module imports without CuPy
    import cupy.cublas

    repeats = rec.repeats
    case = Vectors(n)
    x_host, y_host = make_inputs(n)
    expected = reference(A, x_host, y_host)
    arrays = {"x": cupy.asarray(x_host), "y": cupy.asarray(y_host), "z": cupy.full(n, cupy.nan, dtype=cupy.float32)}
    x, y = arrays["x"], arrays["y"]

    def variant(step) -> Variant:
        launch = SAXPY.bind(step, case, arrays, "gpu", fn=fns[step.kernel])

        def checked():
            arrays["z"].fill(cupy.nan)
            launch()
            return check(arrays["z"], expected, name=f"{step.kernel} n={n}")

        def rows(timing, result, medians):
            out = [timing.row("ladder", step.title, n, **work(n)),
                   graph_benchmark(launch, repeats=max(10, repeats // 2)).row("graph", step.title, n, **work(n))]
            return out + (cold_rows(launch, step.title, n, repeats) if fits_in_l2(n) else [])
        return Variant(step.title, launch, checked, rows, where={"size": n})
    rec.ladder([variant(step) for step in STEPS])
    y_blas = y.copy()
    cupy.cublas.axpy(A, x, y_blas)
    if rec.checked(lambda: check(y_blas, reference(A, x_host, y_host), name=f"cublas axpy n={n}"),
                   variant="cuBLAS saxpy (in place)", size=n):
        axpy = lambda: cupy.cublas.axpy(A, x, y_blas)      # noqa: E731
        rec.add(benchmark(axpy, repeats=repeats).row("ladder", "cuBLAS saxpy (in place)", n, **work(n)))
        if fits_in_l2(n):
            rec.add(benchmark(axpy, repeats=repeats, flush_l2=True)
                    .row("ladder_cold", "cuBLAS saxpy (in place)", n, **work(n)))


class _MainSize:
    """SAXPY's arrays at :data:`MAIN_SIZE` and step 1 bound to them, for the single-size
    experiments (made once, after the ladder)."""

    def __init__(self, fns):
        import cupy
        self.n = MAIN_SIZE
        self.x_host, self.y_host = make_inputs(self.n)
        self.x, self.y = cupy.asarray(self.x_host), cupy.asarray(self.y_host)
        self.z = cupy.empty(self.n, dtype=cupy.float32)
        self.launch = SAXPY.bind(STEPS[0], Vectors(self.n), {"x": self.x, "y": self.y, "z": self.z}, "gpu",
                                 fn=fns["saxpy"])
        self.launch_host = transfers_launch(STEPS[0], fns["saxpy"])


def _main_size(ctx: dict) -> _MainSize:
    if "main" not in ctx:
        ctx["main"] = _MainSize(ctx["fns"])
    return ctx["main"]


def time_timers(rec, ctx):
    """The host timer (without and with a synchronize) against events, at one size: the events
    both ways, the call queued behind a guard kernel (the lab's method) and with the GPU idle."""
    m = _main_size(ctx)
    for t in (host_timer(m.launch, synchronize=False, repeats=rec.repeats),
              host_timer(m.launch, synchronize=True, repeats=rec.repeats)):
        rec.add(t.row("timers", t.method, m.n, **work(m.n)))
    rec.add(benchmark(m.launch, repeats=rec.repeats).row("timers", "cuda events", m.n, **work(m.n)))
    rec.add(benchmark(m.launch, repeats=rec.repeats, queued=False)
            .row("timers", EVENTS_HOST_WAITS, m.n, **work(m.n)))


#: The events with the host waiting before each call (the GPU idle as the start event is recorded).
EVENTS_HOST_WAITS = "cuda events, host waits"
#: The host work before the launch in :func:`time_dispatch`'s second call, in microseconds:
#: about what an eager framework call spends in its dispatcher before its kernel is queued.
HOST_WORK_US = 50.0


def after_host_work(launch, microseconds: float = HOST_WORK_US):
    """``launch`` preceded by ``microseconds`` of busy host work (a stand-in for a framework's
    dispatch: argument checks, a heuristic's choice, a plan lookup)."""
    def call():
        start = time.perf_counter()
        while time.perf_counter() - start < microseconds * 1e-6:
            pass
        launch()
    return call


def time_dispatch(rec, ctx):
    """What the events include: three calls, each timed with the host waiting before it (the GPU
    idle, so the start event is written at once and the host's dispatch falls inside) and queued
    behind a guard kernel (the start event written when the GPU reaches it), in rounds so the
    two methods see the same conditions. ``dispatch_us``: the host's median time to make the call."""
    import cupy.cublas
    m = _main_size(ctx)
    y = m.y.copy()
    calls = {"step 1's launch": m.launch,
             f"step 1 after {HOST_WORK_US:g} us of host work": after_host_work(m.launch),
             "cuBLAS saxpy through CuPy": lambda: cupy.cublas.axpy(A, m.x, y)}
    rounds = 1 if rec.quick else 3
    samples: dict = {}
    for _ in range(rounds):
        for name, fn in calls.items():
            for queued in (False, True):
                t = benchmark(fn, repeats=max(20, rec.repeats // rounds), rel_ci=None, queued=queued)
                samples.setdefault((name, queued), []).append(t)
    for (name, queued), timings in samples.items():
        host = [t.host_ms for t in timings if t.host_ms is not None]
        merged = Timing(np.concatenate([t.samples_ms for t in timings]), method=timings[0].method,
                        host_ms=np.concatenate(host) if host else None, queued=all(t.queued for t in timings),
                        stop=f"{len(timings)} rounds")
        rec.add(merged.row("dispatch", name, m.n, timed="queued" if queued else "host waits",
                           dispatch_us=float(np.median(merged.host_ms)) * 1e3 if host else float("nan"),
                           **work(m.n)))


def time_first_launch(rec, ctx):
    """The first launch: compiling (a fresh source, so no cache helps), loading, launching."""
    m = _main_size(ctx)
    rec.add(first_launch_rows(m.n, m.x, m.y, m.z))


def time_idle(rec, ctx):
    """The first kernel after the GPU sat idle, with and without busy work queued before it."""
    m = _main_size(ctx)
    rec.add(idle_rows(m.launch, m.n))


def time_transfers(rec, ctx):
    """Where the time goes when the data starts on the host: every kind of host memory; the same
    without warming the GPU before the kernel phase (what the kernel phase reads right after a
    copy that left the SMs idle); and the copies overlapped with the kernel on streams."""
    m = _main_size(ctx)
    repeats = max(5, rec.repeats // 5)
    for memory in transfers.MEMORY_KINDS:
        try:
            rec.add(transfers.transfer_breakdown(m.launch_host, [m.x_host, m.y_host], (m.n,), np.float32,
                                                 memory=memory, repeats=repeats, size=m.n))
        except RuntimeError as exc:  # e.g. no prefetch on this platform: say so, no row
            rec.progress(f"skipping {memory}: {exc}")
    for memory in ("pageable", "pinned"):
        rec.add(transfers.transfer_breakdown(m.launch_host, [m.x_host, m.y_host], (m.n,), np.float32,
                                             memory=memory, repeats=repeats, size=m.n, warm=False,
                                             experiment="transfers_unwarmed"))
    for chunks in (1, 2, 4, 8, 16):
        rec.add(transfers.overlap_with_streams(m.launch_host, [m.x_host, m.y_host], (m.n,), np.float32,
                                               chunks=chunks, repeats=repeats, size=m.n))
    del ctx["main"]                  # SAXPY's arrays go before the ceilings allocate their own


def time_ceilings(rec, ctx):
    """The device's measured memory bandwidth and FP32 rate."""
    rec.add(roofline.measure_ceilings(repeats=20))


#: Every experiment of chapter 1 on the GPU, in order: what ``python -m gpulab record measuring``
#: and the notebook's live run measure. Each kernel is checked at full size before it is timed.
benchmark_all = recorder.Recording(CHAPTER, [
    recorder.Experiment("ladder", time_ladder),
    recorder.Experiment("timers", time_timers),
    recorder.Experiment("dispatch", time_dispatch),
    recorder.Experiment("first_launch", time_first_launch),
    recorder.Experiment("idle", time_idle),
    recorder.Experiment("transfers", time_transfers),
    recorder.Experiment("ceilings", time_ceilings),
], setup=_setup, crosscheck=lambda row: row["experiment"] == "ladder")


def cold_rows(launch, variant: str, n: int, repeats: int) -> list[dict]:
    """``launch`` with L2 flushed before every call: eager (``ladder_cold``) and in a
    one-call CUDA graph, beside the same graph unflushed (``graph_cold``)."""
    out = [benchmark(launch, repeats=repeats, flush_l2=True).row("ladder_cold", variant, n, **work(n))]
    for flush in (False, True):
        out.append(graph_benchmark(launch, launches=1, repeats=max(10, repeats // 2), flush_l2=flush)
                   .row("graph_cold", variant, n, **work(n)))
    return out


def idle_rows(launch, n: int, idles_ms=(0, 20, 200, 1000), repeats: int = 3) -> list[dict]:
    """The first kernel after the GPU sat idle for each of ``idles_ms``, timed with events,
    with nothing queued before it and with 2 ms of busy work queued before it
    (:func:`gpulab.timing.warm_up_gpu`), plus the SM clock NVML reported just before
    and just after. ``repeats`` tries of each; rows of experiment ``idle``."""
    import cupy

    out = []
    for idle in idles_ms:
        for warm_ms in (0, 2):
            times, before, after = [], [], []
            for _ in range(repeats):
                cupy.cuda.Device().synchronize()
                time.sleep(idle / 1e3)
                before.append(gpu_state().get("sm_clock_mhz") or np.nan)
                if warm_ms:
                    warm_up_gpu(warm_ms)
                times.append(event_region(launch))
                after.append(gpu_state().get("sm_clock_mhz") or np.nan)
            out.append(Timing(times, method="cuda events, first kernel after idle").row(
                "idle", f"idle {idle} ms, " + ("2 ms of busy work first" if warm_ms else "nothing queued first"),
                n, **work(n), idle_ms=idle, warm_ms=warm_ms, sm_clock_before_mhz=float(np.nanmedian(before)),
                sm_clock_after_mhz=float(np.nanmedian(after))))
    return out


def first_launch_rows(n: int, x, y, z, tries: int = 3) -> list[dict]:
    """Compile time of a never-seen source, then its first launch (module load
    + launch + finish), then a steady-state launch, all on the host clock."""
    import cupy

    path = kernel_path(STEPS[0].file)
    compile_ms, first_ms, steady_ms = [], [], []
    for _ in range(tries):
        source = path.read_text() + f"\n// nonce {time.time_ns()}: defeats CuPy's kernel cache\n"
        t0 = time.perf_counter()
        module = _compile_gpu(path, source, ())
        compile_ms.append((time.perf_counter() - t0) * 1e3)
        fn = module.get_function(STEPS[0].kernel)
        args = (np.int32(n), A, x, y, z)
        grid = (STEPS[0].grid(n), 1, 1)
        t0 = time.perf_counter()
        fn(grid, (BLOCK, 1, 1), args)
        cupy.cuda.get_current_stream().synchronize()
        first_ms.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        fn(grid, (BLOCK, 1, 1), args)
        cupy.cuda.get_current_stream().synchronize()
        steady_ms.append((time.perf_counter() - t0) * 1e3)
    return [Timing(compile_ms, method="host timer").row("first_launch", "compile (NVRTC)", n, "compile"),
            Timing(first_ms, method="host timer").row("first_launch", "first launch", n, "kernel", **work(n)),
            Timing(steady_ms, method="host timer").row("first_launch", "second launch", n, "kernel", **work(n))]
