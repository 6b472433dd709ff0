"""The AlexNet chapter's Winograd steps (23, 24): the transforms, the kernels against the
float64 reference on shapes that are not multiples of the tiles, and the layers they hand
to another step."""
import numpy as np
import pytest

import gpulab
from gpulab.workloads import alexnet
from gpulab.workloads.alexnet import launchers, steps
from gpulab.workloads.alexnet import winograd as wino
from gpulab.workloads.alexnet.problem import Conv

#: Odd planes that the 2 x 2 and 4 x 4 tiles overhang on both sides (H != W), odd channel and
#: filter counts, and one layer without padding (P = 0: E = H - 2).
ODD_LAYERS = [
    alexnet.Layer(4, C=11, H=9, W=5, M=9, R=3, S=3, U=1, P=1),      # -> 9 x 9 x 5
    alexnet.Layer(5, C=6, H=10, W=7, M=5, R=3, S=3, U=1, P=0),      # -> 5 x 8 x 5
]


@pytest.mark.parametrize("m", sorted(wino.MATRICES))
def test_one_tile_of_winograd_is_direct_correlation(m):
    rng = np.random.default_rng(m)
    d, g = rng.standard_normal((m + 2, m + 2)), rng.standard_normal((3, 3))
    direct = np.array([[np.sum(d[i:i + 3, j:j + 3] * g) for j in range(m)] for i in range(m)])
    np.testing.assert_allclose(wino.winograd_tile(d, g, m), direct, rtol=1e-12, atol=1e-12)
    # In float32 the larger tile's constants cost accuracy: its error is the larger one.
    errors = {}
    for tile in sorted(wino.MATRICES):
        d32 = rng.random((200, tile + 2, tile + 2)).astype(np.float32)
        g32 = rng.uniform(-1, 1, (200, 3, 3)).astype(np.float32)
        ref = [[[np.sum(dd[i:i + 3, j:j + 3].astype(np.float64) * gg) for j in range(tile)] for i in range(tile)]
               for dd, gg in zip(d32, g32)]
        got = np.array([wino.winograd_tile(dd, gg, tile) for dd, gg in zip(d32, g32)])
        errors[tile] = np.linalg.norm(got - np.array(ref)) / np.linalg.norm(ref)
    assert errors[2] < errors[4] < 1e-5


@pytest.mark.parametrize("step", steps.WINOGRAD_STEPS, ids=lambda s: s.number)
def test_the_winograd_steps_match_the_reference_on_odd_shapes(backend, step):
    # Layers 3-5 of the checks (7 x 7, C = 17, 20, 19) and the odd shapes above, through the
    # book's check (fresh seed, NaN-poisoned output); layer 2 of the checks once, through the
    # fallback step (layer 1's fallback, step 22, is tested in test_alexnet.py).
    layers = alexnet.CHECK_LAYERS[2:] + ODD_LAYERS + ([alexnet.CHECK_LAYERS[1]] if step.number == "23" else [])
    checks = alexnet.CHAPTER.check(backend, steps=[step], layers=layers, N=3)
    gpulab.assert_ok(checks)
    assert (checks["unwritten"] == 0).all()
    assert list(checks["kernel"]) == ["conv_winograd_gemm"] * (len(layers) - (step.number == "23")) + \
        (["conv_split_128x128_k64"] if step.number == "23" else [])


