"""The AlexNet chapter's kernels, through the same checks the book runs."""
import dataclasses

import numpy as np
import pytest

import gpulab
from gpulab import ladder
from gpulab.workloads import alexnet
from gpulab.workloads.alexnet import launchers, steps, tc
from gpulab.workloads.alexnet.problem import Conv

CHAPTER = alexnet.CHAPTER


#: The steps slowest to check on the CPU backend (3-5 CPU-s each from a cold cache): marked slow, so
#: the quick loop (-m "not slow") checks the others (mma: 18, 19, 21; wgmma: 25, 28); the whole suite
#: checks every one, and the notebook again.
SLOW_TO_CHECK = ("20", "22", "26", "27")


# The exercise: test_exercises.py; the Winograd steps (on shapes of their own): test_alexnet_winograd.py.
@pytest.mark.parametrize("step", [pytest.param(s, marks=pytest.mark.slow) if s.number in SLOW_TO_CHECK else s
                                  for s in CHAPTER.steps if s not in steps.WINOGRAD_STEPS],
                         ids=lambda s: s.number)
def test_every_step_matches_the_reference(backend, step):
    checks = CHAPTER.check(backend, steps=[step])
    if checks["status"].str.startswith(ladder.SKIPPED).all():
        pytest.skip(checks["status"].iloc[0])
    gpulab.assert_ok(checks)
    assert list(checks["layer"]) == [layer.name for layer in alexnet.CHECK_LAYERS]


#: The check layers for every tile: layer 1 on a 67 x 67 image (15 x 15 outputs) on the CPU
#: backend instead of 139 x 139 (33 x 33), which cost four fifths of the test there. Its filters,
#: stride and channels are the same, so is its sum (3 x 11 x 11); its 2 x 225 pixels still leave
#: a partial tile of every width (64-256) and tiles that straddle the two images. The 33 x 33
#: output's two passes of a 17 x 17 block concern the direct steps (checked above), not these GEMMs.
MMA_CPU_LAYERS = [dataclasses.replace(alexnet.CHECK_LAYERS[0], H=67, W=67)] + alexnet.CHECK_LAYERS[1:]


@pytest.mark.slow
@pytest.mark.parametrize("step", steps.MMA_STEPS, ids=lambda s: s.number)
def test_the_mma_steps_match_the_reference_with_every_tile(backend, step):
    # Every tile a step may pick for any layer (steps 20 on pick per layer), on every layer.
    be = gpulab.get_backend(backend)
    names = sorted(set(tc.LAYER_KERNELS[step.number].values()))
    if step.number >= "20":
        prefix = "_".join(tc.kernel_for(step.number, alexnet.LAYERS[1]).split("_")[:2]) + "_"
        names = [n for n in tc.TILES if n.startswith(prefix) and n not in
                 ("conv_mma_ldmatrix", "conv_mma_cp_async")]
    layers = MMA_CPU_LAYERS if backend == "cpu" else alexnet.CHECK_LAYERS
    assert all(2 * layers[0].E * layers[0].F % width for width in (64, 96, 128, 256))   # partial tiles
    for layer in layers:
        case = Conv(layer, 2)
        inputs = case.inputs(None, step.precision)
        ref = case.reference(inputs, step.precision)
        for name in names:
            one_tile = dataclasses.replace(step, launcher=launchers.Mma(tile=name))
            result = gpulab.compare(ladder.run(one_tile, case, inputs, be), ref, step.precision,
                                    name=f"{name} {layer.name}")
            assert result.passed, str(result)


def test_the_channels_last_copy_has_its_border_and_aligned_runs():
    for layer in alexnet.LAYERS + alexnet.CHECK_LAYERS:
        for itemsize in (2, 4):
            g = tc.geometry(layer, itemsize)
            assert g.Cp >= layer.C and (g.Cp * itemsize) % 8 == 0 and g.L % g.chunk == 0
            assert g.L >= layer.S * g.Cp
            # the last pixel's run stays inside its padded row, and rows start 16-byte aligned
            assert (layer.F - 1) * layer.U + g.L // g.Cp <= g.Wp
            assert (g.Wp * g.Cp * itemsize) % 16 == 0 and (layer.U * g.Cp * itemsize) % 16 == 0 \
                or (g.Cp * itemsize) % 16 == 0


