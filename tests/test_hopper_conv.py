"""Convpool's step 9 and its pieces (issue 26): the 4-D tensor map and bulk tensor copy that feed
it (gpulab.tensormap.encode_4d, tma_load_4d in kernels/common/hopper_conv.cuh and its CPU
emulation) against hand-computed layouts, and the step itself at shapes that leave every tile
partial. On a Hopper GPU the same tests run there."""
import dataclasses

import numpy as np
import pytest

import gpulab
from gpulab import ladder, tensormap
from gpulab.errors import KernelArgumentError
from gpulab.kernels import get_backend, load_module
from gpulab.workloads import convpool, hopper
from gpulab.workloads.convpool import launchers as cl
from gpulab.workloads.convpool import problem

from test_hopper import _hopper_backend, hand_swizzled_chunk

UNITS = "tests/kernels/hopper_conv_units.cu"
STEP9 = convpool.CHAPTER.step("09")


def _units(be):
    return load_module(UNITS, be, options=hopper.launchers.GPU_OPTIONS if be.name == "gpu" else ())


def hand_box4(a, box, at):
    """The bytes a 4-D box {b0, b1, b2, b3} of the NHWC array ``a`` at ``at`` = (c0, w0, h0, n0)
    lands as with the 128-byte swizzle: box row p = ((i3 b2 + i2) b1 + i1) holds a[n, h, w,
    c0 .. c0 + b0) (zeros outside the array), and its 16-byte chunk c goes to chunk c ^ (p % 8)."""
    b0, b1, b2, b3 = box
    c0, w0, h0, n0 = at
    N, H, W, C = a.shape
    rows = []
    for i3 in range(b3):
        for i2 in range(b2):
            for i1 in range(b1):
                n, h, w = n0 + i3, h0 + i2, w0 + i1
                line = np.zeros(b0, np.float16)
                if 0 <= n < N and 0 <= h < H and 0 <= w < W:
                    inside = [c for c in range(c0, c0 + b0) if 0 <= c < C]
                    line[[c - c0 for c in inside]] = a[n, h, w, inside]
                rows.append(line.view(np.uint8))
    out = np.zeros(len(rows) * 128, np.uint8)
    for p, line in enumerate(rows):
        for c in range(8):
            at_ = p * 128 + 16 * hand_swizzled_chunk(p, c, 128)
            out[at_:at_ + 16] = line[16 * c:16 * c + 16]
    return out


@pytest.mark.parametrize("at", [(8, 3, 2, 1),        # inside
                                (32, -2, 12, 0),     # channels past C, columns before 0, rows past H
                                (0, 20, -3, 1)])     # columns past W, rows before 0
def test_a_4d_box_lands_as_the_swizzle_by_hand(backend, at):
    be = _hopper_backend(backend)
    a = (np.arange(2 * 20 * 24 * 72) % 2039 + 1).astype(np.float16).reshape(2, 20, 24, 72)  # distinct, exact, nonzero
    box = (64, 8, 16, 1)
    m = tensormap.encode_4d(be.to_device(a), box, 128)
    assert m.box_bytes == 64 * 8 * 16 * 2
    out = be.xp.full(m.box_bytes, 0xAB, dtype=np.uint8)
    _units(be).get_function("tma_box4_bytes").bind(1, 128, (m, out, *(np.int32(v) for v in at),
                                                          np.int32(m.box_bytes)), shared_mem=m.box_bytes + 1024)()
    be.synchronize()
    np.testing.assert_array_equal(be.to_host(out), hand_box4(a, box, at))


def test_encode_4d_refuses_what_the_copy_engine_cannot_read():
    ok = np.zeros((1, 4, 4, 64), np.float16)
    with pytest.raises(KernelArgumentError, match="4-D array"):
        tensormap.encode_4d(np.zeros((4, 4, 64), np.float16), (64, 4, 4, 1))
    with pytest.raises(KernelArgumentError, match="multiple of 16 bytes"):
        tensormap.encode_4d(np.zeros((1, 4, 4, 4), np.float16), (4, 4, 4, 1))      # 8-byte pixels
    with pytest.raises(KernelArgumentError, match="at most 128 bytes"):
        tensormap.encode_4d(np.zeros((1, 4, 4, 128), np.float16), (128, 4, 4, 1), 128)
    with pytest.raises(KernelArgumentError, match="1 to 256"):
        tensormap.encode_4d(ok, (64, 4, 257, 1))
    with pytest.raises(KernelArgumentError, match="1 to 256"):
        tensormap.encode_4d(ok, (64, 4, 4))
    with pytest.raises(KernelArgumentError, match="C-contiguous"):
        tensormap.encode_4d(np.zeros((1, 4, 64, 4), np.float16).transpose(0, 1, 3, 2), (64, 4, 4, 1))


