"""Timers against a kernel of known duration (GPU only; never wall-clock asserts in CI)."""
import pytest

import gpulab
from gpulab import timing, transfers

pytestmark = pytest.mark.skipif(not gpulab.gpu_available(), reason="needs an NVIDIA GPU")

SPIN = r'''
extern "C" __global__ void spin(long long nanoseconds)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < nanoseconds);
}
'''


@pytest.fixture(scope="module")
def spin_2ms(tmp_path_factory):
    path = tmp_path_factory.mktemp("k") / "spin.cu"
    path.write_text(SPIN)
    module = gpulab.load_module(path, "gpu")
    return module.spin.bind(1, 1, (2_000_000,))


def test_events_measure_the_kernel(spin_2ms):
    t = timing.benchmark(spin_2ms, warmup=2, repeats=10, rel_ci=None)
    assert 1.95 <= t.median_ms <= 2.5
    assert t.summary()["repeats"] == 10


def test_the_stop_rule_stops_once_the_median_is_known(spin_2ms):
    # A 2 ms spin varies far less than 1%: the CI rule stops at its first chance (6 samples at 95%).
    t = timing.benchmark(spin_2ms, warmup=2, repeats=100)
    assert 6 <= t.summary()["repeats"] < 100 and "CI within" in t.stop
    row = t.row("x", "spin", 1)
    assert row["ci_half_width"] <= 0.01 and row["l2_flushed"] is False


def test_l2_flush_happens_outside_the_timed_region(spin_2ms):
    t = timing.benchmark(spin_2ms, warmup=1, repeats=8, rel_ci=None, flush_l2=True)
    assert 1.95 <= t.median_ms <= 2.5 and t.l2_flushed
    assert t.row("x", "spin", 1)["l2_flushed"] is True


def test_host_timer_without_sync_measures_only_the_launch(spin_2ms):
    queued = timing.host_timer(spin_2ms, synchronize=False, warmup=1, repeats=5)
    waited = timing.host_timer(spin_2ms, synchronize=True, warmup=1, repeats=5)
    assert waited.median_ms >= 1.95
    # Launches queue behind each other, so without a sync most return at once.
    assert queued.summary()["min_ms"] < 1.0


def test_graph_timing_is_per_launch(spin_2ms):
    t = timing.graph_benchmark(spin_2ms, launches=3, warmup=1, repeats=3)
    assert 1.95 <= t.median_ms <= 2.5
    import cupy
    on_given = timing.graph_benchmark(spin_2ms, launches=2, warmup=1, repeats=3,
                                      stream=cupy.cuda.Stream(non_blocking=True))
    assert 1.95 <= on_given.median_ms <= 2.5


def test_a_time_budget_caps_the_repeats(spin_2ms):
    # 2 ms per call and a 10 ms budget: about 5 repeats, never fewer than min_repeats.
    t = timing.benchmark(spin_2ms, repeats=100, budget_ms=10)
    assert 3 <= t.summary()["repeats"] <= 5
    assert timing.benchmark(spin_2ms, repeats=100, budget_ms=1, min_repeats=4).summary()["repeats"] == 4


def test_transfer_phases_add_up():
    import numpy as np
    from gpulab.workloads import measuring as saxpy

    fn = saxpy.kernel(saxpy.STEPS[0], "gpu")
    x, y = saxpy.make_inputs(1 << 20)
    for memory in transfers.MEMORY_KINDS:
        rows = {r["phase"]: r for r in transfers.transfer_breakdown(
            saxpy.transfers_launch(saxpy.STEPS[0], fn), [x, y], (1 << 20,), np.float32,
            memory=memory, warmup=1, repeats=3)}
        assert set(rows) == {"h2d", "kernel", "d2h", "total"}
        assert rows["h2d"]["bytes"] == x.nbytes + y.nbytes
        assert rows["total"]["median_ms"] >= rows["kernel"]["median_ms"] > 0
    row = transfers.overlap_with_streams(saxpy.transfers_launch(saxpy.STEPS[0], fn), [x, y], (1 << 20,),
                                         np.float32, chunks=4, warmup=1, repeats=3)
    assert row["chunks"] == 4 and row["median_ms"] > 0


