"""The timing module's statistics, without a GPU."""
import numpy as np
import pytest

from gpulab import timing


def test_median_ci_uses_order_statistics():
    # n = 100: 1 - 2 P(B <= 39) = 0.965 and 1 - 2 P(B <= 40) = 0.943 for B ~ Binomial(100, 1/2),
    # so the 95% interval is the 40th and 61st smallest (0-based 39 and 60).
    lo, hi = timing.median_ci(np.arange(100.0))
    assert (lo, hi) == (39.0, 60.0)
    # Four or five samples span the median 87.5% and 93.75% of the time: no 95% interval yet.
    for n in (3, 4, 5):
        assert np.isnan(timing.median_ci(np.arange(float(n)))[0]), f"too few samples ({n}) for a 95% interval"
    assert timing.median_ci(np.arange(6.0)) == (0.0, 5.0)


@pytest.mark.parametrize("n", [6, 9, 20, 41])
def test_the_median_ci_covers_the_true_median_as_often_as_it_says(n):
    # Skewed samples with a known median (ln 2 for the unit exponential): the interval must hold it
    # in at least 95% of draws (4,000 draws: the estimate's own standard error is about 0.35%).
    rng = np.random.default_rng(n)
    draws = rng.exponential(size=(4000, n))
    cis = np.array([timing.median_ci(d) for d in draws])
    covered = ((cis[:, 0] <= np.log(2)) & (np.log(2) <= cis[:, 1])).mean()
    assert covered >= 0.94, covered


def test_ci_half_width_is_relative_to_the_median():
    samples = np.full(50, 2.0)
    assert timing.ci_half_width(samples) == 0.0
    spread = np.linspace(0.9, 1.1, 101)
    assert 0.0 < timing.ci_half_width(spread) < 0.05
    assert np.isnan(timing.ci_half_width([1.0]))


def test_rows_say_whether_l2_was_flushed():
    row = timing.Timing([1.0, 1.1, 0.9], l2_flushed=True).row("ladder", "k", 10)
    assert row["l2_flushed"] is True
    assert list(row)[:len(timing.TIMING_COLUMNS)] == timing.TIMING_COLUMNS
    assert timing.Timing([1.0]).row("ladder", "k", 10)["l2_flushed"] is False


def test_the_stop_rule_is_stated():
    text = timing.STOP_RULE.describe()
    assert "95% confidence interval" in text and "±1%" in text
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        timing._rule(0, 3, None, 0.01, 0.95)


# ------------------------------------------------------------------ the timing loop on a simulated GPU
class SimulatedGpu:
    """A host clock and one in-order GPU queue, standing in for CuPy: every call into it costs the
    host ``call_ms``; a kernel runs ``ms`` on the GPU once the GPU reaches it; an event is written
    when the GPU reaches it (never before the host enqueued it); a wait moves the host's clock to
    the GPU's. Time in ms."""

    def __init__(self, call_ms=0.004, latency_ms=0.002):
        import types
        self.host = 0.0
        self.gpu_free = 0.0
        self.work_ended = 0.0      # when the GPU last ended work other than the guard's spin
        self.worked = []           # (start, end) of each piece of work, in order
        self.call_ms, self.latency_ms = call_ms, latency_ms
        sim = self

        class Stream:
            ptr = 1

            def synchronize(self):
                sim.host = max(sim.host, sim.gpu_free)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        class Event:
            def __init__(self, **options):
                self.at = None

            def record(self, stream=None):
                self.at = sim.enqueue(0.0)

            def synchronize(self):
                sim.host = max(sim.host, self.at)

        class RawKernel:
            def __init__(self, source, name):
                self.name = name

            def __call__(self, grid, block, args):
                # The guard spins for its argument (ns); the flush writes its buffer in 0.03 ms.
                if self.name == "gpulab_guard":
                    sim.enqueue(float(args[0]) / 1e6, work=False)
                else:
                    sim.enqueue(0.03)

        current = Stream()
        self.cupy = types.SimpleNamespace(
            RawKernel=RawKernel, int32=np.int32,
            empty=lambda n, dtype=None: types.SimpleNamespace(size=n),
            cuda=types.SimpleNamespace(
                Event=Event, Stream=lambda **o: Stream(), get_current_stream=lambda: current,
                Device=lambda *a: types.SimpleNamespace(id=0, synchronize=current.synchronize),
                get_elapsed_time=lambda a, b: b.at - a.at,
                runtime=types.SimpleNamespace(getDeviceProperties=lambda i: {"l2CacheSize": 50 * 2**20})))
        self.stream = current

    def enqueue(self, gpu_ms, work=True):
        """One call into the GPU's queue: its start on the GPU (an event's timestamp). ``work``
        False: a spin of one thread, which leaves the card as cool as idling does."""
        self.host += self.call_ms
        start = self.next_start()
        self.gpu_free = start + gpu_ms
        if work and gpu_ms:
            self.work_ended = self.gpu_free
            self.worked.append((start, self.gpu_free))
        return start

    def next_start(self):
        """When the GPU would start the next thing enqueued."""
        return max(self.host + self.call_ms + self.latency_ms, self.gpu_free)

    def host_work(self, ms):
        self.host += ms

    def perf_counter(self):
        return self.host / 1e3