@pytest.mark.parametrize("C, H, W, Cp, Hp, Wp, P", [
    (3, 9, 7, 4, 11, 10, 1),      # layer 1's form: 4 channels, two pixels per chunk, a border, extra columns
    (3, 5, 5, 4, 5, 6, 0),
    (13, 5, 7, 16, 5, 7, 0),      # step 25's form: no border, channels padded past C
    (19, 4, 3, 24, 6, 5, 1),
], ids=["c4_border", "c4", "c16", "c24_border"])
def test_step28s_copy_writes_every_chunk_of_the_channels_last_layout(backend, C, H, W, Cp, Hp, Wp, P):
    be = gpulab.get_backend(backend)
    N = 3
    x = np.random.default_rng(C * H + P).standard_normal((N, C, H, W)).astype(np.float16)
    want = np.zeros((N, Hp, Wp, Cp), np.float16)
    want[:, P:P + H, P:P + W, :C] = x.transpose(0, 2, 3, 1)
    xt = be.poisoned((N, Hp, Wp, Cp), np.float16)
    launchers.chunk_copy(be.to_device(x), xt, C, H, W, P, be)()
    be.synchronize()
    np.testing.assert_array_equal(be.to_host(xt), want)     # a copy: exact, and no NaN left


def test_step28s_copy_refuses_layouts_it_cannot_write():
    x = np.zeros((1, 3, 5, 5), np.float16)
    with pytest.raises(gpulab.KernelArgumentError, match="multiple of 8"):
        launchers.chunk_copy(x, np.zeros((1, 5, 5, 4), np.float16), 3, 5, 5, 0, "cpu")   # 25 pixels: odd
    with pytest.raises(gpulab.KernelArgumentError, match="multiple of 8"):
        launchers.chunk_copy(x, np.zeros((1, 5, 6, 2), np.float16), 3, 5, 5, 0, "cpu")  # fewer than C
    with pytest.raises(gpulab.KernelArgumentError, match="border"):
        launchers.chunk_copy(x, np.zeros((1, 5, 6, 8), np.float16), 3, 5, 5, 1, "cpu")
    with pytest.raises(gpulab.KernelArgumentError, match="float16"):
        launchers.chunk_copy(x.astype(np.float32), np.zeros((1, 5, 6, 8), np.float16), 3, 5, 5, 0, "cpu")


def test_the_checks_use_shapes_that_break_sloppy_tiling():
    for layer in alexnet.CHECK_LAYERS:
        assert layer.M % 16 and layer.C % 8 or layer.index == 1     # not multiples of the tiles
        assert alexnet.padded_channels(layer) != layer.C               # step 16 pads every one
    bx, by = alexnet.block_shape(alexnet.CHECK_LAYERS[0])
    assert bx < alexnet.CHECK_LAYERS[0].F < 2 * bx                 # layer 1 needs two passes


def test_a_kernel_that_skips_the_last_filter_is_caught(tmp_path):
    # The check must be able to fail: step 2 with its grid one filter short.
    step = CHAPTER.step("02")
    layer = alexnet.CHECK_LAYERS[2]
    x, w = alexnet.make_inputs(layer, 2)
    module = gpulab.load_module(step.file, "cpu")
    y = np.full(layer.y_shape(2), np.nan, np.float32)
    bx, by = alexnet.block_shape(layer)
    module.conv_registers((layer.M - 1, 2), (bx, by), (x, w, y, *layer.dims(2)))
    result = gpulab.compare(y, alexnet.reference(x, w, layer))
    assert not result.passed and result.unwritten == 2 * layer.E * layer.F


