"""Chapter 2's kernels through the same checks the book runs, and its recorded run."""
import dataclasses

import numpy as np
import pytest

import gpulab
from gpulab import ladder
from gpulab.workloads import fcnet
from notebook_on_profile import execute_on_profile


#: The two steps slowest to check on the CPU backend (~2.3 CPU-s each from a cold cache): marked slow,
#: so the quick loop (-m "not slow") checks the others (13's small case, 17's two); the whole suite
#: checks every one, and the notebook again.
SLOW_TO_CHECK = (("18", "tf32x3"), ("13", "best_large"))


@pytest.mark.parametrize("step", [pytest.param(s, marks=pytest.mark.slow) if (s.number, s.kernels[0]) in SLOW_TO_CHECK
                                  else s for s in fcnet.CHAPTER.steps], ids=lambda s: f"{s.number}-{s.kernels[0]}")
def test_every_step_matches_the_reference(backend, step):
    result = fcnet.CHAPTER.check(backend, steps=[step])
    assert (result["status"] == "ok").all(), result.to_string()
    assert set(result["n"]) == {case.n for case in fcnet.CHAPTER.check_cases}
    if step.precision == "fp16":
        # Half precision costs accuracy, but stays well inside its tolerance.
        assert (result["rel_error"] > 1e-4).all() and (result["rel_error"] < 5e-3).all()


@pytest.mark.parametrize("step", fcnet.steps.MMA_STEPS, ids=lambda s: f"{s.number}-{s.kernels[0]}")
def test_the_mma_steps_match_the_reference(backend, step):
    result = fcnet.CHAPTER.check(backend, steps=[step], seed=int(np.random.SeedSequence().entropy % 2**31))
    assert (result["status"] == "ok").all(), result.to_string()
    assert set(result["n"]) == set(fcnet.problem.CHECK_SIZES)


def test_a_gpu_only_step_is_skipped_on_the_cpu_with_a_reason():
    gpu_only = dataclasses.replace(fcnet.CHAPTER.step(15), gpu_only=True)
    result = fcnet.CHAPTER.check("cpu", steps=[gpu_only])
    assert (result["status"] == "skipped: GPU only: the CPU backend cannot run this kernel").all()
    case = fcnet.problem.Vectors(10)
    with pytest.raises(NotImplementedError, match="step 15 .* cannot run here: GPU only"):
        ladder.run(gpu_only, case, case.inputs(0), backend="cpu")


def test_a_kernel_that_drops_half_of_each_dot_product_is_caught(tmp_path):
    # The check must be able to fail: without the shuffle that joins the two
    # half-rows, every hidden unit misses half of its sum.
    step = fcnet.CHAPTER.step(7)
    source = gpulab.show_source(step.file).text
    broken_source = source.replace("acc += __shfl_xor_sync(0xffffffffu, acc, 1);", "")
    assert broken_source != source
    broken = tmp_path / "07_no_shuffle.cu"
    broken.write_text(broken_source)
    bad_step = fcnet.steps.Step(7, str(broken), "no shuffle", step.launches)
    result = fcnet.CHAPTER.check("cpu", steps=[bad_step], sizes=(1000,))
    assert (result["status"] == "FAILED").all()


def test_every_output_is_written_even_in_a_partial_last_tile():
    # 4099 vectors: the last tile of every tiled step is partial; poisoned
    # outputs would show as NaN (unwritten) in the check.
    result = fcnet.CHAPTER.check("cpu", steps=fcnet.CHAPTER.rung(14) + fcnet.CHAPTER.rung(9), sizes=(33, 4099))
    assert (result["unwritten"] == 0).all() and (result["status"] == "ok").all()


def test_work_and_the_two_floors():
    assert fcnet.MACS_PER_VECTOR == 8960
    assert fcnet.work(10) == {"flops": 179_200.0, "bytes": 3040.0}
    floors = fcnet.floors_ms(fcnet.SIZES["large"], tflops=50.0, gbs=2000.0)
    assert floors["arithmetic_ms"] == pytest.approx(91.7504e9 / 50e12 * 1e3)
    assert floors["memory_ms"] == pytest.approx(1.55648e9 / 2000e9 * 1e3)
    rates = fcnet.measured_rates(gpulab.load_run(fcnet.CHAPTER))
    assert 40 < rates["fp32_tflops"] < 67 and 2000 < rates["copy_gbs"] < 3350 and rates["fp16_tensor_tflops"] > 300