@pytest.fixture(scope="module")
def spin_kernel(tmp_path_factory):
    path = tmp_path_factory.mktemp("k") / "spin_any.cu"
    path.write_text(SPIN)
    return gpulab.load_module(path, "gpu").spin


def test_host_work_before_a_launch_is_not_timed(spin_kernel):
    # 50 us on the host (as an eager framework call spends in its dispatcher), then a 10 us kernel:
    # queued, the call times as the launch alone does (the kernel's 10 us and the GPU's own few
    # microseconds from the start event to the kernel and back: 13.2 us on an H100); timed with
    # the GPU idle, 50 us or more longer.
    import time
    launch = spin_kernel.bind(1, 1, (10_000,))

    def eager_like():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 50e-6:
            pass
        launch()
    alone = timing.benchmark(launch, warmup=5, repeats=50, rel_ci=None)
    queued = timing.benchmark(eager_like, warmup=5, repeats=50, rel_ci=None)
    naive = timing.benchmark(eager_like, warmup=5, repeats=50, rel_ci=None, queued=False)
    assert 0.0095 <= alone.median_ms <= 0.016, alone
    assert abs(queued.median_ms - alone.median_ms) <= 0.001 and queued.queued, (queued, alone)
    assert naive.median_ms >= alone.median_ms + 0.045 and not naive.queued, (naive, alone)
    graph = timing.graph_benchmark(launch, launches=4, warmup=2, repeats=20, rel_ci=None)
    assert 0.0095 <= graph.median_ms <= alone.median_ms + 0.001, (graph, alone)


def test_the_crosscheck_agrees_with_do_bench_and_the_profiler(spin_kernel):
    pytest.importorskip("triton")
    pytest.importorskip("torch")
    found = timing.crosscheck(spin_kernel.bind(1, 1, (200_000,)))
    assert found["crosscheck_note"] == "", found
    for column in ("crosscheck_cold_ms", "crosscheck_warm_ms", "do_bench_ms", "profiler_ms"):
        assert 0.199 <= found[column] <= 0.210, (column, found)
    assert found["profiler_kernels"] == 1


def test_the_flush_writes_every_byte_of_its_buffer_and_evicts_l2():
    import cupy
    flusher = timing.L2Flusher.get()
    flusher.buffer.fill(-1)
    stream = cupy.cuda.get_current_stream()
    flusher.flush(stream)
    stream.synchronize()
    assert int((flusher.buffer != flusher.value).sum()) == 0, "the flush left part of its buffer unwritten"
    assert flusher.nbytes >= 2 * cupy.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]
    # A read of 16 MiB that fits in L2 is slower after a flush than straight after itself.
    x = cupy.ones(4 * 2**20, dtype=cupy.float32)
    total = lambda: x.sum()
    warm = timing.benchmark(total, warmup=3, repeats=30, rel_ci=None, min_span_ms=0.0).median_ms
    cold = timing.benchmark(total, warmup=3, repeats=30, rel_ci=None, min_span_ms=0.0, flush_l2=True).median_ms
    assert cold > 1.1 * warm, (cold, warm)


def test_do_bench_clears_the_labs_flush_buffer_in_the_crosscheck():
    pytest.importorskip("triton")
    from triton import runtime
    lab = timing.L2Flusher.get()
    with timing._do_bench_clears_the_labs_buffer():
        cache = runtime.driver.active.get_empty_cache_for_benchmark()
        assert cache.data_ptr() == lab.buffer.data.ptr and cache.numel() * 4 == lab.nbytes
        runtime.driver.active.clear_cache(cache)
    assert int((lab.buffer != 0).sum()) == 0
    assert runtime.driver.active.get_empty_cache_for_benchmark().data_ptr() != lab.buffer.data.ptr