def test_reference_matches_a_plain_loop():
    layer = alexnet.CHECK_LAYERS[1]
    x, w = alexnet.make_inputs(layer, 2, seed=3)
    p = layer.P
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)))
    expected = np.empty(layer.y_shape(2))
    for e in range(layer.E):
        for f in range(layer.F):
            window = xp[:, :, e * layer.U:e * layer.U + layer.R, f * layer.U:f * layer.U + layer.S]
            expected[:, :, e, f] = np.einsum("ncrs,mcrs->nm", window, w.astype(np.float64))
    np.testing.assert_allclose(alexnet.reference(x, w, layer), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(alexnet.numpy_conv(x, w, layer), expected, rtol=1e-4, atol=1e-5)


def test_layer_shapes_and_work():
    assert [(l.E, l.F) for l in alexnet.LAYERS] == [(55, 55), (27, 27), (13, 13), (13, 13), (13, 13)]
    assert [alexnet.block_shape(l) for l in alexnet.LAYERS] == [(28, 28), (27, 27), (13, 13), (13, 13), (13, 13)]
    # The figure: about 275 GFLOP for the five layers at N = 128.
    assert 275e9 < alexnet.total_flops(128) < 276e9
    layer1 = alexnet.LAYERS[0]
    assert layer1.flops(1) == 2 * 96 * 55 * 55 * 3 * 11 * 11
    assert layer1.bytes(1) == 4 * (3 * 227 * 227 + 96 * 3 * 11 * 11 + 96 * 55 * 55)
    # Step 7's partial sums at N = 128: C times the output (12.8 GB on layer 4).
    assert alexnet.scratch_bytes(CHAPTER.step("07"), alexnet.LAYERS[3], 128) == 128 * 384 * 384 * 169 * 4


def test_inputs_are_seeded_and_prefix_stable():
    layer = alexnet.LAYERS[2]
    x8, w8 = alexnet.make_inputs(layer, 8)
    x2, w2 = alexnet.make_inputs(layer, 2)
    np.testing.assert_array_equal(x8[:2], x2)     # the same first images at every batch size
    np.testing.assert_array_equal(w8, w2)
    assert x8.dtype == np.float32 and 0 <= x8.min() and x8.max() < 1 and np.abs(w8).max() > 0


def test_shared_memory_fits_or_is_opted_in():
    for step in CHAPTER.steps:
        for layer in alexnet.LAYERS:
            assert alexnet.shared_bytes(step, layer) <= 227 * 1024, (step.number, layer.name)
    # Layer 1's input patch (119 x 119 floats) is over the default 48 KB: the launch opts in.
    assert alexnet.shared_bytes(CHAPTER.step("09"), alexnet.LAYERS[0]) > 48 * 1024


def test_the_recorded_run_has_every_experiment():
    run = gpulab.load_run(alexnet.CHAPTER)
    assert "H100" in run.gpu
    ladder = run.experiment("ladder")
    # Steps added after the run was recorded have no rows at all; every view says "not recorded yet".
    unrecorded = alexnet.unrecorded_steps(ladder)
    assert set(unrecorded) <= {s.number for s in steps.WINOGRAD_STEPS}
    expected = {s.label for s in CHAPTER.steps if s.number not in unrecorded}
    for N in alexnet.BATCHES:
        at_n = ladder[ladder["size"] == N]
        for layer in alexnet.LAYERS:
            cudnn = at_n[(at_n["layer"] == layer.index) & (at_n["step"].astype(str) == "cuDNN")]
            assert {"fp32", "tf32", "fp16"} <= set(cudnn["precision"]), (N, layer.name)
            missing = expected - set(at_n[at_n["layer"] == layer.index]["variant"])
            skipped = alexnet.step_labels(run.tables["skipped"])
            listed = set(skipped[(skipped["size"] == N) & (skipped["layer"] == layer.index)]["step"])
            assert not {m for m in missing if m.split()[0] not in listed}, (N, layer.name, missing)
    for experiment in ("transfers", "scaling", "cpu", "ceilings"):
        assert not run.experiment(experiment).empty
    scaling = run.experiment("scaling")
    assert set(scaling["size"]) == set(alexnet.SCALING_BATCHES)
    assert {"cuDNN", *alexnet.SCALING_STEPS} <= set(scaling["step"].astype(str))
    assert "profile" in run.tables and set(alexnet.step_labels(run.tables["profile"])["step"]) >= {"02", "14", "16"}
    assert {"one core", "all cores"} <= {v.split(":")[0] for v in run.experiment("cpu")["variant"]}
    assert run.tables["checks"]["passed"].all()


def test_the_fastest_cudnn_path_of_matching_precision_is_the_baseline():
    totals = alexnet.layer_totals(gpulab.load_run(alexnet.CHAPTER).experiment("ladder"))
    cudnn = alexnet.totals_at(totals, alexnet.MAIN_N, ["cuDNN"])
    for precision, members in (("fp32", {"fp32"}), ("tf32", {"tf32"}), ("fp16", {"fp16", "bf16"})):
        best = alexnet.vendor_best(totals, alexnet.MAIN_N, precision)
        assert best["median_ms"] == cudnn[cudnn["precision"].isin(members)]["median_ms"].min()
        assert best["precision"] in members


def test_a_target_verdict_shows_its_margin_and_a_pass_inside_the_runs_spread():
    """Issue 26's targets as the prose glues them: met or missed by how much, against what, and a
    pass by less than the run's spread (step 25's 0.2% on the H100 run) said to be one."""
    import pandas as pd
    totals = pd.DataFrame({"size": [alexnet.MAIN_N] * 3, "step": ["a", "b", "c"],
                           "median_ms": [0.999, 0.94, 1.10], "q3_ms": [1.008, 0.947, 1.12]})
    close = alexnet.target_verdict(totals, "a", 1.0542, 0.95)
    assert close.startswith("met by 0.2%: 0.999 ms, under 0.95 x 1.054 = 1.001 ms") and "spread" in close
    clear = alexnet.target_verdict(totals, "b", 1.0542, 0.95)
    assert clear == "met by 6.1%: 0.940 ms, under 0.95 x 1.054 = 1.001 ms"
    assert alexnet.target_verdict(totals, "c", 1.0) == "missed by 10%: 1.100 ms against cuDNN's 1.000 ms"
    run_totals = alexnet.layer_totals(gpulab.load_run(alexnet.CHAPTER, "H100").experiment("ladder"))
    fp16 = alexnet.vendor_best(run_totals, alexnet.MAIN_N, "fp16")["median_ms"]
    row = alexnet.totals_at(run_totals, alexnet.MAIN_N, ["25"]).iloc[0]
    text = alexnet.target_verdict(run_totals, "25", fp16, 0.95)
    assert text.startswith("met" if row["median_ms"] <= 0.95 * fp16 else "missed")
    assert ("spread" in text) == (row["median_ms"] <= 0.95 * fp16 < row["q3_ms"])


def test_memory_budgets_come_from_the_device():
    from gpulab import device
    with device.simulate("T4"):
        assert alexnet.memory_limit() == 0.5 * device.PROFILES["T4"].total_memory
        why = launchers.unfit_reason(CHAPTER.step("07"), alexnet.LAYERS[1], 128)
        assert why and "GB of device memory" in why and "Tesla T4" in why
        assert launchers.unfit_reason(CHAPTER.step("14"), alexnet.LAYERS[1], 128) is None
        fits_t4 = alexnet.memory_table([128])["fits"]
    assert alexnet.memory_table([128])["fits"].sum() > fits_t4.sum()


def test_step17_splits_k_only_where_the_tiles_are_too_few():
    # At N = 128 only layer 5 (338 tiles for 264 resident blocks) splits; the reduced layers
    # of the checks run both the split (atomicAdd) and the unsplit (store) write-back.
    assert [alexnet.gemm_splits(layer, 128) for layer in alexnet.LAYERS] == [1, 1, 1, 1, 3]
    checked = [alexnet.gemm_splits(layer, alexnet.CHECK_N) for layer in alexnet.CHECK_LAYERS]
    assert 1 in checked and max(checked) > 1
    table = alexnet.gemm_offsets(alexnet.CHECK_LAYERS[1])
    assert len(table) % alexnet.GEMM_BK == 0 and (table[alexnet.CHECK_LAYERS[1].K:] == 0).all()


def test_the_recorded_run_says_which_algorithm_cudnn_chose():
    run = gpulab.load_run(alexnet.CHAPTER)
    algorithms = alexnet.cudnn_algorithms(run)
    assert set(algorithms["layer"]) == {layer.index for layer in alexnet.LAYERS}
    assert {"fp32", "tf32", "fp16", "bf16"} <= set(algorithms["precision"])
    assert {"NCHW", "NHWC"} <= set(algorithms["layout"])
    assert (algorithms["algorithm"] != "not read").all()


def test_the_cold_tables_gaps_are_the_ones_its_caption_names():
    # The notebook shows gaps as gpulab.runs.NOT_MEASURED with alexnet.COLD_GAP as the reason:
    # only cuDNN's CUDA-graph rows lack a cold time.
    import pandas as pd
    run = gpulab.load_run(alexnet.CHAPTER)
    ladder = run.experiment("ladder")
    both = pd.concat([alexnet.layer_totals(ladder[ladder["size"] == alexnet.COLD_N]).assign(l2="warm"),
                      alexnet.layer_totals(run.experiment("ladder_cold")).assign(l2="L2 flushed")])
    table = both.pivot_table(index="variant", columns="l2", values="median_ms", sort=False)
    gaps = table[table.isna().any(axis=1)].index
    assert len(gaps) and gaps.str.startswith("cuDNN").all() and gaps.str.endswith("CUDA graph").all()
    assert table.loc[table.index.str.startswith("cuDNN") & ~table.index.str.endswith("CUDA graph")].notna().all().all()
    assert "CUDA-graph rows are timed warm only" in alexnet.COLD_GAP


def test_gap_reason_names_the_skipped_layers_of_the_steps_shown_and_only_at_that_batch():
    # A GPU with 8 GB skips step 7's larger layers at N = MAIN_N (the live run under a 7.7 GB
    # share): the per-layer tables show "—" there and the caption says why, from the run's table.
    import types

    import pandas as pd
    skipped = pd.DataFrame({"step": [7, 7, 11, "cuDNN"], "layer": [2, 3, 2, 1],
                            "size": [alexnet.MAIN_N, alexnet.MAIN_N, alexnet.MAIN_N, 1],
                            "reason": ["needs 9.0 GB", "needs 8.1 GB", "needs 12 GB", "other batch"]})
    run = types.SimpleNamespace(tables={"skipped": skipped})
    why = alexnet.gap_reason(run, alexnet.MAIN_N, ["07", "08"])
    assert why == "skipped in this run: step 07, conv2: needs 9.0 GB; step 07, conv3: needs 8.1 GB"
    assert "step 11" in alexnet.gap_reason(run, alexnet.MAIN_N) and "other batch" not in alexnet.gap_reason(run, alexnet.MAIN_N)
    assert alexnet.gap_reason(types.SimpleNamespace(tables={}), alexnet.MAIN_N) == "not timed in this run"


def test_the_input_rules_compare_on_one_input_and_say_what_a_run_lacks():
    rules = alexnet.input_rules(gpulab.load_run(alexnet.CHAPTER, "H100"))
    assert len(rules) == len(alexnet.INPUT_RULES) and (rules["note"] == "").all()
    assert rules[["step 20 ms", "step 25 ms", "cuDNN ms"]].notna().all().all()
    ladder_rule, nchw, nhwc = rules.to_dict("records")
    # Given NCHW x, cuDNN's candidates are its NCHW paths and its channels-last path with the copy timed;
    # given channels-last x, only its channels-last paths (the ladder's own fastest fp16 path among them).
    assert ", NHWC, conv" not in nchw["cuDNN's fastest"] and ", NHWC," in nhwc["cuDNN's fastest"]
    assert ladder_rule["step 25 ms"] == nchw["step 25 ms"]
    assert nhwc["step 25 / cuDNN"] == pytest.approx(nhwc["step 25 ms"] / nhwc["cuDNN ms"])
    # The H200's run has every rule too; the same run as recorded before step 25 and the two
    # same-input experiments existed: NaN, and the rows say what the run lacks.
    h200 = gpulab.load_run(alexnet.CHAPTER, "H200")
    assert alexnet.input_rules(h200)[["step 25 ms", "cuDNN ms"]].notna().all().all()
    t = h200.timings
    before = t[~t["experiment"].isin(["ladder_nchw_input", "ladder_nhwc_input"]) & (t["step"] != "25")]
    old = alexnet.input_rules(dataclasses.replace(h200, timings=before.reset_index(drop=True)))
    assert old["step 25 ms"].isna().all() and old["note"].str.contains("not recorded").all()
    assert old["note"].iloc[0] == "step(s) 25 not recorded in this run"
    assert old["note"].iloc[1:].str.contains("no ladder_n").all()


def test_the_copy_table_splits_each_call_into_its_copy_and_its_gemm():
    run = gpulab.load_run(alexnet.CHAPTER, "H100")
    t = alexnet.copy_table(run, steps=("20", "25"))
    assert list(t["layer"].unique()) == [layer.index for layer in alexnet.LAYERS] and len(t) == 10
    np.testing.assert_allclose(t["copy (ms)"], t["given NCHW x (ms)"] - t["given channels-last x (ms)"])
    assert (t["copy (ms)"] > 0).all()          # the GEMM alone is faster than copy + GEMM
    # Step 25 runs layer 1 with step 20's kernel and copy: the same call, timed twice.
    layer1 = t[t["layer"] == 1].set_index("step")["given NCHW x (ms)"]
    assert layer1["25"] == pytest.approx(layer1["20"], rel=0.1)
    assert alexnet.copy_table(run, steps=("99",))[["given NCHW x (ms)", "copy (ms)"]].isna().all().all()



def test_the_ladder_is_data_and_each_step_names_its_family():
    # One way to find a step, the exercise among them; a step's family is its launcher, no string.
    assert CHAPTER.step(7) is CHAPTER.step("07") and CHAPTER.step("E1") is steps.EXERCISE
    assert CHAPTER.step("E1").launcher == launchers.Direct(filters_per_block=4)
    for step in [*CHAPTER.steps, *CHAPTER.exercises]:
        assert isinstance(step.launcher, launchers.Family) and not hasattr(step, "kind"), step.number
    # Exercise 1 is step 2's family with a quarter of the blocks along M.
    layer = alexnet.LAYERS[0]
    e1, s2 = (launchers.launch_config(CHAPTER.step(n), layer, 128) for n in ("E1", "02"))
    assert e1["grid"] == (-(-layer.M // 4), 128) and s2["grid"] == (layer.M, 128) and e1["block"] == s2["block"]


def test_a_step_hands_the_layers_its_family_does_not_apply_to_to_another_step():
    # Winograd (3 x 3, stride 1) and wgmma (stride 1): the other layers are the named step's,
    # kernel, launch, scratch and check row (which says so).
    for number, fallback in (("23", "22"), ("24", "22"), ("25", "20"), ("26", "21"), ("27", "22"), ("28", "20")):
        step = CHAPTER.step(number)
        assert launchers.fallback_step(step, alexnet.LAYERS[0]) is CHAPTER.step(fallback), number
        assert launchers.fallback_step(step, alexnet.LAYERS[3]) is step, number
        assert step.launcher.note(step, alexnet.LAYERS[0]).startswith(f"step {fallback}'s kernel: "), number
        assert step.launcher.note(step, alexnet.LAYERS[3]) == "", number
    table = CHAPTER.check("cpu", steps=[CHAPTER.step("24")], layers=alexnet.CHECK_LAYERS[1:3], N=1)
    assert list(table["kernel"]) == ["conv_split_128x128_k64", "conv_winograd_gemm"]
    assert list(table["note"]) == ["step 22's kernel: Winograd needs 3 x 3, stride 1", ""]


def test_step28_is_step25s_launch_with_layer_1s_copy_replaced():
    be = gpulab.get_backend("cpu")

    def layout(number, layer):
        step, case = CHAPTER.step(number), Conv(layer, 1)
        arrays = {name: be.to_device(a) for name, a in case.inputs(0, step.precision).items()}
        arrays["y"] = be.poisoned(*case.output(step.precision))
        return [part.__name__ for part in step.launcher.bind(step, case, arrays, be).parts["layout"]]
    layer1, layer3 = alexnet.CHECK_LAYERS[0], alexnet.CHECK_LAYERS[2]
    assert layout("25", layer1) == ["launch_to_padded_nhwc_half"]        # step 20's copy, its border written
    assert layout("28", layer1) == ["launch_to_nhwc_chunks_half"]
    assert layout("28", layer3) == layout("25", layer3) == ["launch_to_nhwc_half"]