def test_inputs_weights_and_reference_are_what_the_chapter_says():
    x = fcnet.make_inputs(5)
    assert x.shape == (72, 5) and x.dtype == np.float32
    assert not np.array_equal(x, fcnet.make_inputs(5, seed=1))
    w = fcnet.make_weights()
    assert {k: v.shape for k, v in w.items()} == {"W1": (64, 72), "W2": (64, 64), "W3": (4, 64)}
    y = fcnet.reference(x, w)
    manual = w["W3"] @ np.maximum(w["W2"] @ np.maximum(w["W1"] @ x.astype(np.float64), 0), 0)
    assert y.shape == (4, 5) and np.allclose(y, manual)
    forms = fcnet.weight_forms(w)
    assert forms["w1tc"].shape == (64, fcnet.TC_K1) and not forms["w1tc"][:, 72:].any()
    assert forms["w3tc"].shape == (fcnet.TC_M3, 64) and not forms["w3tc"][4:].any()
    assert np.array_equal(forms["w2t"], w["W2"].T)
    with pytest.raises(ValueError, match="positive number of vectors"):
        fcnet.make_inputs(0)


def test_launch_shapes_cover_the_vectors():
    matmul = fcnet.CHAPTER.step(1).launches[0]
    assert matmul.grid(1000) == (63, 4)                 # 16 vectors x 16 units per block
    assert fcnet.CHAPTER.step(1).launches[-1].grid(1000) == (63, 1)
    assert fcnet.CHAPTER.step(2).launches[0].grid(4099) == (1025, 1)
    persistent = fcnet.CHAPTER.step(9).launches[0]
    assert persistent.grid(4099) == (fcnet.launchers.CPU_PERSISTENT_BLOCKS, 1)
    assert persistent.grid(4099, resident_blocks=1000) == (129, 1)   # never more blocks than tiles
    small = [s.kernels[0] for s in fcnet.CHAPTER.rung(13) if s.sizes == ("small",)]
    assert small == ["best_small"]                                    # written for the small case
    with pytest.raises(KeyError, match=r"CHAPTER.rung\('13'\) lists them"):
        fcnet.CHAPTER.step(13)                                        # two kernels: one per case


def test_the_recorded_run_has_every_step_both_sizes_and_the_baselines():
    run = gpulab.load_run(fcnet.CHAPTER)
    assert "H100" in run.gpu
    ladder = run.experiment("ladder")
    for step in fcnet.STEPS:
        assert set(ladder.loc[ladder["variant"] == step.label, "size"]) == set(fcnet.SIZES.values())
    for case in fcnet.SIZES:
        for precision in ("fp32", "fp16"):
            assert fcnet.best_vendor(run.timings, case, precision, "eager") is not None, (case, precision)
            assert fcnet.best_vendor(run.timings, case, precision, "graph") is not None, (case, precision)
    assert (ladder["rel_error"] <= ladder["precision"].map(gpulab.TOLERANCE)).all()
    assert not run.experiment("transfers").empty and not run.experiment("ceilings").empty
    profile = run.tables["profile"]
    assert set(profile["step"]) == {s.ordinal for s in fcnet.STEPS}
    for column in ("shared_load_bank_conflicts", "sectors_per_request", "achieved_occupancy_pct"):
        assert profile[column].notna().all()
    resources = run.tables["resources"]
    assert set(resources["variant"]) == {s.label for s in fcnet.STEPS}


def test_steps_that_need_more_shared_memory_than_the_device_has_are_skipped_with_the_reason():
    from gpulab import device
    with device.simulate("T4"):
        ok, skipped = fcnet.launchers.runnable_steps(fcnet.CHAPTER.steps)
        assert {(s["step"], s["variant"]) for s in skipped} == {
            (14, "14 fp32 register tiles (large)"), (14, "14 fp32 register tiles (small)"),
            (15, "15 tensor cores (wmma fp16)"),
            (17, "17 mma.sync, activations in registers (large)"),      # 187,520 bytes
            (17, "17 mma.sync, activations in registers (small)"),      # 113,792
            (18, "18 fp32 accuracy on tensor cores (3xTF32)")}          # 165,888
        assert all("Tesla T4" in s["reason"] and "bytes of shared memory" in s["reason"] for s in skipped)
        checks = fcnet.CHAPTER.check("cpu", steps=[fcnet.CHAPTER.step(15)], sizes=(1000,))
        assert checks["status"].str.startswith("skipped: step 15").all()
    with device.simulate("L4"):
        # the L4's 99 KB per block: only the steps above 101,376 bytes are left out
        assert [s["variant"] for s in fcnet.launchers.runnable_steps(fcnet.CHAPTER.steps)[1]] == [
            "14 fp32 register tiles (large)", "17 mma.sync, activations in registers (large)",
            "17 mma.sync, activations in registers (small)", "18 fp32 accuracy on tensor cores (3xTF32)"]
    assert fcnet.launchers.runnable_steps(fcnet.CHAPTER.steps)[1] == [] or device.gpu_available()