def test_step9_with_two_channel_chunks_two_filter_tiles_and_any_grid(backend):
    # C = 72: a whole chunk of 64 channels and one of 8 (the rest read as zeros); M = 260: a whole
    # tile of 256 filters and one of 4; 4 x 10 pixels: one partial 16 x 8 tile row, two columns.
    be = _hopper_backend(backend)
    case = problem.Conv(problem.Shape(N=1, C=72, H=4, W=10, M=260))
    assert cl.wgmma_tiles(case.shape) == 1 * 1 * 2 * 2 and problem.padded_channels(case.shape) == 128
    inputs = case.inputs(seed=int(np.random.SeedSequence().entropy % 2**31))
    ref = case.reference(inputs)
    for blocks in (1, 3, 8):         # 8 blocks for 4 tiles: the grid is cut to the tiles
        y = ladder.run(dataclasses.replace(STEP9, blocks=blocks), case, inputs, be)
        result = gpulab.compare(y, ref, "fp16", name=f"step 9, {blocks} blocks")
        assert result.passed and result.unwritten == 0, result


def test_step9_launch_shape():
    layer = problem.LAYER.batch(32)
    assert cl.wgmma_tiles(layer) == 32 * 14 * 28          # 16 x 8 tiles of a 224 x 224 image, 256 filters
    cfg = cl.config(dataclasses.replace(STEP9, blocks=132), layer)
    assert cfg == {"grid": (132,), "block": (384,), "shared": 4 * (128 + 256) * 64 * 2 + 1024}
    assert cfg["shared"] <= 227 * 1024
    assert cl.config(dataclasses.replace(STEP9, blocks=132), problem.CHECK)["grid"] == (cl.wgmma_tiles(problem.CHECK),)


def test_step9_is_refused_off_hopper_with_the_reason():
    from gpulab import device
    with device.simulate("L4") as l4:       # compute capability 8.9: no wgmma, no setmaxnreg
        why = cl.unfit_reason(STEP9, problem.CHECK)
        assert "sm_90a" in why and l4.name in why
        status = gpulab.assert_ok(convpool.CHAPTER.check("cpu", steps=[STEP9])).set_index("step")["status"]
        assert status["09"].startswith("skipped: ")


@pytest.mark.slow
def test_race_checking_sees_no_race_in_the_conv_ring():
    # The ring of kernels/common/hopper_conv.cuh (full/empty mbarriers, the copy engine's writes,
    # wgmma's reads) is ordered by mbarrier phases, which the race checker does not model: it must
    # report nothing. Run on AlexNet's 3 x 3 check layer (one tile of 9 slices: the 4-slot ring
    # wraps twice), the cheapest kernel built on it (about 15 CPU-s under the checker); convpool's
    # step 9 is the same loop with 25 taps (about 70 CPU-s: checked once, no race reported).
    from gpulab import cpu
    from gpulab.workloads.alexnet import problem as shapes
    layer = shapes.CHECK_LAYERS[2]
    x, w = shapes.make_inputs(layer, 1, seed=11)
    with cpu.checking(races=True, time_limit_s=600):
        y = _alexnet_wgmma(layer, x, w, "cpu", tile=(16, 128, 64))
    assert gpulab.compare(y, shapes.reference(x, w, layer), "fp16").passed


# ------------------------------------------------- AlexNet's stride-1 layers on the same GEMM
def _alexnet_wgmma(layer, x, w, backend, tile=None, blocks=None):
    """AlexNet's step 25 on its wgmma family alone (no step for layer 1), ``tile`` on every layer,
    on host float inputs (made half) with a poisoned output: y on the host."""
    import dataclasses

    from gpulab import ladder
    from gpulab.workloads import alexnet
    from gpulab.workloads.alexnet import launchers, problem
    step = dataclasses.replace(alexnet.CHAPTER.step("25"), launcher=launchers.Wgmma(tile=tile, blocks=blocks))
    inputs = {"x": x.astype(np.float16), "w": w.astype(np.float16)}
    return ladder.run(step, problem.Conv(layer, x.shape[0]), inputs, backend)


