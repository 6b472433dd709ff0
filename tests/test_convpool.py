"""The conv + ReLU + max-pool chapter's kernels, through the same checks the book runs."""
import gc
import mmap
from dataclasses import replace

import numpy as np
import pytest

import gpulab
from gpulab import ladder
from gpulab.workloads import convpool
from gpulab.workloads.convpool import launchers as cl
from gpulab.workloads.convpool import problem
from gpulab.workloads.convpool import sweeps as cp_sweeps
from notebook_on_profile import execute_on_profile

CHAPTER = convpool.CHAPTER
step = CHAPTER.step


@pytest.mark.parametrize("rung", CHAPTER.steps, ids=lambda s: s.number)   # the exercise: tests/test_exercises.py
def test_every_step_matches_the_reference(backend, rung):
    checks = gpulab.assert_ok(CHAPTER.check(backend, steps=[rung]))
    assert checks["unwritten"].sum() == 0 and checks["rel_error"].iloc[0] < gpulab.TOLERANCE[rung.precision]


def test_the_check_shape_breaks_sloppy_tiling():
    s = problem.CHECK
    assert s.M % 32 and s.M < 128                                   # partial filter tiles everywhere
    assert s.C % 8 == 0 and s.C % 16 and s.C % 32                   # steps 6-8 run; no whole slices of 16/32
    assert s.PF % 8 and (s.N * s.PE * s.PF) % 32                    # partial strips and pixel tiles
    assert s.F % 16 and s.E % 2 == 0                                # step 3/4's 16-wide strips end short


def test_reference_matches_a_plain_loop():
    shape = problem.Shape(N=2, C=3, H=6, W=8, M=4)
    x, w, b = problem.make_inputs(shape, seed=5)
    assert (x[:, :, :2] == 0).all() and (x[:, :, :, -2:] == 0).all()      # the zero border
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    conv = np.empty(shape.conv_shape)
    for e in range(shape.E):
        for f in range(shape.F):
            conv[:, :, e, f] = np.einsum("ncrs,mcrs->nm", x64[:, :, e:e + 5, f:f + 5], w64) + b
    expected = np.empty(shape.y_shape)
    for pe in range(shape.PE):
        for pf in range(shape.PF):
            expected[:, :, pe, pf] = np.maximum(conv[:, :, 2 * pe:2 * pe + 2, 2 * pf:2 * pf + 2].max(axis=(2, 3)), 0)
    np.testing.assert_allclose(problem.reference(x, w, b), expected, rtol=1e-12, atol=1e-12)
    assert (expected > 0).any() and (expected == 0).any()         # both sides of the ReLU are exercised


def test_layer_work_and_bytes():
    layer = problem.LAYER
    assert (layer.Hp, layer.Wp, layer.E, layer.PE, layer.K) == (228, 228, 224, 112, 6400)
    assert 164.3e9 < layer.flops < 164.5e9                       # "about 164 GFLOP per image"
    assert layer.bytes() == 4 * (256 * 228 * 228 + 256 * 6400 + 256 + 256 * 112 * 112)
    assert layer.prepool_bytes() == 2 * 4 * 256 * 224 * 224      # written once, read back once
    assert layer.batch(32).flops == 32 * layer.flops
    with pytest.raises(ValueError, match="even image"):
        problem.Shape(N=1, C=8, H=5, W=8, M=4)
    with pytest.raises(ValueError, match="positive"):
        problem.Shape(N=0, C=8, H=4, W=8, M=4)


def test_a_launch_that_misses_an_image_is_caught():
    # The check must be able to fail: step 6 launched for one image of two leaves the second NaN.
    shape = problem.CHECK
    inputs = problem.Conv(shape).inputs(seed=2)
    y = np.full(shape.y_shape, np.nan, np.float32)
    ladder.bind(step("06"), problem.Conv(shape.batch(1)), {**inputs, "y": y}, "cpu")()
    result = gpulab.compare(y, problem.Conv(shape).reference(inputs))
    assert not result.passed and result.unwritten == shape.M * shape.PE * shape.PF