def test_targets_use_the_fastest_vendor_path_of_matching_precision():
    run = gpulab.load_run(fcnet.CHAPTER)
    table = fcnet.targets(run).set_index("target")
    for what, case, precision, experiment, mode, _ in fcnet.TARGETS:
        best = fcnet.best_vendor(run.timings, case, precision, mode)
        assert table.loc[what, "vendor (ms)"] == best["median_ms"]
        assert table.loc[what, "floor (ms)"] > 0


def test_the_recorded_run_has_every_vendor_path_cold_timings_and_their_kernels():
    from gpulab import baselines
    run = gpulab.load_run(fcnet.CHAPTER)
    t = run.timings
    vendor = t[baselines.is_vendor(t)]
    for case, n in fcnet.SIZES.items():
        at = vendor[vendor["size"] == n]
        assert {"fp32", "tf32", "fp16", "bf16"} <= set(at["precision"])
        assert {"eager", "graph"} <= set(at["mode"]) and {"W@X", "X@W"} <= set(at["layout"])
        assert (at["rel_error"] <= at["precision"].map(gpulab.TOLERANCE)).all()
    cold = fcnet.warm_cold(run)
    assert cold is not None and cold["eager, L2 flushed (ms)"].notna().all()
    # The table's gaps are exactly what its caption says (fcnet.COLD_GAP): CuPy's chain, never graphed.
    gaps = cold[cold.isna().any(axis=1)]["variant"]
    assert len(gaps) and gaps.str.startswith("cuBLAS (CuPy)").all() and "CuPy's matmul chain" in fcnet.COLD_GAP
    assert gpulab.runs.gap_note(cold, fcnet.COLD_GAP, "H100") == f"{gpulab.runs.NOT_MEASURED}: {fcnet.COLD_GAP}; H100"
    assert gpulab.runs.gap_note(cold.dropna(), fcnet.COLD_GAP, "H100") == "H100"
    assert t.loc[t["experiment"] == "ladder_cold", "l2_flushed"].astype(bool).all()
    assert not t.loc[t["experiment"] == "ladder", "l2_flushed"].astype(bool).any()
    kernels = run.tables["vendor_kernels"]
    epilogue = kernels[kernels["variant"].str.contains("ReLU epilogue") & kernels["variant"].str.contains("fp16")]
    assert epilogue["kernels"].str.contains("relu").all(), "cuBLASLt's fused ReLU epilogue should run"
    assert run.meta["gpu_state"]["before"].get("source") in ("nvml", "nvidia-smi")


def test_the_eager_and_graph_figure_pairs_steps_whose_fastest_kernel_differs_each_way():
    # Live on an H100, step 13's tile-loop kernel was the faster eager and its one-tile kernel the
    # faster in a graph: the figure must pair the step, not look one kernel up in the other table.
    import dataclasses
    run = gpulab.load_run(fcnet.CHAPTER)
    t = run.timings.copy()
    n = fcnet.SIZES["small"]
    thirteen = [s.label for s in fcnet.CHAPTER.rung(13)]
    assert len(thirteen) == 2
    for experiment, faster in (("ladder", thirteen[0]), ("graph", thirteen[1])):
        at = (t["experiment"] == experiment) & (t["size"] == n)
        t.loc[at & (t["variant"] == faster), "median_ms"] = 1e-4
        t.loc[at & (t["variant"].isin(thirteen)) & (t["variant"] != faster), "median_ms"] = 1.0
    swapped = dataclasses.replace(run, timings=t)
    assert fcnet.ladder(t, "small").set_index("step").loc[13, "variant"] != \
        fcnet.ladder(t, "small", "graph").set_index("step").loc[13, "variant"]
    figure = fcnet.eager_vs_graph_figure(swapped, "small")
    bars = figure.axes[0].patches
    assert min(b.get_width() for b in bars) == pytest.approx(1e-4 * 1e3)


