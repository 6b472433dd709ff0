"""The hopper chapter's FP8 steps (kernels/hopper/09_fp8.cu, 10_fp8_promotion.cu): against float64
of the FP8 values they read, at sizes that are not multiples of their tile, with per-tensor scales;
on the CPU backend bit for bit against gpulab.fp8's model of the tensor cores' accumulation (the
CPU backend's FP8 wgmma computes it); the promotion's repair of an all-positive sum; every pair
of FP8 kinds; uint8 tensor maps; and, without a GPU, the steps built for sm_90a by NVRTC (ptxas
accepts them, no spills, the FP8 tensor-core instruction in their SASS)."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

import gpulab
from gpulab import fp8, ladder, tensormap
from gpulab.check import compare
from gpulab.errors import KernelArgumentError
from gpulab.kernels import get_backend
from gpulab.workloads import hopper
from gpulab.workloads.hopper import fp8_views
from gpulab.workloads.hopper.problem import Fp8Gemm, from_bf16_bits, to_bf16_bits

#: (M, N, K): none a multiple of the 128 x 256 tile or of a 128-deep slice; K a multiple of 16 (the
#: tensor maps' 16-byte rows), so the copies' zero fill at every edge is exercised.
SHAPES = hopper.problem.FP8_CHECK_SHAPES
STEPS = {f"{s.number} {s.kernel}": s for s in hopper.FP8_STEPS}


def _inputs(M, N, K, kinds, seed, low=-1.0):
    rng = np.random.default_rng(seed)
    A, sa = fp8.quantize(rng.uniform(low, 1, (M, K)) * 3, kinds[0])
    B, sb = fp8.quantize(rng.uniform(low, 1, (N, K)) * 0.2, kinds[1])
    return {"A": A, "B": B, "scale_a": np.array(sa, np.float32), "scale_b": np.array(sb, np.float32)}


def _run(be, step, inputs, kind_b="e4m3"):
    """C (bfloat16 bits, on the host) of ``step`` on ``inputs``, through the chapter's launcher
    (ladder.run: C poisoned first)."""
    M, K = inputs["A"].shape
    return ladder.run(step, Fp8Gemm(M, inputs["B"].shape[0], K, kind_b=kind_b), inputs, be)


def _model(inputs, kinds, promote):
    """What the kernel writes, by gpulab.fp8's model: the accumulators times the product of the
    two float scales (both float32 multiplies), rounded to bfloat16."""
    acc = fp8.tensor_core_gemm(inputs["A"], inputs["B"], *kinds, promote_every=promote)
    return to_bf16_bits(acc * (inputs["scale_a"] * inputs["scale_b"]))


def _skip_without_hopper(be):
    why = hopper.needs_hopper(be)
    if why:
        pytest.skip(why)


def test_the_fp8_steps_pass_the_chapters_check(backend):
    """The chapter's own check: each FP8 step on its kind's cases (B in e4m3 or e5m2), poisoned C."""
    be = get_backend(backend)
    _skip_without_hopper(be)
    table = ladder.assert_ok(hopper.CHAPTER.check(be, steps=hopper.FP8_STEPS))
    assert table.groupby("step").size().to_dict() == {"09": 4, "10": 2}
    assert set(table["operands"]) == {"e4m3 x e4m3", "e4m3 x e5m2"} and (table["unwritten"] == 0).all()
    assert (table["rel_error"] < 3e-3).all() and (table["tolerance"] == gpulab.TOLERANCE["fp8"]).all()


@pytest.mark.parametrize("name", list(STEPS))
def test_fp8_step_against_float64_and_the_tensor_core_model(backend, name):
    be = get_backend(backend)
    _skip_without_hopper(be)
    step = STEPS[name]
    kinds = ("e4m3", step.launcher.kind_b)
    for i, (M, N, K) in enumerate(SHAPES):
        inputs = _inputs(M, N, K, kinds, seed=3 + i)
        C = _run(be, step, inputs, kinds[1])
        ref = fp8.reference(inputs["A"], inputs["B"], *kinds) * float(inputs["scale_a"]) * float(inputs["scale_b"])
        result = compare(from_bf16_bits(C), ref, precision="bf16", name=f"step {name} C ({M}x{N}x{K})")
        # bf16's rounding of C is ~1.7e-3; a wrong scale, slice or tile would be near 1
        assert result.passed and result.unwritten == 0 and result.rel_error < 3e-3, str(result)
        if be.name == "cpu":
            want = _model(inputs, kinds, step.promote_every)
            assert (C == want).all(), f"{(C != want).sum()} of {C.size} elements differ from the model's bits"


def test_other_pairs_of_kinds(backend):
    """A in e5m2 (tests/kernels/fp8_gemm_kinds.cu): with 09's two kernels, every FP8 wgmma."""
    be = get_backend(backend)
    _skip_without_hopper(be)
    M, N, K = SHAPES[1]
    for kinds in (("e5m2", "e4m3"), ("e5m2", "e5m2")):
        inputs = _inputs(M, N, K, kinds, seed=9)
        step = dataclasses.replace(STEPS["09 gemm_fp8"], file="tests/kernels/fp8_gemm_kinds.cu",
                                   kernel=f"gemm_fp8_{kinds[0]}_{kinds[1]}")
        C = _run(be, step, inputs)
        scale = float(inputs["scale_a"]) * float(inputs["scale_b"])
        result = compare(from_bf16_bits(C), fp8.reference(inputs["A"], inputs["B"], *kinds) * scale, precision="bf16")
        assert result.rel_error < 3e-3, (kinds, str(result))
        if be.name == "cpu":
            assert (C == _model(inputs, kinds, None)).all(), kinds
        # read as e4m3 instead, the same codes give another product
        wrong = fp8.reference(inputs["A"], inputs["B"], "e4m3", kinds[1]) * scale
        assert not np.allclose(from_bf16_bits(C), wrong, rtol=0.1)