def test_the_pool_passes_a_nan_from_the_convolution_through():
    module = gpulab.load_module(cl.POOL_FILE, "cpu")
    conv = np.random.default_rng(0).random((1, 2, 4, 4)).astype(np.float32) - 0.5
    conv[0, 1, 3, 2] = np.nan                                    # one element of window (1, 1) of plane 1
    y = np.full((1, 2, 2, 2), -7.0, np.float32)
    module.relu_maxpool(1, 256, (conv, y, 2, 4, 4))
    expected = problem.pool_reference(conv.astype(np.float64))
    assert np.isnan(y[0, 1, 1, 1]) and np.isnan(expected[0, 1, 1, 1])
    np.testing.assert_allclose(np.nan_to_num(y, nan=9), np.nan_to_num(expected, nan=9), rtol=1e-7)


def test_strip_kernels_compute_the_layer_for_any_grid_and_block():
    case = problem.Conv(problem.CHECK)
    inputs = case.inputs(seed=3)
    ref = case.reference(inputs)
    five = step("05")
    for blocks, threads in ((1, 32), (3, 7), (500, 64)):       # fewer blocks than strips, odd blocks, more
        y = ladder.run(replace(five, blocks=blocks, threads=threads), case, inputs, "cpu")
        assert gpulab.compare(y, ref).passed, (blocks, threads)
    assert cl.strips(five, case.shape) == 2 * 7 * 2                # N x PE x ceil(PF / 8)
    assert cl.strips(replace(five, options=("-DQ=1",)), case.shape) == 2 * 7 * 10


def test_shapes_the_fast_kernels_cannot_run_are_refused_clearly():
    case = problem.Conv(problem.Shape(N=1, C=12, H=4, W=8, M=4))
    inputs = case.inputs(seed=0)
    with pytest.raises(ValueError, match="C must be a multiple of 8, got 12"):
        ladder.run(step("08"), case, inputs, "cpu")
    with pytest.raises(ValueError, match="C must be a multiple of 8, got 12"):
        ladder.run(step("06"), case, inputs, "cpu")
    gpulab.assert_ok(CHAPTER.check("cpu", [step("07")], shape=case.shape))   # tf32: 4 suffices


def test_launch_shapes_and_shared_memory():
    layer = problem.LAYER
    assert cl.config(step("06"), layer)["grid"] == (392, 2)
    tc = cl.config(step("08"), layer)
    assert tc["grid"] == (392, 2) and tc["shared"] == 3 * 256 * 80
    wide = cl.config(replace(step("08"), options=("-DTC_BN=256", "-DSTAGES=4")), layer)
    assert wide["grid"] == (196, 2) and wide["shared"] == 4 * 384 * 80 <= 227 * 1024
    assert cl.config(replace(step("05"), blocks=56, threads=64), layer) == {
        "grid": (56,), "block": (64,), "shared": 0}


@pytest.mark.skipif(not gpulab.gpu_available(), reason="needs a GPU: the register limit is the GPU's")
def test_a_block_too_large_for_the_registers_is_refused_with_the_reason():
    case = problem.Conv(problem.CHECK)
    with pytest.raises(gpulab.KernelArgumentError, match="registers per thread"):
        ladder.run(replace(step("04"), threads=1024), case, case.inputs(seed=0), "gpu")


def test_a_ceiling_measured_twice_gives_its_best_rate():
    # A live run once held the fp16 GEMM ceiling twice (measured by the shared ceilings and by
    # the chapter's own); the chapter's rates must take the best, not fail on the duplicate.
    import dataclasses
    import pandas as pd
    from gpulab.workloads.convpool import views
    run = gpulab.load_run(convpool.CHAPTER)
    ceilings = run.experiment("ceilings")
    fp16 = ceilings[ceilings["variant"] == "cuBLAS HGEMM (fp16)"]
    slower = fp16.assign(median_ms=fp16["median_ms"] * 2)
    twice = dataclasses.replace(run, timings=pd.concat([run.timings, slower], ignore_index=True))
    once = views.measured_rates(run)
    assert views.measured_rates(twice)["fp16_tflops"] == pytest.approx(once["fp16_tflops"])
    assert once["fp16_tflops"] > once["tf32_tflops"] > once["fp32_tflops"] > 0


