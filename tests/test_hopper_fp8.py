"""The hopper chapter's FP8 steps (kernels/hopper/09_fp8.cu, 10_fp8_promotion.cu): against float64
of the FP8 values they read, at sizes that are not multiples of their tile, with per-tensor scales;
on the CPU backend bit for bit against gpulab.fp8's model of the tensor cores' accumulation (the
CPU backend's FP8 wgmma computes it); the promotion's repair of an all-positive sum; every pair
of FP8 kinds; uint8 tensor maps; and, without a GPU, the steps built for sm_90a by NVRTC (ptxas
accepts them, no spills, the FP8 tensor-core instruction in their SASS)."""
import numpy as np
import pytest

from gpulab import fp8, tensormap
from gpulab.check import compare
from gpulab.errors import KernelArgumentError
from gpulab.kernels import get_backend
from gpulab.workloads import hopper
from gpulab.workloads.hopper.problem import from_bf16_bits, to_bf16_bits

#: (M, N, K): none a multiple of the 128 x 256 tile or of a 128-deep slice; K a multiple of 16 (the
#: tensor maps' 16-byte rows), so the copies' zero fill at every edge is exercised.
SHAPES = ((200, 136, 720), (72, 264, 208))
KINDS = {"09": ("e4m3", "e4m3"), "09 e4m3 x e5m2": ("e4m3", "e5m2"), "10": ("e4m3", "e4m3")}
PROMOTE = {"09": None, "09 e4m3 x e5m2": None, "10": 4}


def _inputs(M, N, K, kinds, seed, low=-1.0):
    rng = np.random.default_rng(seed)
    A, sa = fp8.quantize(rng.uniform(low, 1, (M, K)) * 3, kinds[0])
    B, sb = fp8.quantize(rng.uniform(low, 1, (N, K)) * 0.2, kinds[1])
    return A, B, sa, sb


def _run(be, file, kernel, A, B, sa, sb):
    C = be.xp.full((A.shape[0], B.shape[0]), 0xFFFF, dtype=np.uint16)
    fp8.launch(file, kernel, be.to_device(A), be.to_device(B), C, sa, sb, be)()
    be.synchronize()
    return be.to_host(C)


def _model(A, B, sa, sb, kinds, promote):
    """What the kernel writes, by gpulab.fp8's model: the accumulators times the product of the
    two float scales (both float32 multiplies), rounded to bfloat16."""
    acc = fp8.tensor_core_gemm(A, B, *kinds, promote_every=promote)
    return to_bf16_bits(acc * (np.float32(sa) * np.float32(sb)))


def _skip_without_hopper(be):
    why = hopper.needs_hopper(be)
    if why:
        pytest.skip(why)


@pytest.mark.parametrize("step", list(KINDS))
def test_fp8_step_against_float64_and_the_tensor_core_model(backend, step):
    be = get_backend(backend)
    _skip_without_hopper(be)
    file, kernel = fp8.KERNELS[step]
    for i, (M, N, K) in enumerate(SHAPES):
        A, B, sa, sb = _inputs(M, N, K, KINDS[step], seed=3 + i)
        C = _run(be, file, kernel, A, B, sa, sb)
        ref = fp8.reference(A, B, *KINDS[step]) * sa * sb
        result = compare(from_bf16_bits(C), ref, precision="bf16", name=f"step {step} C ({M}x{N}x{K})")
        # bf16's rounding of C is ~1.7e-3; a wrong scale, slice or tile would be near 1
        assert result.passed and result.unwritten == 0 and result.rel_error < 3e-3, str(result)
        if be.name == "cpu":
            want = _model(A, B, sa, sb, KINDS[step], PROMOTE[step])
            assert (C == want).all(), f"{(C != want).sum()} of {C.size} elements differ from the model's bits"


def test_other_pairs_of_kinds(backend):
    """A in e5m2 (tests/kernels/fp8_gemm_kinds.cu): with 09's two kernels, every FP8 wgmma."""
    be = get_backend(backend)
    _skip_without_hopper(be)
    M, N, K = SHAPES[1]
    for kinds in (("e5m2", "e4m3"), ("e5m2", "e5m2")):
        A, B, sa, sb = _inputs(M, N, K, kinds, seed=9)
        C = _run(be, "tests/kernels/fp8_gemm_kinds.cu", f"gemm_fp8_{kinds[0]}_{kinds[1]}", A, B, sa, sb)
        result = compare(from_bf16_bits(C), fp8.reference(A, B, *kinds) * sa * sb, precision="bf16")
        assert result.rel_error < 3e-3, (kinds, str(result))
        if be.name == "cpu":
            assert (C == _model(A, B, sa, sb, kinds, None)).all(), kinds
        # read as e4m3 instead, the same codes give another product
        wrong = fp8.reference(A, B, "e4m3", kinds[1]) * sa * sb
        assert not np.allclose(from_bf16_bits(C), wrong, rtol=0.1)


