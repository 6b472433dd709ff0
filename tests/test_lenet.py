"""The LeNet chapter: its data, its reference network, every kernel, the accuracy pipeline."""
import re
import shutil
import zipfile

import numpy as np
import pytest

import gpulab
from gpulab.workloads import lenet
from gpulab.workloads.lenet import data, launchers, network, problem
from notebook_on_profile import execute_on_profile


# ----------------------------------------------------------------- data preparation
def test_the_split_is_stratified_and_the_test_batch_uses_test_digits_only():
    d = lenet.load_digits()
    train, test = np.bincount(d["train_labels"], minlength=10), np.bincount(d["test_labels"], minlength=10)
    assert train.sum() + test.sum() == 1797                       # scikit-learn's bundled digits
    assert np.allclose(test / test.sum(), train / train.sum(), atol=0.01)   # same class mix
    assert d["test_source"].max() < len(d["test_images"])
    counts = np.bincount(d["test_source"], minlength=len(d["test_images"]))
    assert counts.min() >= data.TEST_BATCH // len(d["test_images"])          # every test digit used
    # No test digit is also a training digit (the bundled copy has no writer labels, so this is
    # the strongest separation it allows).
    train_set = {img.tobytes() for img in d["train_images"]}
    assert sum(img.tobytes() in train_set for img in d["test_images"]) <= 2


def test_rendering_is_deterministic_and_matches_the_stored_digest():
    images, labels = lenet.test_batch(data.TEST_BATCH)
    assert images.shape == (data.TEST_BATCH, 86, 86) and images.dtype == np.uint8
    assert data.digest(images) == str(lenet.load_digits()["test_sha256"])
    first, _ = lenet.test_batch(5)
    np.testing.assert_array_equal(first, images[:5])                # a prefix is the same images
    x, _ = lenet.test_inputs(3)
    assert x.shape == (3, 1, 86, 86) and x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
    assert (images.reshape(len(images), -1).max(axis=1) > 200).all()   # every image shows a digit


def test_augmentation_moves_the_digit():
    d = lenet.load_digits()
    rng = np.random.default_rng(0)
    digit = np.repeat(d["test_images"][:1], 2, axis=0)
    a = data.random_affines(2, rng)
    two = data.render(digit, a)
    assert not np.array_equal(two[0], two[1])                       # different maps, different images
    # The identity-like map of an unscaled, centred digit puts its ink in the middle of the frame.
    centred = data.random_affines(1, np.random.default_rng(1))
    centred[0] = [[1 / 8, 0, 4 - 0.5 - (43 - 0.5) / 8], [0, 1 / 8, 4 - 0.5 - (43 - 0.5) / 8]]
    img = data.render(digit[:1], centred)[0]
    assert img[:6].max() == 0 and img[-6:].max() == 0 and img[:, :6].max() == 0 and img[:, -6:].max() == 0
    assert img[30:56, 30:56].max() > 100


@pytest.mark.parametrize("damage", ["missing", "truncated", "wrong_shape", "wrong_dtype", "changed_pixels"])
def test_damaged_data_files_raise_a_clear_error(tmp_path, damage, monkeypatch):
    path = tmp_path / "digits.npz"
    shutil.copy(data.DIGITS_FILE, path)
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:5000])
    else:
        arrays = dict(np.load(path))
        if damage == "wrong_shape":
            arrays["test_affine"] = arrays["test_affine"][:, :1]
        elif damage == "wrong_dtype":
            arrays["test_images"] = arrays["test_images"].astype(np.float32)
        else:
            arrays["test_images"] = arrays["test_images"].copy()
            arrays["test_images"][0, 3, 3] ^= 1
        np.savez(path, **arrays)
    if damage == "changed_pixels":
        digits = data.load_digits(path)
        with pytest.raises(data.DataError, match="SHA-256.*lenet_prepare"):
            data.test_batch(data.TEST_BATCH, digits)
        return
    with pytest.raises(data.DataError, match="lenet_prepare.py"):
        data.load_digits(path)


