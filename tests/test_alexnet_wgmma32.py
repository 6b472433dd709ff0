"""AlexNet's float steps on wgmma (issue 26): step 26 (tf32) and step 27 (3xTF32, fp32 accuracy),
gpulab.workloads.alexnet.wgmma32 on kernels/common/hopper_conv.cuh's float GEMMs, against the
float64 reference with NaN-poisoned outputs, on layers whose channels, filters and images fill
no slice, tile or box. On a Hopper GPU the same tests run there."""
import dataclasses

import numpy as np
import pytest

import gpulab
from gpulab import ladder
from gpulab.errors import KernelArgumentError
from gpulab.workloads import alexnet
from gpulab.workloads.alexnet import launchers, wgmma32
from gpulab.workloads.alexnet import problem as shapes
from gpulab.workloads.convpool.problem import tf32_split

from test_hopper import _hopper_backend

PRECISION = {"26": "tf32", "27": "fp32"}
#: 40 channels: two slices of 32 per tap, the second mostly zeros; 140 filters: two tiles of 128;
#: a 9 x 11 image fills no box; K = 9 taps x 2 slices = 18 slices per tile, an even count (the
#: check layers' 9 and 25 are odd: step 27's loop retires its two partial sums differently).
TWO_SLICES = shapes.Layer(3, C=40, H=9, W=11, M=140, R=3, S=3, U=1, P=1)


def _alone(number, tile=None, blocks=None):
    """Step ``number`` on its wgmma family alone (no step for the layers it does not apply to),
    with ``tile`` on every layer and a grid of ``blocks``."""
    return dataclasses.replace(alexnet.CHAPTER.step(number), launcher=launchers.Wgmma32(tile=tile, blocks=blocks))


def _run(number, layer, x, w, be, tile=None, blocks=None):
    """y on the host: the step alone on host float inputs, its output poisoned."""
    return ladder.run(_alone(number, tile, blocks), shapes.Conv(layer, x.shape[0]), {"x": x, "w": w}, be)


def _bind(number, layer, N, x, w, y, be, tile=None, blocks=None):
    step = _alone(number, tile, blocks)
    return step.launcher.bind(step, shapes.Conv(layer, N), {"x": x, "w": w, "y": y}, be)


def _check(number, layer, be, tile=None, N=shapes.CHECK_N, seed=None, blocks=2):
    seed = int(np.random.SeedSequence().entropy % 2**31) if seed is None else seed
    x, w = shapes.make_inputs(layer, N, seed)
    y = _run(number, layer, x, w, be, tile=tile, blocks=blocks)
    result = gpulab.compare(y, shapes.reference(x, w, layer), PRECISION[number],
                            name=f"step {number} {layer.name} tile {tile} seed {seed}")
    assert result.passed and result.unwritten == 0, result
    return result


@pytest.mark.parametrize("number", ["26", "27"])
@pytest.mark.parametrize("index", [2, 3, 4, 5])
def test_each_step_matches_the_reference_on_the_check_layers_with_its_tiles(backend, number, index):
    # The check layers' 10, 17, 20, 19 channels (17 and 19 not even a 16-byte pixel: the copy
    # rounds them up to 20), 17-20 filters, 15 x 15 and 7 x 7 images; the zero border (P = 2, 1)
    # read at negative coordinates of the copy, which has none written out.
    be = _hopper_backend(backend)
    layer = shapes.CHECK_LAYERS[index - 1]
    # every rectangle on layers 2-3 (flat tiles and pairs: test_flat_tiles_run_across_rows_and_images),
    # the step's own tile (flat on layers 3-5) on each layer
    tiles = [None] + ([t for t in wgmma32.CANDIDATES[number] if t[0] > 0] if index in (2, 3) else [])
    for tile in tiles:
        _check(number, layer, be, tile)


@pytest.mark.parametrize("number", ["26", "27"])
def test_two_slices_per_tap_and_two_filter_tiles(backend, number):
    be = _hopper_backend(backend)
    for tile in wgmma32.CANDIDATES[number][:2]:
        _check(number, TWO_SLICES, be, tile, N=1)


