"""The hopper chapter's bf16 and tf32 step 7: the CPU backend's bfloat16 (its cuda_bf16.h) against
bit patterns worked out by hand, the host's conversion (steps.to_bf16_bits) against the kernel's,
bf16 tensor maps, and step 7 in bf16 and tf32 against float64 at sizes that are not multiples of its
tile. On a Hopper GPU the same tests run there."""
import numpy as np
import pytest

from gpulab import ladder, tensormap
from gpulab.errors import KernelArgumentError
from gpulab.kernels import get_backend, load_module
from gpulab.workloads import hopper
from gpulab.workloads.hopper import problem as hproblem
from gpulab.workloads.hopper import steps as hsteps

UNITS = "tests/kernels/bf16_units.cu"


def f32(bits: int) -> np.float32:
    return np.array([bits], np.uint32).view(np.float32)[0]


# (float bits, bfloat16 bits), each worked out by hand: bfloat16 keeps the top 16 bits of a float,
# rounding the low 16 to nearest, ties to the even top half.
HAND = [
    (0x3F800000, 0x3F80),   # 1.0: exact
    (0xBF800000, 0xBF80),   # -1.0
    (0x3F808000, 0x3F80),   # 1 + 2^-8, halfway between 0x3F80 and 0x3F81: to the even 0x3F80
    (0x3F818000, 0x3F82),   # halfway between 0x3F81 (odd) and 0x3F82: to the even 0x3F82
    (0x3F808001, 0x3F81),   # just past halfway: up
    (0x3F807FFF, 0x3F80),   # just under halfway: down
    (0x3F80FFFF, 0x3F81),   # 0x3F80 + almost one ulp: up
    (0x3FFF8000, 0x4000),   # halfway at an odd top: the carry bumps the exponent (1.99609375 -> 2.0)
    (0x7F7FFFFF, 0x7F80),   # the largest float rounds past the largest bfloat16 (0x7F7F): infinity
    (0x7F7F7FFF, 0x7F7F),   # ... while just under its halfway stays the largest finite bfloat16
    (0x7F800000, 0x7F80),   # +infinity
    (0xFF800000, 0xFF80),   # -infinity
    (0x80000000, 0x8000),   # -0.0 keeps its sign
    (0x00000001, 0x0000),   # the smallest float subnormal: under half of bfloat16's smallest, to 0
    (0x00008000, 0x0000),   # exactly half of bfloat16's smallest subnormal (0x0001): to the even 0
    (0x00018000, 0x0002),   # halfway between subnormals 0x0001 and 0x0002: to the even 0x0002
    (0x00010000, 0x0001),   # bfloat16's smallest subnormal itself: subnormals are kept
    (0x7FC00000, 0x7FFF),   # a quiet NaN: the canonical NaN
    (0xFFC00001, 0x7FFF),   # a negative NaN with payload: the canonical NaN too
    (0x40490FDB, 0x4049),   # pi: 0x4049 0FDB, the low half under halfway
]
# What the GPU writes for a NaN is its own canonical pattern; the CPU backend writes 0x7FFF. The
# test holds every other case to the exact bits and a NaN to "some NaN".


def _units(be):
    return load_module(UNITS, be, options=hopper.launchers.GPU_OPTIONS if be.name == "gpu" else ())


def _is_bf16_nan(bits):
    return ((bits & 0x7F80) == 0x7F80) & ((bits & 0x007F) != 0)


def test_bf16_conversion_matches_hand_computed_bits(backend):
    be = get_backend(backend)
    x = np.array([h[0] for h in HAND], np.uint32).view(np.float32)
    want = np.array([h[1] for h in HAND], np.uint16)
    out = be.xp.full(len(HAND), 0xABCD, dtype=np.uint16)
    _units(be).get_function("to_bf16").bind(1, 64, (be.to_device(x), out, np.int32(len(HAND))))()
    be.synchronize()
    got = be.to_host(out)
    nan = _is_bf16_nan(want)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    assert _is_bf16_nan(got[nan]).all(), [hex(b) for b in got[nan]]
    if backend == "cpu":
        np.testing.assert_array_equal(got[nan], 0x7FFF)


def test_host_conversion_is_the_kernels_on_random_and_edge_floats(backend):
    """steps.to_bf16_bits (what the checks and the GPU run use to make bf16 inputs) gives the
    kernel's bits, on random floats of every magnitude and the hand cases."""
    be = get_backend(backend)
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32)
    bits[:len(HAND)] = [h[0] for h in HAND]
    x = bits.view(np.float32)
    out = be.xp.zeros(len(x), dtype=np.uint16)
    _units(be).get_function("to_bf16").bind(8, 512, (be.to_device(x), out, np.int32(len(x))))()
    be.synchronize()
    got, host = be.to_host(out), hproblem.to_bf16_bits(x)
    nan = _is_bf16_nan(host)
    assert nan.sum() > 5                         # random bit patterns include NaNs
    np.testing.assert_array_equal(got[~nan], host[~nan])
    assert _is_bf16_nan(got[nan]).all()