def test_only_vendor_paths_lack_an_error_against_fp32():
    # The fp16 error table shows these gaps with fcnet.FP32_GAP as the reason.
    from gpulab import baselines
    t = gpulab.load_run(fcnet.CHAPTER).experiment("ladder")
    half = t[(t["precision"] == "fp16") & (t["intended"].astype(str) == "True")]
    gaps = half[half["rel_error_vs_fp32"].isna()]
    assert len(gaps) and baselines.is_vendor(gaps).all() and "vendor paths" in fcnet.FP32_GAP
    assert half.loc[~baselines.is_vendor(half), "rel_error_vs_fp32"].notna().all()


def test_the_chunked_reference_is_the_whole_one_and_rejects_a_bad_chunk():
    # A chunk that does not divide n (and one larger than n) gives the same float64 result.
    rng = np.random.default_rng(3)
    weights = fcnet.make_weights()
    x = rng.standard_normal((fcnet.IN, 1037)).astype(np.float32)
    whole = fcnet.reference(x, weights, chunk=10_000)
    for chunk in (1, 100, 1036):
        # equal to float64 rounding (BLAS may sum a product in another order per shape)
        np.testing.assert_allclose(fcnet.reference(x, weights, chunk=chunk), whole, rtol=1e-12, atol=1e-13)
    with pytest.raises(ValueError, match="chunk must be a positive"):
        fcnet.reference(x, weights, chunk=0)


def test_the_live_run_plans_its_cases_to_the_devices_memory_and_says_why_it_skips_one():
    from gpulab.device import PROFILES
    chosen, skipped = fcnet.plan_sizes(fcnet.SIZES, PROFILES["8GB"])
    assert chosen == {"small": fcnet.SIZES["small"]}            # 8 GB: the large case does not fit
    assert [s["size"] for s in skipped] == [fcnet.SIZES["large"]]
    assert "needs 8.3 GB of device memory" in skipped[0]["reason"] and "7.7 GB" in skipped[0]["reason"]
    assert fcnet.plan_sizes(fcnet.SIZES, PROFILES["T4"]) == (dict(fcnet.SIZES), [])   # 16 GB: both
    assert fcnet.plan_sizes(fcnet.SIZES, None) == (dict(fcnet.SIZES), [])             # CPU: no limits


def test_as_measured_on_cuts_the_large_case_and_says_why():
    from gpulab.device import PROFILES
    run = gpulab.load_run(fcnet.CHAPTER, "H100")
    small = fcnet.record.as_measured_on(run, PROFILES["8GB"])
    sized = small.timings[small.timings["experiment"].isin(fcnet.record.SIZED_EXPERIMENTS)]
    assert set(sized["size"]) == {fcnet.SIZES["small"]}
    assert len(small.timings.query("experiment == 'ceilings'")) == len(run.timings.query("experiment == 'ceilings'"))
    assert "profile" not in small.tables and set(small.tables["vendor_kernels"]["case"]) == {"small"}
    why = fcnet.not_measured(small, "large")
    assert why.startswith("large case not measured on this GPU: needs 8.3 GB") and "7.7 GB" in why
    assert fcnet.not_measured(small, "small") is None and fcnet.not_measured(run, "large") is None
    assert fcnet.ladder(small.timings, "large").empty and fcnet.step_row(small, "large", 14).isna().all()
    large = fcnet.ladder(run.timings, "large")
    assert fcnet.step_row(run, "large", 14)["variant"] == large.query("step == 14")["variant"].iloc[0]
    assert fcnet.record.as_measured_on(run, PROFILES["T4"]).timings.equals(run.timings)   # 16 GB: both cases fit


@pytest.mark.slow
def test_the_notebook_reads_an_8gb_run_without_an_error_and_says_what_was_not_measured(monkeypatch):
    # On an 8 GB GPU (the lead's live check: an H100 share of 7.7 GB) the record skips the large
    # case (5,120,000 vectors need 8.3 GB). Execute every cell against the H100's run cut to that
    # profile and read the outputs: no error, no stderr, no "nan", the reason shown, and the
    # numbers of the large case glued as "not measured on this GPU".
    run = execute_on_profile("fcnet", "8GB", monkeypatch, gpu="H100", timeout=900, kernel_checks=False)
    for key in ("step5_gain", "large_vs_11", "s14_ms", "s14_registers", "vendor32_label", "s15_ms", "s17_ms",
                "s18_ms", "rtx_worst_step", "rtx_step7_gbs"):
        assert run.glued[key] == "not measured on this GPU", key
    assert float(run.glued["s17_small_us"]) > 0          # the small case's numbers are still the run's
    assert ">nan<" not in run.text and " nan " not in run.text and "nan ms" not in run.text
    assert "large case not measured on this GPU: needs 8.3 GB of device memory" in run.text