@pytest.fixture
def simulated(monkeypatch):
    import sys
    import types
    sim = SimulatedGpu()
    monkeypatch.setitem(sys.modules, "cupy", sim.cupy)
    monkeypatch.setattr(timing, "require_gpu", lambda purpose="": None)
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=sim.perf_counter))
    monkeypatch.setattr(timing, "_WARM", {})
    monkeypatch.setattr(timing.L2Flusher, "_by_device", {})
    return sim


def host_then_kernel(sim, host_ms=0.050, kernel_ms=0.010):
    """A call that spends ``host_ms`` on the host (a dispatcher, a plan lookup), then launches a
    ``kernel_ms`` kernel: what an eager framework call looks like."""
    def call():
        sim.host_work(host_ms)
        sim.enqueue(kernel_ms)
    return call


@pytest.mark.parametrize("flush_l2", [False, True])
def test_queued_timing_leaves_the_hosts_dispatch_out(simulated, flush_l2):
    t = timing.benchmark(host_then_kernel(simulated), warmup=3, repeats=20, rel_ci=None, flush_l2=flush_l2)
    assert t.median_ms == pytest.approx(0.010, abs=0.001), t
    assert t.queued and t.row("x", "y")["queued"] is True


def test_the_naive_method_counts_the_dispatch(simulated):
    # The host waits, the GPU is idle when the start event is written: 50 us of host work is timed too.
    t = timing.benchmark(host_then_kernel(simulated), warmup=3, repeats=20, rel_ci=None, queued=False)
    assert t.median_ms >= 0.055 and not t.queued, t


def test_a_guard_too_short_for_the_dispatch_grows_and_the_sample_is_timed_again(simulated):
    # The warm-up sees a quick call; then the host work grows to 400 us, eight times the guard.
    calls = [0]

    def slower_later():
        calls[0] += 1
        simulated.host_work(0.001 if calls[0] <= 3 else 0.400)
        simulated.enqueue(0.010)
    t = timing.benchmark(slower_later, warmup=3, repeats=10, rel_ci=None)
    assert t.requeued >= 1 and t.queued
    assert t.median_ms == pytest.approx(0.010, abs=0.001), t


def test_a_graph_replay_is_queued_too(simulated, monkeypatch):
    # graph_benchmark's loop is the same: a replay's host cost (here 20 us) is not in its time.
    t, host, stop, requeued, queued = timing._event_loop(host_then_kernel(simulated, 0.020, 0.030),
                                                        simulated.stream, warmup=2, rule=None, repeats=10,
                                                        flush_l2=False, divide=3)
    assert np.median(t) == pytest.approx(0.010, abs=0.001) and queued