def test_promotion_repairs_the_accumulation_of_a_sum_that_grows(backend):
    """All-positive inputs: the sum grows with k, and step 9's accumulator, handed to every
    instruction, cuts each product to the bits left below its exponent (the model: 3.5% short at
    K = 2048); step 10's per-slice partial sums keep the error at bf16's rounding. The chapter's
    table (hopper fp8_views.chapter_checks) shows the same, and step 9 fails the chapter's check there."""
    be = get_backend(backend)
    _skip_without_hopper(be)
    case = Fp8Gemm(*hopper.problem.FP8_POSITIVE_SHAPE, low=0.0)
    inputs = case.inputs(5)
    ref = case.reference(inputs)
    err = {}
    for name in ("09 gemm_fp8", "10 gemm_fp8_promotion"):
        C = from_bf16_bits(ladder.run(STEPS[name], case, inputs, be))
        err[name[:2]] = compare(C, ref, precision="bf16").rel_error
        assert np.mean(C - ref) < 0, name                 # cut toward zero: short, not noisy
    assert err["10"] < 3e-3 and err["09"] > 5 * err["10"], err
    if be.name == "cpu":
        assert 0.02 < err["09"] < 0.06, err
    table = fp8_views.chapter_checks(be)
    assert table.set_index("step")["relative error"].round(12).to_dict() == {k: round(v, 12) for k, v in err.items()}
    # the chapter's check on this case: step 9 past the FP8 tolerance, step 10 inside it
    checks = ladder.check(hopper.CHAPTER, [STEPS["09 gemm_fp8"], STEPS["10 gemm_fp8_promotion"]], [case], be, seed=5)
    assert checks["status"].tolist() == [ladder.FAILED, ladder.OK], checks


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


def test_the_fp8_launcher_refuses_wrong_types_and_shapes_and_other_cases():
    step = STEPS["09 gemm_fp8"]
    A = np.zeros((64, 64), np.uint8)
    C = np.zeros((64, 64), np.uint16)
    scales = {"scale_a": np.array(1, np.float32), "scale_b": np.array(1, np.float32)}
    case = Fp8Gemm(64, 64, 64)
    with pytest.raises(KernelArgumentError, match="uint8"):
        ladder.bind(step, case, {"A": A.astype(np.float16), "B": A, "C": C, **scales}, "cpu")
    with pytest.raises(KernelArgumentError, match="bfloat16 bits"):
        ladder.bind(step, case, {"A": A, "B": A, "C": C.astype(np.float16), **scales}, "cpu")
    with pytest.raises(KernelArgumentError, match="multiple of 16"):
        B = np.zeros((64, 40), np.uint8)
        ladder.bind(step, Fp8Gemm(64, 64, 40), {"A": B, "B": B, "C": C, **scales}, "cpu")
    # each family runs on its own kind of case: an FP8 step not on a half GEMM, nor B's other kind
    assert not step.launcher.accepts(hopper.problem.Gemm(64, 64, 64))
    assert not step.launcher.accepts(Fp8Gemm(64, 64, 64, kind_b="e5m2"))
    assert not hopper.CHAPTER.step("07").launcher.accepts(case)


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


def test_the_rungs_times_are_shown_when_a_run_has_them_and_said_to_be_missing_when_not():
    from gpulab import runs
    committed = runs.load_run("hopper", "H100")
    assert fp8_views.timings(committed) is None                      # recorded before the rung
    assert "predates these two steps" in fp8_views.timing_status(committed)
    rows = [("step 09 FP8", "09", 4096, 0.10, 2e-3), ("step 10 FP8", "10", 4096, 0.12, 1.9e-3),
            ("cuBLASLt fp8 fast", "vendor", 4096, 0.11, 2e-3), ("cuBLASLt fp8", "vendor", 4096, 0.13, 1.8e-3)]
    timed = pd.DataFrame([{"experiment": fp8_views.EXPERIMENT, "variant": v, "step": s, "size": n, "median_ms": ms,
                           "flops": 2.0 * n ** 3, "rel_error": e} for v, s, n, ms, e in rows])
    run = runs.RecordedRun("hopper", pd.concat([committed.timings, timed], ignore_index=True), committed.meta)
    table = fp8_views.timings(run)
    assert table["path"].tolist() == [r[0] for r in rows]
    assert table["time / fastest cuBLASLt"].round(6).tolist() == [round(ms / 0.11, 6) for *_, ms, _ in rows]
    assert abs(table["TFLOP/s"].iloc[0] - 2 * 4096 ** 3 / 0.1e-3 / 1e12) < 1e-6
    assert committed.gpu in table.attrs["caption"] and "Their times" in fp8_views.timing_status(run)