def test_a_winograd_output_transform_one_filter_short_is_caught():
    # The check must be able to fail: the output transform's grid one filter short leaves the
    # last filter's plane NaN.
    step, layer, N = alexnet.CHAPTER.step("23"), ODD_LAYERS[0], 3
    be = gpulab.get_backend("cpu")
    x, w = alexnet.make_inputs(layer, N, seed=5)
    y = be.poisoned(layer.y_shape(N), np.float32)
    launch = step.launcher.bind(step, Conv(layer, N), {"x": be.to_device(x), "w": be.to_device(w), "y": y}, be)
    launch.parts["input transform"]()
    launch.parts["gemm"]()
    g = wino.geometry("23", layer, N)
    module = gpulab.load_module(step.file, "cpu")
    module.winograd_output_2x2((-(-g.P // wino.TRANSFORM_BLOCK), layer.M - 1), wino.TRANSFORM_BLOCK,
                               (launch.keep[2], y, N, layer.M, layer.E, layer.F, g.TH, g.TW, g.Mp, g.Pp))
    result = gpulab.compare(y, alexnet.reference(x, w, layer))
    assert not result.passed and result.unwritten == N * layer.E * layer.F     # the last filter's plane


def test_winograd_applies_to_layers_3_to_5_and_the_others_run_their_fastest_fp32_step():
    assert [wino.applies(layer) for layer in alexnet.LAYERS] == [False, False, True, True, True]
    table = alexnet.views.kernels_per_layer()
    assert len(table) == len(wino.TILE) * len(alexnet.LAYERS)
    # FALLBACK is the fastest fp32 step on its layer at N = 128 in the book's recorded run, of the
    # steps before Winograd's (a later step, such as 27's 3xTF32 on wgmma, cannot be what 23 and 24
    # fall back on).
    ladder = gpulab.load_run(alexnet.CHAPTER).experiment("ladder")
    main = ladder[(ladder["size"] == alexnet.MAIN_N) & (ladder["precision"] == "fp32")]
    main = alexnet.step_labels(main)
    first_winograd = min(int(s.number) for s in steps.WINOGRAD_STEPS)
    earlier = [s.number for s in alexnet.CHAPTER.steps if int(s.number) < first_winograd]
    ours = main[main["step"].isin(earlier)]
    for index, number in wino.FALLBACK.items():
        at = ours[ours["layer"] == index]
        assert at.loc[at["median_ms"].idxmin(), "step"] == number, index
    step, layer = alexnet.CHAPTER.step("24"), alexnet.LAYERS[0]
    with pytest.raises(ValueError, match="3 x 3 filter with stride 1"):     # the ladder hands it over, not wino
        wino.launch_config(step, layer, 128)
    step22 = alexnet.CHAPTER.step("22")
    assert launchers.launch_config(step, layer, 128) == launchers.launch_config(step22, layer, 128)
    assert launchers.scratch_bytes(step, layer, 128) == launchers.scratch_bytes(step22, layer, 128)


def test_multiply_counts_and_launch_shapes():
    layer4 = alexnet.LAYERS[3]
    # Nominal 2.25x and 4x where the tiles fit the plane exactly, less on 13 x 13 outputs.
    square = alexnet.Layer(4, C=8, H=48, W=48, M=8, R=3, S=3, U=1, P=1)
    for number, fewer in (("23", 2.25), ("24", 4.0)):
        direct = square.flops(1) // 2
        assert direct / wino.multiplies(number, square, 1) == pytest.approx(fewer)
    table = wino.multiply_table(128)
    assert list(table.index) == ["conv3", "conv4", "conv5"]
    assert table.loc["conv4", "F(2x2,3x3) fewer"] == pytest.approx(36 * 169 / (16 * 196))
    assert table.loc["conv4", "F(4x4,3x3) fewer"] == pytest.approx(144 * 169 / (36 * 256))
    g = wino.geometry("23", layer4, 128)
    assert (g.TH, g.TW, g.P, g.Pp, g.Mp, g.Kp, g.points) == (7, 7, 6272, 6272, 384, 384, 16)
    assert launchers.launch_config(alexnet.CHAPTER.step("23"), layer4, 128)["grid"] == (49, 3, 16)
    g4 = wino.geometry("24", layer4, 128)
    assert (g4.TH, g4.P, g4.points) == (4, 2048, 36)
    # U, V and Mt for layer 4 at N = 128: 9.4 MB + 154 MB + 154 MB.
    assert launchers.scratch_bytes(alexnet.CHAPTER.step("23"), layer4, 128) == 4 * 16 * (384 * 384 + 2 * 384 * 6272)