def test_parts_of_a_run_are_timed_queued(simulated):
    def run(span):
        for name, ms in (("first", 0.005), ("second", 0.020)):
            with span(name, simulated.stream):
                simulated.host_work(0.030)        # each part's launch costs the host 30 us
                simulated.enqueue(ms)
    samples = timing.span_samples(run, simulated.stream, repeats=5, warmup=2)
    assert np.median(samples["first"]) == pytest.approx(0.005, abs=0.001)
    assert np.median(samples["second"]) == pytest.approx(0.020, abs=0.001)


def test_the_crosscheck_keeps_only_each_groups_fastest(simulated, monkeypatch):
    timed = []
    # The rows of one comparison (the lab's fastest and the vendor's) are timed together.
    monkeypatch.setattr(timing, "crosscheck_interleaved", lambda items, **_: (timed.append(len(items)), [{
        **{c: 1.0 for c in timing.CROSSCHECK_COLUMNS}, "crosscheck_note": ""} for _ in items])[1])
    rows = []
    with timing.crosschecking(lambda row: row["experiment"] == "ladder") as check:
        for variant, ms in (("step 1", 0.030), ("step 2", 0.010), ("step 3", 0.020), ("cuBLAS", 0.015)):
            rows.append(timing.benchmark(host_then_kernel(simulated, 0.001, ms), warmup=1, repeats=5,
                                         rel_ci=None).row("ladder", variant, 64, precision="fp16"))
        rows.append(timing.benchmark(host_then_kernel(simulated), warmup=1, repeats=5, rel_ci=None)
                    .row("other", "step 2", 64))
        assert check.run(rows, log=lambda *a, **k: None) == 2
    checked = [r["variant"] for r in rows if "do_bench_ms" in r]
    assert checked == ["step 2", "cuBLAS"] and timed == [2]


def test_calls_are_timed_back_to_back_as_do_bench_times_them(simulated):
    # A card that idled before a kernel runs it 10% faster (cooler, a higher clock, as a GEMM at the
    # power limit does): the loop's samples are of calls that follow other calls, as do_bench's are.
    sim = simulated

    def heats_up():
        sim.host_work(0.004)
        cool = sim.next_start() + sim.call_ms - sim.work_ended > 0.020
        sim.enqueue(0.200 * (0.9 if cool else 1.0))
    t = timing.benchmark(heats_up, warmup=3, repeats=40, rel_ci=None)
    assert t.median_ms == pytest.approx(0.200, rel=1e-6) and t.queued, t
    # Each call alone behind its own guard (batch=1) runs cool every time: the trial runs' bias.
    alone = timing.benchmark(heats_up, warmup=3, repeats=10, rel_ci=None, batch=1)
    assert alone.median_ms == pytest.approx(0.180, rel=1e-6)


def test_a_batch_keeps_only_the_calls_the_gpu_did_not_wait_for(simulated):
    # 1 us kernels after 50 us of host work each: the GPU outruns the host inside a batch, so the
    # later calls of the first batch are dropped and the guard grows to cover the whole batch.
    t = timing.benchmark(host_then_kernel(simulated, 0.050, 0.001), warmup=3, repeats=60, rel_ci=None)
    assert t.requeued > 0 and t.queued
    assert len(t.samples_ms) == 60 and np.allclose(t.samples_ms, 0.001), t


def test_the_stop_rule_times_at_least_its_span_of_sustained_calls(simulated):
    # 0.2 ms calls that never vary: the CI is within 1% at once, but the rule times 100 ms of them
    # (as do_bench's rep does), and so at least 500 calls; without the span, the first batch (and
    # the one in flight when the rule stopped).
    t = timing.benchmark(host_then_kernel(simulated, 0.004, 0.200), warmup=3, repeats=100)
    assert t.samples_ms.size >= 500 and t.samples_ms.sum() >= 100.0, t.stop
    short = timing.benchmark(host_then_kernel(simulated, 0.004, 0.200), warmup=3, repeats=100, min_span_ms=0.0)
    assert short.samples_ms.size <= 2 * timing.MAX_BATCH