def test_damaged_weights_raise_a_clear_error(tmp_path):
    path = tmp_path / "weights.npz"
    with pytest.raises(data.DataError, match="missing.*lenet_train.py"):
        network.load_weights(path)
    arrays = dict(np.load(network.WEIGHTS_FILE))
    arrays["conv2"] = arrays["conv2"][:, :2]
    np.savez(path, **arrays)
    with pytest.raises(data.DataError, match="'conv2' should be float32 of shape \\(16, 4, 7, 7\\).*lenet_train"):
        network.load_weights(path)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("conv1.npy", b"not an array")
    with pytest.raises(data.DataError, match="(corrupted|lacks).*lenet_train"):
        network.load_weights(path)


# ----------------------------------------------------------------- the reference network
def test_reference_convolution_matches_a_plain_loop():
    rng = np.random.default_rng(5)
    x = rng.random((2, 4, 12, 12))
    w = rng.standard_normal((3, 4, 7, 7))
    expected = np.empty((2, 3, 6, 6))
    for e in range(6):
        for f in range(6):
            expected[:, :, e, f] = np.einsum("nchw,mchw->nm", x[:, :, e:e + 7, f:f + 7], w)
    np.testing.assert_allclose(network.conv(x, w), expected, rtol=1e-12, atol=1e-12)
    pooled = network.pool2(expected)
    assert pooled.shape == (2, 3, 3, 3)
    assert pooled[1, 2, 0, 1] == expected[1, 2, 0:2, 2:4].max()


def test_layer_shapes_and_work():
    assert (lenet.CONV1.E, lenet.CONV1.P, lenet.CONV2.E, lenet.CONV2.P) == (80, 40, 34, 17)
    assert lenet.FLAT == 16 * 17 * 17
    # The memory floors: ~1.32 GB and ~1.0 GB at N = 10,000, unfused, fp32.
    assert lenet.CONV1.bytes(10_000) == 4 * (10_000 * 86 * 86 + 196 + 10_000 * 4 * 80 * 80)
    assert 0.99e9 < lenet.CONV2.bytes(10_000) < 1.0e9
    assert lenet.CONV2.flops(1) == 2 * 16 * 34 * 34 * 4 * 49


def test_the_trained_network_reproduces_its_stored_predictions():
    w = lenet.load_weights()
    x, labels = lenet.test_inputs(200)
    pred = lenet.predict(x, w)
    np.testing.assert_array_equal(pred, w["test_predictions"][:200])
    assert lenet.accuracy(pred, labels) > 0.9
    # The stored accuracy is that of the stored predictions on all 10,000 test images.
    _, all_labels = lenet.test_batch(data.TEST_BATCH)
    assert lenet.accuracy(w["test_predictions"], all_labels) == pytest.approx(float(w["test_accuracy"]))
    assert float(w["test_accuracy"]) > 0.93


# ----------------------------------------------------------------- every kernel
KERNEL_STEPS = [s for s in lenet.CHAPTER.steps if not (s.streams or s.graph)] + [lenet.CHAPTER.step("E1")]
#: The steps slowest to check on the CPU backend (1-3 CPU-s each): marked slow, so the quick loop
#: (-m "not slow") checks the others; the whole suite checks every one.
SLOW_TO_CHECK = ("04", "05", "08")
#: The batches checked on the CPU backend: 1, odd, and a batch of several images -- 13 where the
#: GPU checks problem.CHECK_SIZES' 100. Every kernel gives each image blocks of its own (the batch is
#: a grid dimension: (N, M, tiles), (tiles, M, N), (tiles, N), (N,)), so more images add blocks,
#: not tile edges; 100 images cost nine tenths of this test's CPU time.
CPU_CHECK_SIZES = (1, 7, 13)


@pytest.mark.parametrize("step", [pytest.param(s, marks=pytest.mark.slow) if s.number in SLOW_TO_CHECK else s
                                  for s in KERNEL_STEPS], ids=lambda s: s.number)
def test_every_kernel_matches_the_reference_on_odd_batches(backend, step):
    sizes = CPU_CHECK_SIZES if backend == "cpu" else problem.CHECK_SIZES
    checks = lenet.CHAPTER.check(backend, steps=[step], sizes=sizes)
    gpulab.assert_ok(checks)
    assert set(checks["N"]) == set(sizes) and set(checks["layer"]) == {"conv1", "conv2"}
    assert (checks["unwritten"] == 0).all()