def test_the_second_gpu_comparison_matches_what_the_chapter_says():
    # The H200 against the H100, one image: every step and eager cuDNN path; no path memory-bound;
    # steps 1-7 within a few percent (as predicted), step 8 gaining more than they do; and at 32
    # images cuDNN's fp32 NCHW path above the FP32 peak by the direct FLOP count (not a direct sum).
    from gpulab.workloads.convpool import views
    comparison = views.gpu_comparison(1)
    assert comparison is not None, "both the H100 and the H200 runs of convpool are recorded"
    table = comparison[0].set_index("variant")
    assert {s.label for s in CHAPTER.steps} <= set(table.index)
    assert not table.index.str.endswith("CUDA graph").any()
    assert (table["bound"] != "memory").all()
    fp32 = table.loc[[s.label for s in CHAPTER.steps if s.precision != "fp16" and s.number <= "07"], "ratio"]
    assert fp32.between(0.97, 1.03).all() and table.loc[step("08").label, "ratio"] < fp32.min()
    # step 9 (tensor pipe busy most of the time): "the same products" at one image and at 32
    assert 0.97 < table.loc[step("09").label, "ratio"] < 1.03
    at32 = views.gpu_comparison(32)[0].set_index("variant")
    assert 0.97 < at32.loc[step("09").label, "ratio"] < 1.03
    assert at32.loc["cuDNN (PyTorch) fp32, NCHW, conv + ReLU + maxpool 2/2", "compute_use_a"] > 1


# ----------------------------------------------------------------- the GPUs readers have (issue 17)
def test_on_a_t4_the_tensor_core_steps_and_the_largest_batch_are_skipped_with_the_reason():
    from gpulab import device
    with device.simulate("T4") as t4:
        # cp.async and tf32 need compute capability 8.0; a T4 has 7.5. The CPU backend could run
        # the kernels, but the simulated device refuses them, as the real one would.
        checks = gpulab.assert_ok(CHAPTER.check("cpu", steps=[step(n) for n in ("06", "07", "08")]))
        status = checks.set_index("step")["status"]
        assert status["06"] == "ok"
        for number in ("07", "08"):
            assert status[number].startswith("skipped: needs compute capability 8.0") and f"{t4.name} has 7.5" in status[number]
        case = problem.Conv(problem.CHECK)
        with pytest.raises(NotImplementedError, match="compute capability 8.0"):
            ladder.run(step("08"), case, case.inputs(seed=3), "cpu")
        with pytest.raises(gpulab.errors.KernelArgumentError, match="compute capability 8.0"):   # its family's own refusal
            step("08").launcher.bind(step("08"), case, case.inputs(seed=3), "cpu")
        # N = 32 holds 8.8 GB at once in the record: over half of the T4's 16 GB, fine on an L4.
        why = cl.unfit_reason(step("06"), problem.LAYER.batch(32))
        assert "GB of device memory" in why and t4.name in why
        assert cl.unfit_reason(step("06"), problem.LAYER.batch(8)) is None
        tiles = cp_sweeps.tile_sweep("cpu", batches=(2,), stages=(3,), pixels=(128,), shape=problem.CHECK)
        assert (tiles["status"] == "invalid").all() and tiles["reason"].str.contains("compute capability").all()
    with device.simulate("L4"):
        assert cl.unfit_reason(step("08"), problem.LAYER.batch(32)) is None
    assert cl.unfit_reason(step("08"), problem.LAYER.batch(32)) is None or device.gpu_available()


def test_tile_sweep_points_over_the_l4s_shared_memory_are_invalid_with_the_reason():
    from gpulab import device
    with device.simulate("L4"):          # 101,376 bytes per block: 256-pixel tiles fit 3 stages, not 4
        tiles = cp_sweeps.tile_sweep("cpu", batches=(2,), stages=(3, 4), pixels=(256,), steps=("08",),
                                           shape=problem.CHECK)
    by_stages = tiles.set_index("STAGES")
    assert by_stages.loc[3, "status"] == "ok" and by_stages.loc[3, "shared_bytes"] == 92_160
    assert by_stages.loc[4, "status"] == "invalid"
    assert "122,880 bytes of shared memory" in by_stages.loc[4, "reason"] and "NVIDIA L4" in by_stages.loc[4, "reason"]