def test_a_budget_bounds_the_batch(simulated):
    t = timing.benchmark(host_then_kernel(simulated, 0.004, 2.0), warmup=3, repeats=100, budget_ms=10)
    assert 3 <= t.samples_ms.size <= 5 and "budget" in t.stop, t.stop


def test_calls_are_timed_once_the_card_has_settled(simulated):
    # A GEMM over the card's power limit: 0.180 ms a call for its first 80 ms of sustained work
    # (the boost clock), 0.200 ms after (an H100 SXM's 4096^3 fp16 GEMM, probe of 2026-12-07).
    # Idle for more than 1 ms, the card recovers. The loop times the sustained card.
    sim = simulated
    busy_since = [0.0]

    def over_the_power_limit():
        sim.host_work(0.004)
        start = sim.next_start() + sim.call_ms
        if start - sim.work_ended > 1.0:
            busy_since[0] = start
        sim.enqueue(0.180 if start - busy_since[0] < 80.0 else 0.200)
    # Without the stop rule's span, so that only the settling is tested.
    t = timing.benchmark(over_the_power_limit, warmup=3, repeats=100, flush_l2=True, min_span_ms=0.0)
    assert t.median_ms == pytest.approx(0.200, rel=1e-6), t


def test_the_crosscheck_criterion_is_3_percent_or_an_events_resolution():
    assert timing.crosscheck_agrees(1.000, 1.029) and not timing.crosscheck_agrees(1.000, 1.031)
    # A 5 us call: one level apart (0.6 us: every timer's readings of such a call take two levels
    # that far apart) agrees; 0.8 us does not.
    assert timing.crosscheck_agrees(0.0050, 0.0056) and not timing.crosscheck_agrees(0.0050, 0.0058)


def test_the_gpu_never_waits_between_batches(simulated):
    # 0.2 ms calls: the settling and 100 ms of timed calls (ten batches and more) run with the GPU
    # idle only where the first guard and the warm-up's waits put it, not once per batch.
    sim = simulated
    t = timing.benchmark(host_then_kernel(sim, 0.004, 0.200), warmup=3, repeats=100, flush_l2=True)
    assert t.samples_ms.size >= 500
    gaps = [b[0] - a[1] for a, b in zip(sim.worked, sim.worked[1:])]
    assert sum(gap > 0.010 for gap in gaps) <= 6, [g for g in gaps if g > 0.010]


def test_the_crosscheck_rotates_its_timers_and_keeps_each_ones_median(monkeypatch):
    # A clock that swings with the call's position in the sequence of timers: a timer always run
    # first would always see one part of the swing. Each round starts one timer later, and each
    # column is the median of its rounds.
    import sys
    import types
    order, clock = [], iter(np.tile([1.00, 1.10, 1.20, 1.30], 10))

    def timer(name):
        order.append(name)
        return next(clock)
    monkeypatch.setattr(timing, "benchmark", lambda fn, flush_l2=False, **_: timing.Timing(
        [timer("cold" if flush_l2 else "warm")]))
    monkeypatch.setattr(timing, "_settle", lambda *a, **k: 0.0)
    monkeypatch.setattr(timing, "_profiled_ms", lambda fn, calls: (timer("profiler"), 1))
    monkeypatch.setattr(timing, "_current_stream", lambda: None)
    monkeypatch.setattr(timing.L2Flusher, "get", classmethod(lambda cls: None))
    triton = types.ModuleType("triton")
    triton.testing = types.SimpleNamespace(do_bench=lambda fn, **_: timer("do_bench"))
    monkeypatch.setitem(sys.modules, "triton", triton)
    monkeypatch.setitem(sys.modules, "triton.testing", triton.testing)
    out = timing.crosscheck(lambda: None, rounds=4)
    assert order[:4] == ["cold", "do_bench", "warm", "profiler"]
    assert order[4:8] == ["do_bench", "warm", "profiler", "cold"]
    assert [order[4 * r] for r in range(4)] == ["cold", "do_bench", "warm", "profiler"]
    # Every timer saw every position once: each median is that of 1.0, 1.1, 1.2 and 1.3.
    for column in ("crosscheck_cold_ms", "crosscheck_warm_ms", "do_bench_ms", "profiler_ms"):
        assert out[column] == pytest.approx(1.15), column
    assert out["crosscheck_note"] == "" and out["profiler_kernels"] == 1


