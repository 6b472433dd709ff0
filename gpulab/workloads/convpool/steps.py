"""The ladder, as data: every step's kernel file, its kernel and its launch family
(:mod:`.launchers`), and what each kernel file predicts.

Every step reads the same layer (:mod:`.problem`) and writes the same y; they differ in the
input's layout (NCHW, or channels-last for the tensor-core steps, as cuDNN's channels-last path
gets it), in the form the filters are read in (re-laid out once "when the model is loaded", as
every framework does) and in whether the pre-pool tensor is written (steps 1-4, then
``relu_maxpool``) or never exists (steps 5-8): their families say the first two, ``fused`` the last.
"""
from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field

from ... import ladder, predictions
from .launchers import (EIGHT_PER_THREAD, IMPLICIT_GEMM, ONE_PER_OUTPUT, POOLED_EIGHT_PER_THREAD, STRIPS,
                        TENSOR_CORE_TILES, TWO_ROW_STRIPS, WGMMA)


@dataclass(frozen=True)
class Step(ladder.Step):
    """One rung of the ladder: its kernel file and kernel, launched by its family (``launcher``).
    ``fused``: the kernel pools its sums itself (else it writes the pre-pool tensor, and
    ``relu_maxpool`` pools it). ``options``: compile-time settings (``-D`` flags) the ladder
    uses; the sweeps vary them, and ``blocks`` and ``threads`` (None: the family's launch shape;
    a strip kernel computes the same y at any, a wgmma step's grid is cut to its tiles)."""

    kernel: str
    _: KW_ONLY
    fused: bool = True
    options: tuple = ()
    blocks: int | None = None
    threads: int | None = None
    launcher: ladder.Launcher = field(default=None, compare=False)


STEPS = [
    Step("01", "convpool/01_global_only.cu", "global memory only", "conv_global", launcher=ONE_PER_OUTPUT,
         fused=False),
    Step("02", "convpool/02_registers.cu", "weights and inputs in registers", "conv_registers",
         launcher=EIGHT_PER_THREAD, fused=False),
    Step("03", "convpool/03_shared_tiles.cu", "input strips in shared memory, thread per filter", "conv_shared_tiles",
         launcher=STRIPS, fused=False),
    Step("04", "convpool/04_two_rows_float4.cu", "two output rows per thread, float4", "conv_two_rows_float4",
         launcher=TWO_ROW_STRIPS, fused=False),
    Step("05", "convpool/05_fused_relu_pool.cu", "ReLU and max-pool fused", "conv_relu_pool_fused",
         launcher=TWO_ROW_STRIPS, options=("-DQ=8",)),
    Step("06", "convpool/06_implicit_gemm_fused.cu", "implicit GEMM, 8x8 register tiles, fused", "conv_igemm_pool",
         launcher=IMPLICIT_GEMM),
    Step("07", "convpool/07_tensor_cores_tf32.cu", "tensor cores tf32, channels-last, fused", "conv_tc_tf32_pool",
         launcher=TENSOR_CORE_TILES, precision="tf32"),
    Step("08", "convpool/08_tensor_cores_fp16.cu", "tensor cores fp16, channels-last, fused", "conv_tc_fp16_pool",
         launcher=TENSOR_CORE_TILES, precision="fp16"),
    Step("09", "convpool/09_wgmma_tma.cu", "wgmma fed by TMA, warp-specialized, persistent", "conv_wgmma_pool",
         launcher=WGMMA, precision="fp16", options=("-arch=sm_90a",)),
    Step("10", "convpool/10_wgmma_tf32.cu", "step 9 in tf32", "conv_wgmma_tf32_pool",
         launcher=WGMMA, precision="tf32", options=("-arch=sm_90a",)),
    Step("11", "convpool/11_wgmma_3xtf32.cu", "3xTF32 on wgmma: fp32 accuracy", "conv_wgmma_3xtf32_pool",
         launcher=WGMMA, precision="fp32", options=("-arch=sm_90a",)),
]
#: Exercise 2: step 2 with the ReLU and the pool fused (2 x 8 outputs per thread, 4 windows).
EXERCISE = Step("E2", "convpool/exercise_pooled_registers.cu", "exercise: step 2 with the pool fused",
                "conv_registers_pooled", launcher=POOLED_EIGHT_PER_THREAD)
#: The steps timed at every batch size (the first four take 10-100 ms per image: batch 1 only).
BATCH_STEPS = ("05", "06", "07", "08", "09", "10", "11")


# ------------------------------------------------------------ what each step's prediction claims
# The kernel files' predictions as claims a run can check at one image (gpulab.predictions states
# the rules); a reason is shown only when the run says the claim failed in that direction.
def _predicted():
    p = predictions
    return {
        "01": p.about_ms(60, because_faster=(
            "the estimate's ceiling of about 3 issued instructions per FMA was pessimistic: step 1's "
            "loads are coalesced and mostly hit L1, and the kernel needs fewer instructions than that "
            "(step 1 is not profiled, so the run does not say how many)")),
        "02": p.times(3, 4, "01", because=(
            "consecutive threads now start 8 floats apart, so each warp-wide load touches 32 sectors "
            "instead of 4, and L1 serves them one request at a time: fewer loads, each dearer")),
        "03": p.times(2, 3, "02", because_faster=(
            "it is measured from step 2, itself slower than step 1; the broadcast input and coalesced "
            "weights beat both")),
        "04": p.times(1.5, 2, "03", because=(
            "step 3 already spent most of its issue slots on FMAs (its FMA pipe is busy most of the "
            "time, see the profile): two rows per thread removed only the instructions that were not")),
        "05": p.same("04"),
        "06": p.about(5, "05", because=(
            "step 5 did not spend many instructions on loads and addressing, as the prediction assumed: "
            "both kernels execute about the same warp instructions, nearly all FMAs; step 6 gains only by "
            "issuing them more often (see the profile)")),
        "07": p.times(4, 6, "06", because=(
            "the tensor pipe is busy only a small share of the time: the warps load wmma fragments from "
            "shared memory and wait on them, one mma.sync at a time (see the profile)")),
        "08": p.times(1.5, 2, "07", because_faster=(
            "tf32 needs several times fp16's instructions for the same product (half the k per fragment, "
            "a rounding per fragment element; see the profile), so fp16 saved more than the doubled "
            "tensor rate")),
        "10": p.about(4, "07", claim="about 4x faster than step 7 (the file's estimate, made for batch 32)",
                      because_faster=(
            "the claim is judged at one image, where step 10 takes less time per image than at batch 32 (the "
            "case the file's estimate was made for; the batch table has both) and step 7 takes more")),
        "11": p.about(2, "06", claim="about 2x faster than step 6 (the file's estimate, made for batch 32)",
                      because_faster=(
            "the claim is judged at one image, where step 11 takes less time per image than at batch 32 (the "
            "case the file's estimate was made for; the batch table has both) while step 6 takes about the "
            "same per image at both")),
        "09": p.about(2.3, "08", claim="about 2.3x faster than step 8 (the file's estimate, made for batch 32)",
                      because_faster=(
            "the claim is judged at one image, where step 9 takes less time per image than at batch 32 (the "
            "case the file's estimate was made for; the batch table has both) while step 8 takes about the "
            "same per image at both")),
    }


#: step number -> the checkable claim(s) of its kernel file's prediction (see gpulab.predictions)
PREDICTED = _predicted()