def test_the_record_plan_on_a_t4_skips_the_tensor_core_steps_and_batch_32():
    from gpulab import device
    from gpulab.workloads.convpool import record
    planned, skipped = record.plan(problem.BATCHES, device.PROFILES["T4"])
    assert {N: [s.number for s in steps] for N, steps in planned.items()} == {
        1: ["01", "02", "03", "04", "05", "06"], 8: ["05", "06"]}
    assert [(r["variant"][:2], r["size"]) for r in skipped] == [
        ("07", 1), ("08", 1), ("09", 1), ("10", 1), ("11", 1), ("07", 8), ("08", 8), ("09", 8), ("10", 8), ("11", 8),
        ("ev", 32)]
    assert record.plan(problem.BATCHES, None)[1] == []              # no limits: everything is measured


@pytest.mark.slow
def test_the_notebook_reads_a_t4_run_without_an_error_and_says_what_was_skipped(monkeypatch):
    # A live run on a T4 lacks steps 7-8 (compute capability 7.5) and N = 32 (memory). Execute
    # every cell of the notebook against the recorded run cut to the T4's profile
    # (record.as_measured_on, through the record's own plan) and read the outputs.
    run = execute_on_profile("convpool", "T4", monkeypatch)
    for key in ("fp16_ms", "tf32_ms", "step8_tflops", "tuned1_gain", "tuned32_gain", "step6_32_ms", "fp16_gap32",
                "copies16_1", "tf32_error"):
        assert run.glued[key] == "not measured on this GPU", key
    assert float(run.glued["step6_ms"]) > 0 and run.glued["fp32_met"] == "met"
    assert "needs compute capability 8.0 or newer for step 07" in run.text and "Tesla T4 has 7.5" in run.text
    assert "skipped: N = 32, every step and cuDNN path: needs 8.8 GB of device memory" in run.text   # the targets



def _own_mapping(be, a):
    """A device copy of ``a``. On the CPU backend in memory of its own (an anonymous mmap), which
    the operating system unmaps as soon as the array is collected: a launch that reads it after
    that crashes or reads whatever was mapped there next, whatever the allocator does."""
    if be.name == "gpu":
        return be.to_device(a)
    out = np.frombuffer(mmap.mmap(-1, max(a.nbytes, 1)), dtype=a.dtype, count=a.size).reshape(a.shape)
    out[...] = a
    return out


@pytest.mark.parametrize("number", ["09", "10", "11"])
def test_a_tensor_map_step_launched_from_temporaries_reads_its_own_inputs(backend, number):
    # A tensor map holds only its array's address: the launch must keep x and the filters alive.
    # They are temporaries here, collected before the launch runs; new arrays of the same sizes
    # (CuPy's pool hands a freed block out again; the kernel maps a freed range again), filled with
    # other values, then take their place; y starts as NaN.
    from test_hopper import _hopper_backend
    be = _hopper_backend(backend)
    rung = step(number)
    case = problem.Conv(problem.Shape(N=1, C=24, H=4, W=10, M=20))
    host = case.inputs(seed=int(np.random.SeedSequence().entropy % 2**31))
    y = be.poisoned(case.shape.y_shape, np.float32)
    inputs = {k: _own_mapping(be, v) for k, v in host.items()}
    sizes = [(v.shape, v.dtype) for v in inputs.values()]
    launch = rung.launcher.bind(rung, case, {**inputs, "y": y}, be)
    del inputs
    gc.collect()
    squatters = [_own_mapping(be, np.full(s, 1e4, dtype=d)) for s, d in sizes]
    launch()
    be.synchronize()
    result = gpulab.compare(be.to_host(y), case.reference(host), rung.precision, name=f"step {number}")
    assert result.passed and result.unwritten == 0, result
    del squatters