def test_a_kernel_that_skips_the_last_filter_is_caught():
    step = lenet.CHAPTER.step("01")
    case = problem.LayerBatch(lenet.CONV2, 3)
    layer, inputs = case.layer, case.inputs(seed=1)
    module = gpulab.load_module(step.file, "cpu")
    y = np.full(layer.y_shape(3), np.nan, np.float32)
    module.conv_direct_global((3, layer.M - 1, 9), (16, 16),
                              (y, inputs["x"], inputs["w"], 3, layer.M, layer.C, layer.H, layer.W, 7))
    result = gpulab.compare(y, case.reference(inputs))
    assert not result.passed and result.unwritten == 3 * 34 * 34


def test_step13_packs_the_filters_in_the_fragment_layout():
    # Lane 4g + t's B registers (common/ptx.h): register q holds k = 2t + 8q and 2t + 8q + 1 of
    # column g. conv2: k = 16h + kl orders a channels-last run (s = 4h + kl // 4, c = kl % 4),
    # column 8j + g is a filter. conv1: k-step p covers input rows 2p + q, taps 2t, 2t + 1;
    # column g is filter g // 2 shifted down by g % 2 rows.
    rng = np.random.default_rng(2)
    w2 = rng.standard_normal(lenet.CONV2.w_shape).astype(np.float16)
    halves = launchers.pack_conv2_filters(w2).view(np.float16).reshape(7, 2, 2, 32, 2, 2)
    for r, h, j, lane, q, e in [(0, 0, 0, 0, 0, 0), (6, 1, 1, 31, 1, 1), (3, 1, 0, 13, 0, 1), (5, 0, 1, 22, 1, 0)]:
        g, t = divmod(lane, 4)
        kl = 2 * t + 8 * q + e
        s_, c = 4 * h + kl // 4, kl % 4
        assert halves[r, h, j, lane, q, e] == (w2[8 * j + g, c, r, s_] if s_ < 7 else 0)
    s7 = [(lane, q, e) for lane in range(32) for q in range(2) for e in range(2)
          if 4 + (2 * (lane % 4) + 8 * q + e) // 4 == 7]
    assert s7 and all((halves[:, 1, :, lane, q, e] == 0).all() for lane, q, e in s7)
    w1 = rng.standard_normal(lenet.CONV1.w_shape).astype(np.float16)
    halves1 = launchers.pack_conv1_filters(w1).view(np.float16).reshape(4, 32, 2, 2)
    for p_ in range(4):
        for lane in range(32):
            g, t = divmod(lane, 4)
            for q in range(2):
                for e in range(2):
                    r, s_ = 2 * p_ + q - g % 2, 2 * t + e
                    want = w1[g // 2, 0, r, s_] if 0 <= r < 7 and s_ < 7 else 0
                    assert halves1[p_, lane, q, e] == want, (p_, lane, q, e)
    with pytest.raises(ValueError, match=r"conv2's filters should have shape \(16, 4, 7, 7\), got \(4, 1, 7, 7\)"):
        launchers.pack_conv2_filters(w1)
    with pytest.raises(ValueError, match=r"conv1's filters should have shape \(4, 1, 7, 7\)"):
        launchers.pack_conv1_filters(w2)


def test_each_layer_lists_the_kernels_it_launches():
    # A family's kernels() names what its bind() launches (it looks the kernel up there), so the
    # resources table shows each layer its own kernel: step 13's file holds both layers'.
    from gpulab.workloads.lenet import views
    cpu = gpulab.get_backend("cpu")

    def kernels(number, layer):
        step = lenet.CHAPTER.step(number)
        return step.launcher.kernels(step, layer)
    for step in KERNEL_STEPS:
        for layer in lenet.LAYERS:
            assert set(step.launcher.kernels(step, layer)) <= set(step.launcher.module(step, layer, cpu).kernel_names)
    assert kernels("13", lenet.CONV1) == ("conv1_mma_relu_pool",)
    assert kernels("13", lenet.CONV2) == ("conv2_mma_nhwc_relu_pool",)
    assert kernels("10", lenet.CONV1) == ("conv_relu_pool",)
    assert kernels("11", lenet.CONV1) == ("conv_relu_pool_half",)
    resources = views.step_labels(gpulab.load_run(lenet.CHAPTER).tables["resources"])
    for (number, layer), rows in resources.groupby(["step", "layer"]):
        assert tuple(rows["kernel"]) == kernels(number, getattr(lenet, layer.upper()))


def test_padding_the_channels_for_cudnn_leaves_the_real_channels_unchanged():
    # What the padded cuDNN paths compute, in float64: conv1 on the images padded to 4 or 8
    # channels with its filters padded to 8, then conv2 on that padded output as it is. The real
    # channels are the unpadded layers' outputs, the padded ones zero (so ReLU and the pool keep
    # them zero, and conv2's zero filter channels read them without slicing).
    from gpulab.workloads.lenet import baselines as lb
    w = lenet.load_weights()
    x = np.random.default_rng(5).random((3, 1, 86, 86))
    for channels in lb.IMAGE_CHANNELS:
        padded = np.zeros((3, channels, 86, 86))
        padded[:, :1] = x
        y1 = network.conv(padded, lb.pad_filters(w["conv1"], lb.PAD_CHANNELS, channels))
        assert y1.shape == (3, lb.PAD_CHANNELS, 80, 80) and (y1[:, lenet.CONV1.M:] == 0).all()
        np.testing.assert_allclose(y1[:, :lenet.CONV1.M], network.conv(x, w["conv1"]), rtol=1e-12, atol=1e-12)
        a = network.pool2(np.maximum(y1, 0))
        y2 = network.conv(a, lb.pad_filters(w["conv2"], lenet.CONV2.M, lb.PAD_CHANNELS))
        np.testing.assert_allclose(y2, network.conv(a[:, :lenet.CONV1.M], w["conv2"]), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=r"M <= 8 and C <= 8, got \(16, 4, 7, 7\)"):
        lb.pad_filters(w["conv2"], 8, 8)


def test_the_padded_cudnn_paths_match_the_reference_or_say_why_not():
    # GPU-only paths: without CuPy and PyTorch each is skipped with the reason, never timed;
    # with them, each (eager and in a CUDA graph) passes its fp16 check on 7 images.
    from gpulab import baselines
    from gpulab.workloads.lenet import baselines as lb
    w = lenet.load_weights()
    x, _ = lenet.test_inputs(7)
    ref = network.forward(x, w)
    cases = [(lb.padded_layer_paths(lenet.CONV1, x, w["conv1"], pooled=True), ref["pool1"]),
             (lb.padded_layer_paths(lenet.CONV2, ref["pool1"].astype(np.float32), w["conv2"], pooled=True),
              ref["pool2"]),
             (lb.padded_forward_paths(x, w), ref["logits"])]
    for paths, reference in cases:
        assert paths and all(p.precision == "fp16" and p.layout == "NHWC" for p in paths)
        assert sum(p.graph for p in paths) == len(paths) // 2
        missing = paths[0].missing()
        if missing is None:
            import cupy
            reference = cupy.asarray(reference)
        rows, skipped = baselines.measure(paths, reference=reference, experiment="ladder", size=7,
                                          on_failure="skip", budget_ms=20.0, log=lambda *_: None)
        if missing is None:
            assert not skipped and len(rows) == len(paths)
        else:
            assert not rows and [s["variant"] for s in skipped] == [p.label for p in paths]
            assert all(s["reason"].startswith("unavailable: ") for s in skipped)


def test_the_fused_kernel_writes_only_the_pooled_output():
    # Poisoned outputs: step 10 must fill every pooled value of a batch whose pooled rows
    # (17) are not a multiple of anything but the block's own.
    checks = lenet.CHAPTER.check("cpu", steps=[lenet.CHAPTER.step("10")], sizes=(3,), seed=11)
    assert (checks["output"] == "pooled").all() and (checks["unwritten"] == 0).all()


# ----------------------------------------------------------------- the accuracy pipeline
@pytest.mark.parametrize("number", ["01", "10", "11", "13"])
def test_forward_passes_predict_like_the_reference(backend, number):
    w = lenet.load_weights()
    x, labels = lenet.test_inputs(7)
    result = lenet.check_forward(lenet.CHAPTER.step(number), x, w, backend)
    assert result["passed"] and result["unwritten"] == 0
    assert result["agree"] == 7
    np.testing.assert_array_equal(result["predictions"], w["test_predictions"][:7])


def test_accuracy_checks_its_arguments():
    assert lenet.accuracy([1, 2, 3], [1, 2, 0]) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="predictions for"):
        lenet.accuracy([1, 2], [1, 2, 3])


def test_preparing_again_gives_the_same_split_and_batch(tmp_path, monkeypatch):
    pytest.importorskip("sklearn")
    import importlib.util
    spec = importlib.util.spec_from_file_location("lenet_prepare", gpulab.paths.REPO / "tools" / "lenet_prepare.py")
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    monkeypatch.setattr(data, "DIGITS_FILE", tmp_path / "digits.npz")
    monkeypatch.setattr(data, "DATA_DIR", tmp_path)
    assert prepare.main() == 0
    fresh, stored = data.load_digits(tmp_path / "digits.npz"), lenet.load_digits()
    for name in data.DIGITS_ARRAYS:
        np.testing.assert_array_equal(fresh[name], stored[name], err_msg=name)


# ----------------------------------------------------------------- the training script and the recorded run
def test_training_gradients_match_finite_differences(monkeypatch):
    import importlib.util
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(var, "1")          # the script sets these on import; restored after the test
    spec = importlib.util.spec_from_file_location("lenet_train", gpulab.paths.REPO / "tools" / "lenet_train.py")
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    rng = np.random.default_rng(3)
    w = {k: v.astype(np.float64) for k, v in train.init_weights(rng).items()}
    w["fc1_bias"] += 0.1                      # some hidden units active
    x, y = rng.random((2, 86, 86)), np.array([3, 8])
    _, _, grads = train.step(w, x, y)
    for name in ("conv1", "conv2", "fc1", "fc2", "fc2_bias"):
        index = tuple(int(i) for i in np.unravel_index(np.argmax(np.abs(grads[name])), grads[name].shape))
        old, h = w[name][index], 1e-5
        w[name][index] = old + h
        plus = train.step(w, x, y)[0]
        w[name][index] = old - h
        minus = train.step(w, x, y)[0]
        w[name][index] = old
        assert (plus - minus) / (2 * h) == pytest.approx(float(grads[name][index]), rel=1e-3, abs=1e-6), name


def test_the_recorded_run_has_every_step_and_its_accuracy():
    from gpulab.workloads.lenet import views
    run = gpulab.load_run(lenet.CHAPTER)
    assert "H100" in run.gpu
    ladder = views.step_labels(run.experiment("ladder"))
    forward = views.step_labels(run.experiment("forward"))
    steps = {s.number for s in lenet.CHAPTER.steps if not (s.streams or s.graph)}
    for N in lenet.BATCHES:
        at_n = ladder[(ladder["size"] == N) & (ladder["phase"] == "layer")]
        for layer in ("conv1", "conv2"):
            assert steps <= set(at_n[at_n["layer"] == layer]["step"]), (N, layer)
        ours = views.ours(forward[forward["size"] == N])
        assert {s.number for s in lenet.CHAPTER.steps if not s.streams} <= set(ours["step"])
        # Every fp32 step predicts what the float64 reference predicts; fp16 within half a point.
        assert (ours[ours["precision"] == "fp32"]["agree_with_reference"] == 1.0).all(), N
        fp32 = float(ours[ours["precision"] == "fp32"]["accuracy"].iloc[0])
        assert (abs(ours[ours["precision"] == "fp16"]["accuracy"] - fp32) <= 0.005).all(), N
    assert set(views.both_layers(ladder)["size"]) == set(lenet.BATCHES)
    assert baselines_in(ladder) and baselines_in(forward)
    for name in ("timeline", "profile", "checks", "resources"):
        assert name in run.tables, name
    assert {1, 4} == set(run.tables["timeline"]["chunks"])


def baselines_in(rows) -> bool:
    from gpulab import baselines
    return bool(baselines.is_vendor(rows).any())


def test_the_padded_cudnn_paths_read_as_the_chapter_says():
    # Step 13's text on the H100's run: every padded path was checked and timed at every batch;
    # at N = 10,000 padding makes neither layer faster (so the fastest fp16 path is one on the
    # layers as given), at N = 1,000 it makes conv1 faster; every fp16 path, padded or not, runs
    # cuDNN's sm80 "indexed, without shared memory" implicit GEMM with tiles of 16 or 32 filters;
    # step 13g (the graph) is timed beside step 13.
    from gpulab import baselines
    from gpulab.workloads.lenet import views
    run = gpulab.load_run(lenet.CHAPTER)
    ladder = views.step_labels(run.experiment("ladder"))
    conv = ladder[baselines.is_vendor(ladder) & (ladder["phase"] == "conv")]
    padded = views.is_padded(conv)
    for N in lenet.BATCHES:
        assert padded[conv["size"] == N].sum() == 2 * 2 + 2, N        # conv1: 4 or 8 image channels; conv2; x graph

    def fastest(layer, is_padded, N):
        return float(baselines.fastest(conv[padded == is_padded], "fp16", size=N, layer=layer)["median_ms"])
    for layer in ("conv1", "conv2"):
        assert fastest(layer, True, 10_000) > fastest(layer, False, 10_000), layer
    assert fastest("conv1", True, 1_000) < fastest("conv1", False, 1_000)
    assert "padded" not in views.vendor_convs_ms(ladder, 10_000, "fp16", "conv")[1]
    table = views.cudnn_kernel_table(run.tables["cudnn_kernels"])
    assert len(table) == 7 and views.is_padded(table).sum() == 3
    for name in table["convolution kernel"]:
        assert name.startswith("sm80_xmma_fprop_implicit_gemm_indexed_wo_smem_"), name
        assert re.search(r"_tilesize128x(16|32)x\d+_", name), name
    forward = views.step_labels(run.experiment("forward"))
    assert {"13", "13g"} <= set(forward["step"])


def test_the_second_gpu_comparison_matches_what_the_chapter_says():
    # The H200 against the H100 at N = 10,000: every step that has its own kernels and every
    # cuDNN path; none memory-bound but step 13, which the roofline reads as memory-bound (its bytes
    # nearer their roof than its products) yet uses under half of the bandwidth and gains nothing;
    # and only step 4 (im2col's round trip through memory) of ours gaining more than a few
    # percent -- what the notebook's text says of the recorded runs.
    comparison = lenet.gpu_comparison()
    assert comparison is not None, "both the H100 and the H200 runs of lenet are recorded"
    table = comparison[0].set_index("variant")
    ours = [s.label for s in lenet.CHAPTER.steps if not (s.streams or s.graph)]
    assert set(ours) <= set(table.index)
    ours = [label for label in ours if label in table.index]
    assert len(ours) >= 10 and table.index.str.startswith("cuDNN").sum() >= 3
    s13 = lenet.CHAPTER.step("13").label
    others = table.drop(index=[s13], errors="ignore")
    assert (others["bound"] != "memory").all() and (others["predicted"] == 1.0).all()
    if s13 in table.index:
        assert table.loc[s13, "bound"] == "memory" and table.loc[s13, "predicted"] < 0.8
        assert table.loc[s13, "memory_use_a"] < 0.5 and table.loc[s13, "ratio"] > 0.97
    assert (table["memory_use_a"] > 0).all()                  # the vendor rows got their bytes
    mine = table.loc[ours, "ratio"]
    assert mine.idxmin() == lenet.CHAPTER.step("04").label and mine.drop(lenet.CHAPTER.step("04").label).between(0.97, 1.03).all()


# ----------------------------------------------------------------- the GPUs readers have (issue 17)
def test_step11_runs_fewer_warps_where_a_block_may_not_have_82_kb_of_shared_memory():
    from gpulab import device
    from gpulab.errors import KernelArgumentError
    assert launchers.WMMA_SHARED == launchers.wmma_shared(8) == 81_728
    with device.simulate("T4") as t4:
        # The 8-warp kernel is refused by the simulated T4 (65,536 bytes a block), as by a real one...
        kernel = gpulab.load_module(lenet.CHAPTER.step("11").file, "cpu").get_function("conv2_wmma_relu_pool")
        with pytest.raises(KernelArgumentError,
                           match="81,728 bytes of shared memory.*" + re.escape(f"{t4.name} allows 65,536")):
            kernel.allow_shared_memory(launchers.WMMA_SHARED)
        # ...so step 11 compiles 4 warps (51,008 bytes), says so, and still computes the layer.
        assert launchers.wmma_warps() == 4
        [change] = launchers.adaptations()
        assert change["step"] == "11" and "4 warps" in change["change"] and t4.name in change["reason"]
        checks = gpulab.assert_ok(lenet.CHAPTER.check("cpu", steps=[lenet.CHAPTER.step("11")], sizes=(1, 3), seed=4))
        assert (checks["unwritten"] == 0).all()
        w = lenet.load_weights()
        x, _ = lenet.test_inputs(3)
        assert lenet.check_forward(lenet.CHAPTER.step("12h"), x, w, "cpu")["agree"] == 3
    with device.simulate("L4"):          # 99 KB a block: the chapter's 8 warps
        assert launchers.wmma_warps() == 8 and launchers.adaptations() == []


def test_the_record_skips_a_batch_over_the_memory_budget_with_the_reason():
    from gpulab import device
    from gpulab.workloads.lenet import record
    assert 5e9 < record.footprint_bytes(10_000) < 6.5e9
    for profile in ("T4", "L4"):       # every batch fits half of 16 GB
        with device.simulate(profile):
            assert record.runnable_batches(record.BATCHES) == (list(record.BATCHES), [])
    small = device.DeviceLimits("an 8 GB GPU", shared_per_block=48 * 1024, total_memory=8 * 10**9)
    ok, skipped = record.runnable_batches(record.BATCHES, small)
    assert ok == [100, 1_000] and [s["size"] for s in skipped] == [10_000]
    assert "GB of device memory" in skipped[0]["reason"] and "an 8 GB GPU" in skipped[0]["reason"]


def test_the_report_comparison_divides_each_ladder_by_its_own_step_1():
    import pandas as pd
    from gpulab.workloads.lenet import views
    rng = np.random.default_rng(5)
    rows = [{"step": step, "variant": f"step {step}", "size": n, "phase": phase, "layer": layer,
             "median_ms": float(rng.uniform(1, 30))}
            for step in views.REPORT_OP_TIMES_MS for n in (1000, 10_000) for phase in ("conv", "layer")
            for layer in ("conv1", "conv2")]
    ladder = pd.DataFrame(rows)
    table = views.report_comparison(ladder)
    mine = ladder[(ladder["size"] == 10_000) & (ladder["phase"] == "conv")].set_index(["step", "layer"])["median_ms"]
    for step, (c1, c2) in views.REPORT_OP_TIMES_MS.items():
        assert table.loc[step, "report conv2 / step 1"] == pytest.approx(c2 / views.REPORT_OP_TIMES_MS["01"][1])
        assert table.loc[step, "this run conv1 / step 1"] == pytest.approx(mine[step, "conv1"] / mine["01", "conv1"])
    # The H100's recorded run: im2col makes conv2 faster than step 1 there, slower in the report.
    run = gpulab.load_run(lenet.CHAPTER, "H100")
    h100 = views.report_comparison(views.step_labels(run.experiment("ladder")))
    assert h100.loc["04", "this run conv2 / step 1"] < 1 < h100.loc["04", "report conv2 / step 1"]


@pytest.mark.slow
def test_the_notebook_reads_an_8gb_run_without_an_error_and_says_what_was_not_measured(monkeypatch):
    # On an 8 GB GPU (the lead's live check: an H100 share of 7.7 GB) the record skips the main
    # batch N = MAIN_N (its footprint is over half the memory). Execute every cell against the
    # recorded run cut to that profile (record.as_measured_on, through runnable_batches) and read
    # the outputs: no error, no stderr, no "nan", and the numbers of the main batch glued as
    # "not measured on this GPU".
    from gpulab.device import PROFILES
    from gpulab.workloads.lenet import record
    assert record.runnable_batches(lenet.BATCHES, PROFILES["8GB"])[0] != list(lenet.BATCHES)   # MAIN_N is cut
    run = execute_on_profile("lenet", "8GB", monkeypatch, kernel_checks=False)
    for key in ("step1_conv1", "s10_total", "s11_vs_s10_conv2", "fp32_forward", "fp16_changed"):
        assert run.glued[key] == "not measured on this GPU", key
    assert ">nan<" not in run.text and " nan " not in run.text