@pytest.mark.parametrize("number", ["26", "27"])
def test_flat_tiles_run_across_rows_and_images(backend, number):
    # Flat tiles of 128 slots of the N x (H + P) x (W + P) copy: at N = 3 on the 9 x 11 layer
    # (10 x 12 = 120 slots an image) and on the 15 x 15, P = 2 one (17 x 17 = 289) tiles start
    # mid-row and mid-image and the last one runs past the last image; every output written. Pairs
    # (two blocks a cluster sharing B by multicast): 4 blocks, so that each walks two pairs.
    be = _hopper_backend(backend)
    for tile in [t for t in wgmma32.CANDIDATES[number] if t[0] in (wgmma32.FLAT, wgmma32.PAIR)]:
        _check(number, TWO_SLICES, be, tile, N=3, blocks=4)
        _check(number, shapes.CHECK_LAYERS[1], be, tile, N=3, blocks=4)


def test_flat_tiles_count_the_slots_of_the_copy():
    layer3, layer2 = alexnet.LAYERS[2], alexnet.LAYERS[1]
    assert wgmma32.flat_dims(layer3) == (14, 14) and wgmma32.flat_dims(layer2) == (29, 29)
    # 128 images x 196 slots = 196 runs of 128, times 3 tiles of 128 of the 384 filters
    assert wgmma32.tiles(layer3, 128, (wgmma32.FLAT, 128)) == 196 * 3
    # against 2 rectangles of 16 x 8 an image: 169 of 196 slots used, 169 of 256 pixels
    assert wgmma32.row_use(layer3, 128, (wgmma32.FLAT, 128)) == pytest.approx(169 / 196)
    assert wgmma32.row_use(layer3, 128, (16, 128)) == pytest.approx(169 / 256)
    assert wgmma32.row_use(layer2, 128, (wgmma32.FLAT, 256)) == pytest.approx(128 * 729 / (841 * 128))
    assert wgmma32.kernel_for("26", layer3, (wgmma32.FLAT, 256)) == "conv_wgmma_tf32_flat_256"
    assert wgmma32.kernel_for("27", layer3, (wgmma32.FLAT, 128)) == "conv_wgmma_3xtf32_flat_128"
    # pairs: layer 2's 841 runs of 128 slots make 421 pairs; an even grid, at least two blocks
    assert wgmma32.tiles(layer2, 128, (wgmma32.PAIR, 256)) == 842
    assert wgmma32.grid_blocks(layer2, 128, (wgmma32.PAIR, 256), 132) == 132
    assert wgmma32.grid_blocks(layer2, 1, (wgmma32.PAIR, 256), 1) == 2
    assert wgmma32.grid_blocks(layer3, 1, (wgmma32.PAIR, 256), 132) == 4      # 2 runs x 2 filter tiles
    assert wgmma32.kernel_for("26", layer3, (wgmma32.PAIR, 128)) == "conv_wgmma_tf32_pair_128"
    assert [wgmma32.tile_name(t) for t in ((32, 256), (wgmma32.FLAT, 192), (wgmma32.PAIR, 128))] == \
        ["32 x 256", "flat x 192", "pair x 128"]
    assert wgmma32.shared_bytes("26", 256, wgmma32.PAIR) == wgmma32.shared_bytes("26", 256) + 4 * 16


def test_3xtf32_keeps_float_accuracy_where_tf32_does_not(backend):
    # The same inputs through both steps: tf32 alone keeps ~3 digits, the split ~6-7.
    be = _hopper_backend(backend)
    layer, seed = TWO_SLICES, 5
    tf32 = _check("26", layer, be, N=1, seed=seed, tile=(8, 128))
    split = _check("27", layer, be, N=1, seed=seed, tile=(8, 128))
    assert tf32.rel_error > 1e-4
    assert split.rel_error < 1e-6 and split.rel_error < tf32.rel_error / 100


