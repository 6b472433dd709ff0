"""Convpool's float steps on wgmma (issue 26): step 10 (tf32) and step 11 (3xTF32, fp32 accuracy),
their split of a float into a tf32 big part and its remainder (the kernel's and the host's, bit for
bit), and both steps against the float64 reference at shapes that leave every tile partial, with
either parity of slices per tile. On a Hopper GPU the same tests run there."""
from dataclasses import replace

import numpy as np
import pytest

import gpulab
from gpulab import ladder
from gpulab.check import TOLERANCE
from gpulab.kernels import load_module
from gpulab.workloads import convpool
from gpulab.workloads.convpool import launchers as cl
from gpulab.workloads.convpool import problem

from test_hopper import _hopper_backend

STEP10, STEP11 = convpool.CHAPTER.step("10"), convpool.CHAPTER.step("11")


def _split_on_device(be, a):
    module = load_module(STEP11.file, be, options=STEP11.options if be.name == "gpu" else ())
    x = be.to_device(a)
    big, small = be.poisoned(a.shape, np.float32), be.poisoned(a.shape, np.float32)
    module.get_function("split_tf32").bind((3,), (64,), (x, big, small, np.int64(a.size // 4)))()
    be.synchronize()
    return be.to_host(big), be.to_host(small)


def test_the_split_rounds_to_tf32_by_hand():
    # 1 + 2^-11 lies halfway between the tf32 neighbours 1 and 1 + 2^-10: ties go away from zero.
    a = np.array([1 + 2**-11, -(1 + 2**-11), 1 + 2**-12, 3.0, 0.0, -2**-130, 1 + 2**-11 + 2**-23, 0.1], np.float32)
    big, small = problem.tf32_split(a)
    assert big[0] == 1 + 2**-10 and small[0] == -2**-11
    assert big[1] == -(1 + 2**-10) and small[1] == 2**-11
    assert big[2] == 1.0 and small[2] == 2**-12          # under half: rounded down
    assert big[3] == 3.0 and small[3] == 0.0 and big[4] == 0.0 and small[4] == 0.0
    assert big[6] == 1 + 2**-10                           # over half: up
    assert (big.view(np.uint32) & 0x1FFF == 0).all()     # 10 mantissa bits left
    assert (big + small == a).all()                      # the remainder is exact in float


def test_the_kernels_split_is_the_hosts_bit_for_bit(backend):
    be = _hopper_backend(backend)
    rng = np.random.default_rng(int(np.random.SeedSequence().entropy % 2**31))
    a = (rng.standard_normal(4 * 300) * np.exp2(rng.integers(-20, 20, 4 * 300))).astype(np.float32)
    a[:8] = [1 + 2**-11, -(1 + 2**-11), 0.0, -0.0, 2**-126, 1e-40, 3e38, -7.25]   # ties, zeros, tiny, huge
    big, small = _split_on_device(be, a)
    want_big, want_small = problem.tf32_split(a)
    np.testing.assert_array_equal(big.view(np.uint32), want_big.view(np.uint32))
    np.testing.assert_array_equal(small.view(np.uint32), want_small.view(np.uint32))
    normal = np.abs(a) >= 2.0**-126         # a subnormal keeps 10 bits of its shorter mantissa
    assert (np.abs(small[normal]) <= np.abs(a[normal]) * 2.0**-11).all()


# C = 72: Cp = 96, three slices of 32 channels per tap, 75 per tile (odd: step 11's last slice
# alone); C = 64: two per tap, 50 per tile (even). M = 260: a partial filter tile for both steps
# (256 + 4 for step 10, 2 x 128 + 4 for step 11); 4 x 10 pixels: one partial 16 x 8 tile row.
@pytest.mark.parametrize("C, M", [pytest.param(72, 260, marks=pytest.mark.slow), (64, 130)])   # 72: the larger case
def test_steps_10_and_11_match_the_reference_on_partial_tiles_and_any_grid(backend, C, M):
    be = _hopper_backend(backend)
    case = problem.Conv(problem.Shape(N=1, C=C, H=4, W=10, M=M))
    assert problem.padded_channels(case.shape, cl.WGMMA_BK32) == -(-C // 32) * 32
    inputs = case.inputs(seed=int(np.random.SeedSequence().entropy % 2**31))
    ref = case.reference(inputs)
    errors = {}
    for step in (STEP10, STEP11):
        for blocks in (1, 3, 8):      # more blocks than step 10's tiles: the grid is cut to them
            y = ladder.run(replace(step, blocks=blocks), case, inputs, be)
            result = gpulab.compare(y, ref, step.precision, name=f"step {step.number}, {blocks} blocks")
            assert result.passed and result.unwritten == 0, result
            errors[step.number] = result.rel_error
    # 3xTF32 is float-accurate; tf32 alone keeps ~3 digits
    assert errors["11"] < TOLERANCE["fp32"] and errors["11"] < errors["10"] / 100


def test_the_float_steps_launch_shapes():
    layer = problem.LAYER.batch(32)
    for step in (STEP10, STEP11):
        cfg = cl.config(replace(step, blocks=132), layer)
        # step 10: 4 slots of (128 + 256) x 32 floats; step 11: 3 slots of 2 x (128 + 128) x 32 floats
        assert cfg == {"grid": (132,), "block": (384,), "shared": cl.WGMMA_SHARED} and cfg["shared"] <= 227 * 1024
    assert 4 * (128 + 256) * 32 * 4 == 3 * 2 * (128 + 128) * 32 * 4 == cl.WGMMA_SHARED - 1024
    assert cl.wgmma_tiles(layer, cl.wgmma_filters(STEP11)) == 2 * cl.wgmma_tiles(layer, cl.wgmma_filters(STEP10))
    assert cl.config(replace(STEP10, blocks=132), problem.CHECK)["grid"] == (cl.wgmma_tiles(problem.CHECK),)


def test_the_float_steps_are_refused_off_hopper_with_the_reason():
    from gpulab import device
    with device.simulate("L4") as l4:
        for step in (STEP10, STEP11):
            why = cl.unfit_reason(step, problem.CHECK)
            assert "sm_90a" in why and l4.name in why


@pytest.mark.slow
def test_race_checking_sees_no_race_in_step11():
    # Step 11's two partial accumulators and its ring of 3 slots, one tile of 25 slices (odd): the
    # mbarrier phases order the copy engine and wgmma, which the checker does not model; the
    # epilogue's shuffle and stores are its to see. The split kernel runs first, under the checker too.
    from gpulab import cpu
    case = problem.Conv(problem.Shape(N=1, C=8, H=4, W=8, M=4))
    inputs = case.inputs(seed=12)
    with cpu.checking(races=True, time_limit_s=600):
        y = ladder.run(STEP11, case, inputs, "cpu")
    assert gpulab.compare(y, case.reference(inputs), "fp32").passed