def test_promotion_repairs_the_accumulation_of_a_sum_that_grows(backend):
    """All-positive inputs: the sum grows with k, and step 9's accumulator, handed to every
    instruction, cuts each product to the bits left below its exponent (the model: 3.5% short at
    K = 2048); step 10's per-slice partial sums keep the error at bf16's rounding."""
    be = get_backend(backend)
    _skip_without_hopper(be)
    M, N, K = 72, 136, 2048
    A, B, sa, sb = _inputs(M, N, K, ("e4m3", "e4m3"), seed=5, low=0.0)
    ref = fp8.reference(A, B) * sa * sb
    err = {}
    for step in ("09", "10"):
        C = from_bf16_bits(_run(be, *fp8.KERNELS[step], A, B, sa, sb))
        err[step] = compare(C, ref, precision="bf16").rel_error
        assert np.mean(C - ref) < 0, step                 # cut toward zero: short, not noisy
    assert err["10"] < 3e-3 and err["09"] > 5 * err["10"], err
    if be.name == "cpu":
        assert 0.02 < err["09"] < 0.06, err


def test_the_model_by_hand():
    """gpulab.fp8.wgmma_block on sums worked out by hand (13 fraction bits, cut toward zero)."""
    def block(a, b, c):
        pad = lambda v: np.array([v + [0.0] * (32 - len(v))])
        return float(fp8.wgmma_block(pad(a), pad(b), np.array([[c]], np.float32))[0, 0])
    # 32 products of 1 on an accumulator of 2^14: aligned to 2^14, a quantum of 2 -- each 1 is cut to 0
    assert block([1.0] * 32, [1.0] * 32, 2.0 ** 14) == 2.0 ** 14
    # ... on 2^12 (a quantum of 1/2) they are kept: 4096 + 32
    assert block([1.0] * 32, [1.0] * 32, 2.0 ** 12) == 4128.0
    # 2^-6 x 2^-8 (a subnormal e4m3) = 2^-14 on 1.0: under the quantum 2^-13, lost; float keeps it
    assert block([2.0 ** -6], [2.0 ** -8], 1.0) == 1.0
    assert block([2.0 ** -6], [2.0 ** -7], 1.0) == 1.0 + 2.0 ** -13
    # two products of 2^-13 on 2 - 2^-13: the exact sum 2 + 2^-13 is cut to 13 bits below 2: 2.0
    assert block([2.0 ** -6, 2.0 ** -6], [2.0 ** -7, 2.0 ** -7], 2 - 2.0 ** -13) == 2.0
    # signs: a negative product is cut toward zero too (-1.5 * 2^-13 -> -2^-13)
    assert block([-(2.0 ** -6)], [1.5 * 2.0 ** -7], 1.0) == 1.0 - 2.0 ** -13
    # the same products with promote_every: the partial sums restart from zero each group
    A = fp8.to_fp8(np.ones((1, 256)))
    assert fp8.tensor_core_gemm(A, A)[0, 0] == 256.0 == fp8.tensor_core_gemm(A, A, promote_every=4)[0, 0]


def test_launch_refuses_wrong_types_and_shapes():
    A = np.zeros((64, 64), np.uint8)
    C = np.zeros((64, 64), np.uint16)
    with pytest.raises(KernelArgumentError, match="uint8"):
        fp8.launch(*fp8.KERNELS["09"], A.astype(np.float16), A, C, backend="cpu")
    with pytest.raises(KernelArgumentError, match="bfloat16 bits"):
        fp8.launch(*fp8.KERNELS["09"], A, A, C.astype(np.float16), backend="cpu")
    with pytest.raises(KernelArgumentError, match="multiple of 16"):
        fp8.launch(*fp8.KERNELS["09"], np.zeros((64, 40), np.uint8), np.zeros((64, 40), np.uint8), C, backend="cpu")


def test_tensor_maps_of_fp8_codes_are_bytes():
    a = np.zeros((300, 720), np.uint8)
    m = tensormap.encode_2d(a, (128, 256))
    assert m.box_bytes == 128 * 256
    with pytest.raises(KernelArgumentError, match="at most 128 bytes"):
        tensormap.encode_2d(a, (256, 8))
    with pytest.raises(KernelArgumentError, match="multiple of 16 bytes"):
        tensormap.encode_2d(np.zeros((8, 40), np.uint8), (8, 8))


@pytest.mark.slow        # NVRTC builds the steps for sm_90a and cuobjdump reads them back (~6 CPU-s)
def test_fp8_steps_compile_for_sm90a_without_spills():
    from gpulab import paths, sass
    from gpulab.cpu import resources
    import subprocess
    import tempfile
    from pathlib import Path
    why = sass.unavailable()
    if why:
        pytest.skip(why)
    files = {"hopper/09_fp8.cu": ("gemm_fp8", "gemm_fp8_e4m3_e5m2"),
             "hopper/10_fp8_promotion.cu": ("gemm_fp8_promotion",),
             "tests/kernels/fp8_gemm_kinds.cu": ("gemm_fp8_e5m2_e4m3", "gemm_fp8_e5m2_e5m2")}
    for file, kernels in files.items():
        real = paths.kernel_path(file)
        cubin = resources.compile_cubin(real.read_text(), file, "sm_90a", (str(paths.KERNELS), str(real.parent)))
        table = resources.cubin_resources(cubin)
        for kernel in kernels:
            assert table.loc[kernel, "local_bytes"] == 0, f"{kernel} spills to local memory"
        tool, env = sass._cuobjdump()
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "k.cubin"
            path.write_bytes(cubin)
            text = subprocess.run([tool, "-sass", str(path)], capture_output=True, text=True, env=env).stdout
        for op in ("QGMMA.64x256x32" if "10_" not in file else "QGMMA.64x128x32", "UTMALDG", "UTMASTG",
                   "USETMAXREG"):
            assert op in text, f"{file}: no {op} in its SASS"