def _assert_copied(number, got, want):
    """Step 26's one copy is ``want`` (x channels-last), step 27's two its tf32 split, bit for bit
    the host's."""
    if number == "26":
        np.testing.assert_array_equal(got[0], want)
    else:
        big, small = tf32_split(want)
        np.testing.assert_array_equal(got[0].view(np.uint32), big.view(np.uint32))
        np.testing.assert_array_equal(got[1].view(np.uint32), small.view(np.uint32))


def test_the_copies_are_channels_last_and_step_27s_is_split_as_the_host_splits(backend):
    # The layout kernels alone, on the poisoned copies: every element written (C = 17 rounded up
    # to 20 channels, zeros past C), x as it was for step 26, xb + xs = x for step 27, bit for bit
    # the host's split.
    be = _hopper_backend(backend)
    layer = shapes.CHECK_LAYERS[2]
    x, w = shapes.make_inputs(layer, shapes.CHECK_N, seed=3)
    want = np.zeros((shapes.CHECK_N, layer.H, layer.W, 20), np.float32)
    want[..., :layer.C] = x.transpose(0, 2, 3, 1)
    for number in ("26", "27"):
        y = be.poisoned(layer.y_shape(shapes.CHECK_N), np.float32)
        launch = _bind(number, layer, shapes.CHECK_N, be.to_device(x), be.to_device(w), y, be,
                       tile=(8, 128), blocks=1)      # a rectangle: the dense copy
        copies = launch.keep[0]
        for copy in copies:
            copy[...] = np.nan
        launch.parts["layout"][0]()
        be.synchronize()
        _assert_copied(number, [be.to_host(copy) for copy in copies], want)


def test_the_flat_copies_put_each_pixel_in_its_slot_and_keep_the_zeros(backend):
    # The flat layout kernels alone, on copies whose zero rows and columns are made by binding:
    # image n's pixel (h, w) at slot (n (H + P) + h) (W + P) + w, zeros everywhere else.
    be = _hopper_backend(backend)
    layer, N = shapes.CHECK_LAYERS[1], 2                           # 15 x 15, P = 2, 10 channels
    hp, wp = wgmma32.flat_dims(layer)
    x, w = shapes.make_inputs(layer, N, seed=4)
    want = np.zeros((N, hp, wp, 12), np.float32)
    want[:, :layer.H, :layer.W, :layer.C] = x.transpose(0, 2, 3, 1)
    want = want.reshape(N * hp * wp, 12)
    for number in ("26", "27"):
        y = be.poisoned(layer.y_shape(N), np.float32)
        launch = _bind(number, layer, N, be.to_device(x), be.to_device(w), y, be,
                       tile=(wgmma32.FLAT, 128), blocks=1)
        launch.parts["layout"][0]()
        be.synchronize()
        _assert_copied(number, [be.to_host(copy) for copy in launch.keep[0]], want)


def test_refusals_name_what_was_expected():
    layer1, layer2 = shapes.CHECK_LAYERS[0], shapes.CHECK_LAYERS[1]
    x, w = shapes.make_inputs(layer1, 1, seed=1)
    with pytest.raises(KernelArgumentError, match="stride 4"):
        _run("26", layer1, x, w, "cpu")
    x, w = shapes.make_inputs(layer2, 1, seed=1)
    with pytest.raises(KernelArgumentError, match="not compiled for step 27"):
        _run("27", layer2, x, w, "cpu", tile=(8, 256))       # 3xTF32 has 128 filters per tile
    with pytest.raises(KernelArgumentError, match="not a float wgmma step"):
        _run("25", layer2, x, w, "cpu")