def test_a_smoke_run_neither_settles_nor_waits_for_the_span_and_says_so(simulated, monkeypatch):
    # The GPU check's notebooks, eight at once on one GPU: only that they run is checked.
    calls = []

    def kernel():
        calls.append(1)
        simulated.host_work(0.004)
        simulated.enqueue(0.200)
    monkeypatch.delenv(timing.SMOKE_ENV, raising=False)
    measured = timing.benchmark(kernel, warmup=3, repeats=20)
    full, calls[:] = len(calls), []
    monkeypatch.setenv(timing.SMOKE_ENV, "1")
    smoke = timing.benchmark(kernel, warmup=3, repeats=20)
    # Settling (at least 100 ms) and the span (100 ms) take 1,000 calls of 0.2 ms; a smoke run, its
    # warm-up and the batches the stop rule reads (one in flight as the first is read).
    assert full >= 1000 and len(calls) <= 3 + 2 * timing.MAX_BATCH, (full, len(calls))
    assert "smoke run" in smoke.method and "smoke run" not in measured.method
    assert "SMOKE RUN" in timing.describe_method()
    # graph_benchmark's rule and method come from the same place.
    assert timing._rule(10, 3, None, 0.01, 0.95).min_span_ms == 0.0
    assert "smoke run" in timing._as_run("cuda graph of 20 launches, queued")
    monkeypatch.delenv(timing.SMOKE_ENV)
    assert timing._rule(10, 3, None, 0.01, 0.95).min_span_ms == timing.STOP_RULE.min_span_ms
    assert "SMOKE" not in timing.describe_method()


def test_the_calls_of_one_comparison_are_crosschecked_round_by_round(monkeypatch):
    # Round 1: the lab's step's four timers, then the vendor's; round 2 the same, each rotated.
    seen = []
    monkeypatch.setattr(timing, "benchmark", lambda fn, flush_l2=False, **_: (seen.append(fn.__name__),
                                                                              timing.Timing([1.0]))[1])
    monkeypatch.setattr(timing, "_settle", lambda *a, **k: 0.0)
    monkeypatch.setattr(timing, "_profiled_ms", lambda fn, calls: (seen.append(fn.__name__), (1.0, 1))[1])
    monkeypatch.setattr(timing, "_current_stream", lambda: None)
    monkeypatch.setattr(timing.L2Flusher, "get", classmethod(lambda cls: None))
    monkeypatch.setitem(__import__("sys").modules, "triton", None)      # no Triton: do_bench says why

    def step():
        pass

    def vendor():
        pass
    out = timing.crosscheck_interleaved([(step, 1), (vendor, 2)], rounds=2)
    assert seen == ["step"] * 3 + ["vendor"] * 3 + ["step"] * 3 + ["vendor"] * 3
    assert out[0]["crosscheck_cold_ms"] == 1.0 and out[1]["crosscheck_cold_ms"] == 0.5     # per call
    assert "do_bench" in out[0]["crosscheck_note"] and out[0]["profiler_kernels"] == 1