@pytest.mark.parametrize("index", [2, 3, 4, 5])
def test_alexnet_wgmma_matches_the_reference_on_the_check_layers(backend, index):
    # The check layers' channels (10, 17, 20, 19) and filters (17, 20, 19, 13) fill no slice or
    # tile, their 15 x 15 and 7 x 7 images no 16 x 8 box, and the zero border (P = 2, 1) is read
    # at negative coordinates of the channels-last copy, which has none written out.
    from gpulab.workloads.alexnet import problem as shapes, wgmma
    be = _hopper_backend(backend)
    layer = shapes.CHECK_LAYERS[index - 1]
    x, w = shapes.make_inputs(layer, shapes.CHECK_N, seed=int(np.random.SeedSequence().entropy % 2**31))
    ref = shapes.reference(x, w, layer)
    tiles = [wgmma.DEFAULT_TILES[index]] + ([(8, 128), (32, 256, 32)] if index == 2 else [])
    for tile in tiles:
        y = _alexnet_wgmma(layer, x, w, be, tile=tile, blocks=2)
        result = gpulab.compare(y, ref, "fp16", name=f"{layer.name} tile {tile}")
        assert result.passed and result.unwritten == 0, result


def test_alexnet_wgmma_refuses_the_strided_layer_and_unknown_tiles():
    from gpulab.workloads.alexnet import problem as shapes, wgmma
    layer1, layer2 = shapes.CHECK_LAYERS[0], shapes.CHECK_LAYERS[1]
    x, w = shapes.make_inputs(layer1, 1, seed=1)
    with pytest.raises(KernelArgumentError, match="stride 4"):
        _alexnet_wgmma(layer1, x, w, "cpu")
    x, w = shapes.make_inputs(layer2, 1, seed=1)
    with pytest.raises(KernelArgumentError, match="not compiled"):
        _alexnet_wgmma(layer2, x, w, "cpu", tile=(64, 128))
    with pytest.raises(KernelArgumentError, match="not compiled"):
        _alexnet_wgmma(layer2, x, w, "cpu", tile=(8, 128, 32))
    # the row use the sweep's tiles trade: 13 x 13 in 16 x 8 boxes, 384 filters in 3 x 128
    assert wgmma.row_use(shapes.LAYERS[2], (16, 128)) == pytest.approx(169 / 256)
    assert wgmma.row_use(shapes.LAYERS[2], (16, 256)) == pytest.approx(169 / 256 * 384 / 512)


def test_alexnet_step25_is_refused_off_hopper_and_runs_step20_on_layer1():
    from gpulab import device
    from gpulab.workloads import alexnet
    from gpulab.workloads.alexnet import launchers
    step25, step20 = alexnet.CHAPTER.step("25"), alexnet.CHAPTER.step("20")
    layer1, layer2 = alexnet.LAYERS[0], alexnet.LAYERS[1]
    # Layer 1 (stride 4) is step 20's kernel, launch and scratch; layers 2-5 are step 25's own.
    assert launchers.fallback_step(step25, layer1) is step20
    assert launchers.main_kernel(step25, layer1) == launchers.main_kernel(step20, layer1)
    assert launchers.launch_config(step25, layer1, 128) == launchers.launch_config(step20, layer1, 128)
    assert [launchers.main_kernel(step25, layer) for layer in alexnet.LAYERS[1:]] == \
        [alexnet.wgmma.kernel_for(layer) for layer in alexnet.LAYERS[1:]]
    with device.simulate("L4") as l4:       # compute capability 8.9: no wgmma, no setmaxnreg
        why = launchers.unfit_reason(step25, layer2, 128)
        assert "sm_90a" in why and l4.name in why
        assert launchers.unfit_reason(step25, layer1, 128) is None
        status = gpulab.assert_ok(alexnet.CHAPTER.check("cpu", steps=[step25])).set_index("step")["status"]
        assert status["25"].startswith("skipped: ")
        assert all(step != "25" for _, step in alexnet.profile.profile_runs())