@pytest.mark.parametrize("number, layer1_step", [("26", "21"), ("27", "22")])
def test_the_ladder_runs_layer1_on_the_fastest_kernel_of_the_same_precision(number, layer1_step):
    from gpulab import device
    step, fallback = alexnet.CHAPTER.step(number), alexnet.CHAPTER.step(layer1_step)
    layer1, layer2 = alexnet.LAYERS[0], alexnet.LAYERS[1]
    assert step.precision == fallback.precision == PRECISION[number]
    assert launchers.fallback_step(step, layer1) is fallback
    assert launchers.main_kernel(step, layer1) == launchers.main_kernel(fallback, layer1)
    assert launchers.launch_config(step, layer1, 128) == launchers.launch_config(fallback, layer1, 128)
    assert [launchers.main_kernel(step, layer) for layer in alexnet.LAYERS[1:]] == \
        [wgmma32.kernel_for(number, layer) for layer in alexnet.LAYERS[1:]]
    # The checks of the ladder (layer 1 through the fallback) pass with poisoned outputs.
    table = gpulab.assert_ok(alexnet.CHAPTER.check("cpu", steps=[step]))
    assert (table["unwritten"] == 0).all() and len(table) == 5
    assert table.iloc[0]["note"].startswith(f"step {layer1_step}'s kernel")
    with device.simulate("L4") as l4:       # compute capability 8.9: no wgmma, no setmaxnreg
        why = launchers.unfit_reason(step, layer2, 128)
        assert "sm_90a" in why and l4.name in why
        assert launchers.unfit_reason(step, layer1, 128) is None


def test_shared_memory_and_scratch_as_the_rings_hold_them():
    layer4 = alexnet.LAYERS[3]
    # step 26: 4 slots of (128 + 256) x 32 floats; step 27: 3 slots of xb, xs, wb, ws (128 + 128 rows)
    assert wgmma32.shared_bytes("26", 256) == 4 * 384 * 32 * 4 + 1024 == 197_632
    assert wgmma32.shared_bytes("27", 128) == 3 * 2 * 256 * 32 * 4 + 1024 == 197_632
    # layer 4 (384 channels, 13 x 13) at N = 128: the copies (two for step 27) and both filter parts
    copy, filters = 128 * 13 * 13 * 384 * 4, 2 * 384 * 9 * 384 * 4
    assert wgmma32.scratch_bytes("26", layer4, 128, (16, 128)) == copy + filters
    assert wgmma32.scratch_bytes("27", layer4, 128, (16, 128)) == 2 * copy + filters
    flat = 128 * 14 * 14 * 384 * 4                  # flat tiles (layer 4's default): 14 x 14 slots an image
    assert wgmma32.scratch_bytes("27", layer4, 128) == 2 * flat + filters


def test_the_per_layer_table_and_the_channels_last_rule_read_the_run():
    # The chapter's tables for steps 26-27, on the recorded H100 run (steps it has in any version):
    # each step's column sums to its five-layer time, cuDNN's column is its fastest path of the
    # precision, a step the run lacks is NaN, and the channels-last rule agrees with input_rules'.
    run = gpulab.load_run(alexnet.CHAPTER, "H100")
    ladder = run.experiment("ladder")
    totals = alexnet.layer_totals(ladder)
    table = alexnet.views.per_layer(ladder, ["20", "21", "99"], "tf32")
    best = alexnet.views.vendor_best(totals, alexnet.MAIN_N, "tf32")
    assert list(table.index) == [1, 2, 3, 4, 5]
    assert list(table.columns) == ["step 20 (ms)", "step 21 (ms)", "step 99 (ms)", f"{best['variant']} (ms)"]
    for step in ("20", "21"):
        assert table[f"step {step} (ms)"].sum() == pytest.approx(alexnet.views.step_ms(totals, step))
    assert table["step 99 (ms)"].isna().all()
    assert table.iloc[:, -1].sum() == pytest.approx(best["median_ms"])
    nhwc = alexnet.input_rules(run).iloc[2]
    rule = alexnet.views.channels_last_rule(run, "25", "fp16")
    assert rule["step ms"] == pytest.approx(nhwc["step 25 ms"]) and rule["cuDNN ms"] == pytest.approx(nhwc["cuDNN ms"])
    rule = alexnet.views.channels_last_rule(run, "21", "tf32")
    assert "tf32, NHWC" in rule["cuDNN's fastest"] and rule["step ms"] < alexnet.views.step_ms(totals, "21")