def test_bf16_to_float_is_exact_and_pairs_round_each_half(backend):
    be = get_backend(backend)
    b = np.arange(0, 2**16, 7, dtype=np.uint16)
    out = be.xp.full(len(b), np.nan, dtype=np.float32)
    _units(be).get_function("from_bf16").bind(-(-len(b) // 256), 256, (be.to_device(b), out, np.int32(len(b))))()
    be.synchronize()
    got = be.to_host(out)
    want = (b.astype(np.uint32) << 16).view(np.float32)      # 16 zero bits appended, by definition
    same = np.isnan(want) & np.isnan(got) | (got.view(np.uint32) == want.view(np.uint32))
    assert same.all()
    np.testing.assert_array_equal(hproblem.from_bf16_bits(b).view(np.uint32), want.view(np.uint32))
    x = np.array([h[0] for h in HAND if not _is_bf16_nan(np.uint16(h[1]))], np.uint32).view(np.float32)
    x = x[: len(x) // 2 * 2]
    pairs = be.xp.zeros(len(x), dtype=np.uint16)
    _units(be).get_function("to_bf16_pairs").bind(1, 32, (be.to_device(x), pairs, np.int32(len(x) // 2)))()
    be.synchronize()
    np.testing.assert_array_equal(be.to_host(pairs), hproblem.to_bf16_bits(x))


def test_bf16_tensor_map_needs_uint16_bits():
    a = np.zeros((8, 64), np.float16)
    with pytest.raises(KernelArgumentError, match="uint16"):
        tensormap.encode_2d(a, (64, 8), element="bf16")
    with pytest.raises(KernelArgumentError, match="element"):
        tensormap.encode_2d(a.view(np.uint16), (64, 8), element="fp8")
    m = tensormap.encode_2d(a.view(np.uint16), (64, 8), element="bf16")
    assert m.box_bytes == 64 * 8 * 2


@pytest.mark.parametrize("precision", ["bf16", "tf32"])
def test_step7_in_bf16_and_tf32_against_float64(backend, precision):
    be = get_backend(backend)
    why = hopper.launchers.needs_hopper(be)
    if why:
        pytest.skip(why)
    step = hsteps.in_precision(hopper.CHAPTER.step("07"), precision)
    for case in hopper.problem.cases(fp8_shapes=()):
        _, result = ladder.check_case(step, case, seed=11, backend=be)
        assert result.passed and result.unwritten == 0, str(result)
        # the error of rounding operands and C, not of a wrong element: bf16 C alone is ~1e-3,
        # tf32's operands ~5e-4; a misplaced k slice or tile would be near 1
        assert result.rel_error < {"bf16": 6e-3, "tf32": 1.5e-3}[precision], str(result)


def test_bf16_step_reads_its_bits_as_bfloat16_not_half(backend):
    """The same bits run as bf16 and as fp16 give different products: the bf16 file's wgmma reads
    bfloat16 (a kernel reading halves would match the fp16 reference instead)."""
    be = get_backend(backend)
    why = hopper.launchers.needs_hopper(be)
    if why:
        pytest.skip(why)
    step = hsteps.in_precision(hopper.CHAPTER.step("07"), "bf16")
    A, B = hproblem.make_inputs(72, 264, 200, seed=5, precision="bf16")
    C = ladder.run(step, hproblem.Gemm(72, 264, 200), {"A": A, "B": B}, be)
    got = hproblem.as_float(C, "bf16")
    as_bf16 = hproblem.reference(A, B, "bf16")
    as_half = hproblem.reference(A.view(np.float16), B.view(np.float16), "fp16")
    assert np.linalg.norm(got - as_bf16) / np.linalg.norm(as_bf16) < 6e-3
    assert not np.allclose(got, as_half, rtol=0.1, equal_nan=True)


def test_in_precision_refuses_a_step_without_that_type():
    with pytest.raises(KernelArgumentError, match="comes in"):
        hsteps.in_precision(hopper.CHAPTER.step("06"), "bf16")
    with pytest.raises(KernelArgumentError, match="comes in"):
        hsteps.in_precision(hopper.CHAPTER.step("07"), "fp8")
    step = hsteps.in_precision(hopper.CHAPTER.step("07"), "tf32")
    A = np.zeros((64, 36), np.float32)
    with pytest.raises(KernelArgumentError, match="float32"):
        ladder.bind(step, hproblem.Gemm(64, 64, 36), {"A": A.astype(np.float16), "B": np.zeros((64, 36), np.float16),
                                                      "C": np.zeros((64, 64), np.float16)}, "cpu")
    with pytest.raises(KernelArgumentError, match="multiple of 4"):
        ladder.bind(step, hproblem.Gemm(64, 64, 34), {"A": np.zeros((64, 34), np.float32),
                                                      "B": np.zeros((64, 34), np.float32),
                                                      "C": np.zeros((64, 64), np.float32)}, "cpu")
