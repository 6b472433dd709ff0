"""The AlexNet chapter's ladder, as data: every step's kernel file, its kernels and its launch
family (:mod:`.launchers`), and what each kernel file predicts.

Steps 23-24 (Winograd) run only the 3 x 3, stride-1 layers and steps 25-28 (wgmma) only the
stride-1 ones: their families are :class:`.launchers.Where` wrappers, which hand the other layers
to the step named here (the ladder's fastest of the same precision there). Step 28 is step 25's
family with layer 1's copy to channels-last replaced (:class:`.launchers.ChunkCopy`).
"""
from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from typing import Callable

from ... import ladder, predictions
from . import wgmma, winograd
from .launchers import (ATOMIC, CHANNELS, DIRECT, GEMM, MMA, TUNED_GEMM, WGMMA, WGMMA32, WINOGRAD, WMMA, WMMA_NHWC,
                        ChunkCopy, Direct, Where, filter_and_sums_shared, filter_shared, filter_slice_shared,
                        no_shared, slice_and_patch_shared, vector_rows_shared)
from .problem import MAIN_N, Layer


@dataclass(frozen=True)
class Step(ladder.Step):
    """One rung of the ladder: a kernel file and its kernels (the main one first), launched by its
    family (``launcher``, default :data:`.launchers.DIRECT`: one block per filter and image).
    ``shared``: what a direct step keeps in dynamic shared memory per block, as a function of the
    layer (:mod:`.launchers`: the filter, a slice of it, the input patch...). ``report_name``: the
    variant's name in the student report the ladder follows."""

    kernels: tuple
    _: KW_ONLY
    shared: Callable[[Layer], int] = no_shared
    report_name: str = ""
    launcher: ladder.Launcher = field(default=DIRECT, compare=False)


STEPS = [
    Step("01", "alexnet/01_direct_global.cu", "sum in global memory",
         ("conv_direct_global",), report_name="Mcpy / UM"),
    Step("02", "alexnet/02_registers.cu", "sum in a register",
         ("conv_registers",), report_name="rla2m"),
    Step("03", "alexnet/03_shared_weights_one_thread.cu", "filter in shared, one thread copies",
         ("conv_shared_weights_one_thread",), shared=filter_shared, report_name="rswbdl2m"),
    Step("04", "alexnet/04_shared_weights_cooperative.cu", "filter in shared, all threads copy",
         ("conv_shared_weights_cooperative",), shared=filter_shared, report_name="rswmtla2m"),
    Step("05", "alexnet/05_shared_only.cu", "shared memory only",
         ("conv_shared_only",), shared=filter_and_sums_shared, report_name="swso"),
    Step("06", "alexnet/06_half.cu", "half precision storage",
         ("conv_half",), precision="fp16", report_name="halfprecision"),
    Step("07", "alexnet/07_channels_across_blocks.cu", "channels across blocks + reduction",
         ("conv_channel_partials", "reduce_channels"), launcher=CHANNELS, report_name="Mk"),
    Step("08", "alexnet/08_channels_shared_weights.cu", "+ shared weights",
         ("conv_channel_partials_sw", "reduce_channels"), launcher=CHANNELS, shared=filter_slice_shared,
         report_name="Mk-sw-mt"),
    Step("09", "alexnet/09_channels_shared_input.cu", "+ shared input tiles",
         ("conv_channel_partials_si", "reduce_channels"), launcher=CHANNELS, shared=slice_and_patch_shared,
         report_name="Mk-sw-mt-si-c"),
    Step("10", "alexnet/10_layer1_noncoalesced.cu", "step 2, non-coalesced mapping",
         ("conv_registers_noncoalesced",), report_name="rla2m, non-coalesced"),
    Step("11", "alexnet/11_vector_loads.cu", "+ float4 loads",
         ("conv_channel_partials_vec", "reduce_channels"), launcher=CHANNELS, shared=vector_rows_shared,
         report_name="Mk-sw-mt-si-c-vec"),
    Step("12", "alexnet/12_half_on_best.cu", "+ half precision",
         ("conv_channel_partials_half", "reduce_channels_half"), launcher=CHANNELS, precision="fp16",
         shared=vector_rows_shared, report_name="Mk-sw-mt-si-c-half"),
    Step("13", "alexnet/13_single_kernel_atomics.cu", "single kernel, atomics, low memory",
         ("conv_channel_chunks_atomic",), launcher=ATOMIC, shared=vector_rows_shared,
         report_name="exp-Mk-sw-mt-si-c-vec"),
    Step("14", "alexnet/14_implicit_gemm.cu", "implicit GEMM, 8x8 register tiles",
         ("conv_implicit_gemm",), launcher=GEMM),
    Step("15", "alexnet/15_tensor_cores_wmma.cu", "implicit GEMM on tensor cores (wmma)",
         ("conv_implicit_gemm_wmma",), launcher=WMMA, precision="fp16"),
    Step("16", "alexnet/16_tensor_cores_nhwc.cu",
         "tensor cores on a channels-last copy",
         ("conv_implicit_gemm_wmma_nhwc", "nchw_to_nhwc_half", "filters_to_rsc_half"), launcher=WMMA_NHWC,
         precision="fp16"),
    Step("17", "alexnet/17_implicit_gemm_tuned.cu",
         "implicit GEMM tuned: padded copy, warp tiles, split K",
         ("conv_igemm_tuned", "pad_input", "filters_to_kxm"), launcher=TUNED_GEMM),
]
#: Steps 18 on: tensor cores through mma.sync (the tiles: gpulab/workloads/alexnet/tc.py).
MMA_STEPS = [
    Step("18", "alexnet/18_mma_ldmatrix.cu",
         "mma.sync + ldmatrix on a padded channels-last copy",
         ("conv_mma_ldmatrix", "to_padded_nhwc_half", "to_filter_runs_half"), launcher=MMA, precision="fp16"),
    Step("19", "alexnet/19_cp_async_pipeline.cu",
         "+ cp.async 4-stage pipeline",
         ("conv_mma_cp_async", "to_padded_nhwc_half", "to_filter_runs_half"), launcher=MMA, precision="fp16"),
    Step("20", "alexnet/20_swizzle_tiles.cu",
         "+ swizzled shared memory, a tile per layer",
         ("conv_mma_128x128", "to_padded_nhwc_half", "to_filter_runs_half"), launcher=MMA, precision="fp16"),
    Step("21", "alexnet/21_tf32.cu",
         "step 20 in tf32 (fp32 data)",
         ("conv_tf32_128x128", "to_padded_nhwc_float", "to_filter_runs_float"), launcher=MMA, precision="tf32"),
    Step("22", "alexnet/22_split_fp16.cu",
         "fp32 accuracy: each float as two halves, three fp16 products",
         ("conv_split_128x128_k64", "to_padded_nhwc_split", "to_filter_runs_split"), launcher=MMA),
]
STEPS += MMA_STEPS
_BY_NUMBER = {s.number: s for s in STEPS}
#: Steps 23 on: Winograd's minimal filtering on the 3 x 3 layers, the batched GEMMs on the FMA
#: units (gpulab/workloads/alexnet/winograd.py); layers 1 and 2 run the step winograd.FALLBACK names.
WINOGRAD_OR_FALLBACK = Where(WINOGRAD, winograd.applies, {i: _BY_NUMBER[n] for i, n in winograd.FALLBACK.items()},
                             because="Winograd needs 3 x 3, stride 1")
WINOGRAD_STEPS = [
    Step("23", "alexnet/23_winograd_2x2.cu",
         "Winograd F(2x2,3x3) on layers 3-5 (fp32 FMA)",
         ("conv_winograd_gemm", "winograd_input_2x2", "winograd_output_2x2", "winograd_filter_2x2"),
         launcher=WINOGRAD_OR_FALLBACK),
    Step("24", "alexnet/24_winograd_4x4.cu",
         "Winograd F(4x4,3x3) on layers 3-5 (fp32 FMA)",
         ("conv_winograd_gemm", "winograd_input_4x4", "winograd_output_4x4", "winograd_filter_4x4"),
         launcher=WINOGRAD_OR_FALLBACK),
]
STEPS += WINOGRAD_STEPS
#: Step 25 on: Hopper's wgmma fed by TMA on the stride-1 layers 2-5 (gpulab/workloads/alexnet/wgmma.py);
#: layer 1 runs step 20's kernel, the ladder's fastest there. Built for sm_90a: refused, with the
#: reason, on any other GPU.
WGMMA_OR_20 = Where(WGMMA, wgmma.applies, _BY_NUMBER["20"], because="step {number} needs stride 1")
WGMMA_STEPS = [
    Step("25", "alexnet/25_wgmma_tma.cu",
         "wgmma fed by TMA boxes, warp-specialized (layers 2-5; layer 1 step 20's)",
         ("conv_wgmma_16x128", "to_nhwc_half"), launcher=WGMMA_OR_20, precision="fp16"),
    # Steps 26-27: step 25's GEMM on float data (gpulab/workloads/alexnet/wgmma32.py), layer 1 on the
    # ladder's fastest kernel of their precision there: step 21 in tf32, step 22 (split fp16) for
    # fp32 accuracy.
    Step("26", "alexnet/26_wgmma_tf32.cu",
         "step 25 in tf32 (layers 2-5; layer 1 step 21's)",
         ("conv_wgmma_tf32_16x128", "to_nhwc_float"),
         launcher=Where(WGMMA32, wgmma.applies, _BY_NUMBER["21"], because="step {number} needs stride 1"),
         precision="tf32"),
    Step("27", "alexnet/27_wgmma_3xtf32.cu",
         "fp32 accuracy: 3xTF32 on wgmma (layers 2-5; layer 1 step 22's)",
         ("conv_wgmma_3xtf32_16x128", "to_nhwc_split"),
         launcher=Where(WGMMA32, wgmma.applies, _BY_NUMBER["22"], because="step {number} needs stride 1")),
]
STEPS += WGMMA_STEPS
#: Step 28: step 25 with layer 1's copy to channels-last made in one pass of 16-byte stores; the
#: GEMMs, and layers 2-5's copies, are step 25's.
COPY_STEPS = [
    Step("28", "alexnet/28_vector_copies.cu",
         "step 25 + layer 1's copy in 16-byte chunks",
         ("to_nhwc_chunks_half",), launcher=ChunkCopy(WGMMA_OR_20), precision="fp16"),
]
STEPS += COPY_STEPS
#: The steps each of the book's two AlexNet chapters teaches: book/alexnet the ladder up to the
#: Winograd steps, book/alexnet_hopper, after the hopper chapter has taught their machinery (TMA,
#: mbarriers, wgmma, warp specialization, clusters), the rest. One ladder and one recorded run
#: serve both chapters.
CHAPTER_STEPS = {"alexnet": tuple(s.number for s in STEPS if s not in WGMMA_STEPS + COPY_STEPS),
                 "alexnet_hopper": tuple(s.number for s in WGMMA_STEPS + COPY_STEPS)}
#: Exercise 1's kernel, launched like step 2 with a quarter of the blocks along M.
EXERCISE = Step("E1", "alexnet/exercise_01_four_filters.cu", "exercise: four filters per block",
                ("conv_four_filters",), launcher=Direct(filters_per_block=4))
CPU_LOOP_FILE = "alexnet/cpu_loop_nest.cu"


# The kernel files' predictions as claims a run can check (gpulab.predictions states the rules):
# on the five layers' time at N = MAIN_N ("all"), or on the layers a prediction names ("layer 1",
# "layers 2-5", "layers 3-5", or "one image"); a reason is shown only when the run says the
# claim failed in that direction (the chapter's "What we learned" cells give the evidence).
def _predicted():
    p = predictions
    issue = ("every kernel of the report's family spends several instructions per multiply-add, and "
             "the rate at which an SM issues them, not the loads, is the limit (see the profile)")
    # Steps 11-13 quote their verdicts one after the other in one cell: the limit named once, at step 5.
    issue_again = "the SM's instruction issue, not the loads, is the limit, as for step 5 (see the profile)"
    return {
        "01": p.unjudged("the baseline: every later step is measured against it"),
        "02": p.times(3, None, "01", claim="3x or more faster than step 1", because=(
            "step 2 removed step 1's L2 round trips but is limited by instruction issue: each "
            "multiply-add costs about twenty instructions (loads, index arithmetic, padding tests)")),
        "03": p.slower("02", because_faster=(
            "at N = 128 each block computes for far longer than the one-thread copy takes")),
        "04": p.same("02", claim="back to about step 2's time"),
        "05": p.about(1 / 1.5, "03", claim="about 1.5x slower than step 3", because_faster=(
            "shared sums change where a value comes from, not how many instructions fetch it: " + issue)),
        "06": p.Expect(1 / 1.2, 1.2, "02", claim="within 20% of step 2"),
        "07": (p.faster("02", "one image"), p.slower("02")),
        "08": p.faster("07", claim="a small gain over step 7", because=(
            "the shared copy of the weights and its barrier cost more than the broadcast loads from L1 "
            "they replaced")),
        "09": p.times(1.5, 2, "08", because=(
            "with a 3 x 3 filter a block does only nine multiply-adds per output between two barriers, "
            "so copying the patch and waiting costs more than the loads it saves, and layer 1's stride-4 "
            "reads put four threads of a warp on each shared-memory bank")),
        "10": (p.times(1 / 1.7, 1 / 1.3, "02", "layer 1", claim="layer 1 1.3-1.7x slower than step 2"),
               p.same("02", "layers 2-5", claim="layers 2-5 unchanged")),
        "11": (p.about(2, "09", "layer 1", because=issue_again),
               p.same("09", "layers 3-5", claim="roughly even on layers 3-5", because=(
                   "layers 3-5 now do a third more multiply-adds, on padding zeros"))),
        "12": (p.times(1.5, 2, "11", "layers 2-5", claim="towards 2x faster than step 11 on layers 2-5",
                       because="the partial buffer's traffic was not most of the time: " + issue_again),
               p.same("11", "one image", claim="little change at N = 1")),
        "13": p.times(2, 4, "11", "layers 2-5", because=(
            "without the partial buffer the atomics remain, and " + issue_again)),
        "14": p.ms_between(7, 10, because=(
            "at 128 registers per thread only two blocks (a quarter of the SM's warps) are resident, too "
            "few to hide the shared-memory loads and the barrier per slice; the rest goes to the im2col "
            "address arithmetic and to partly empty tiles (see the profile)")),
        "15": p.times(3, 5, "14", because=(
            "its tensor pipe is busy less than a tenth of the time: its warps build each B slice one "
            "2-byte element at a time (a table lookup, a bounds test and a load per element) and wait "
            "for those loads")),
        "16": (p.times(2, 3, "15", "layers 2-5"), p.ms_between(2, 2.5)),
        "17": p.about_ms(7),
        "18": p.times(1.5, 2, "16", "layers 2-5", because=(
            "its warps stall on shared memory, and its 16-byte stores of the next slice into padded "
            "rows cost bank conflicts (see the profile)")),
        "19": p.times(1.1, 1.2, "18", "layers 2-5", because=(
            "cp.async halved the shared-memory stall (see the profile), but that stall was a smaller "
            "share of the main loop's time than the prediction assumed")),
        "20": (p.about(1.2, "19", "layer 1", because=(
            "layer 1's short reduction (17 slices) leaves much of each tile's time to the prologue and the "
            "write-back, which the 96-row tiles do not shorten")), p.about(1.25, "19", "layer 5", because=(
            "layer 5 is a short call (13 x 13 outputs), and this ratio moves between recorded runs of the same "
            "kernels by as much as its gap to the prediction: two H200 runs put it on either side of the band's "
            "lower edge"), because_faster=(
            "besides fuller waves, the swizzled rows free shared memory for larger tiles (four warps "
            "of 64 x 64, slices of 64 k: half the barriers)"))),
        "21": p.about_ms(2),
        "22": p.ms_between(3.3, 3.6, because=(
            "the second set of sums takes registers (one block of 8 warps per SM), and the tensor pipe "
            "is busy only part of the time (see the profile): it costs less than three times step 20, "
            "but more than predicted")),
        "23": p.about_ms(2, "layers 3-5"),
        "24": p.about(1.3, "23", "layers 3-5"),
        "25": (p.about_ms(0.9, because=(
            "the tiles of 128 pixels waste rows on the small images (layer 3-5's 13 x 13 fills 169 of 256 "
            "rows), and each call still copies x to channels-last before its GEMM")),
               p.about_ms(0.6, "layers 2-5")),
        "26": (p.about_ms(1.85, because_faster=(
                   "this prediction counts step 25's tiles; the flat tiles that steps 26 and 27 now use on layers "
                   "3-5 waste fewer rows (169 of 196 against 169 of 256), and the kernel file's second prediction, "
                   "which counts them, is about 1.40 ms")),
               p.about(1 / 2, "25", "layers 2-5", claim="layers 2-5 take about twice step 25's time", because_faster=(
                   "step 25 left the tensor pipe idle more than a third of the time, and step 26 keeps it busier "
                   "(see the profile), so half the rate cost less than twice the time; and step 26's layers 3-5 "
                   "run in flat tiles (169 of 196 rows real), step 25's in rectangles (169 of 256)")),
               p.about(1.2, "21", because_faster="layers 2-5 took less than twice step 25's time (the claim above)")),
        "27": (p.about_ms(5.4, because_faster=(
                   "step 26's layers 2-5, which the prediction scaled by convpool's 3.25, took less than predicted, "
                   "step 27 took less than 3.25x of them, and its layers 2-5 now run in flat tiles, which the "
                   "prediction did not count")),
               p.about(1 / 3.25, "26", "layers 2-5", claim="layers 2-5 take about 3.25x step 26's time")),
        "28": (p.about_ms(0.96), p.about(1.25, "25", "layer 1"), p.same("25", "layers 2-5")),
    }


#: step number -> the checkable claim(s) of its kernel file's prediction (see gpulab.predictions)
PREDICTED = _predicted()

#: The cases a claim may name: (name, batch size, layers summed).
PREDICTION_CASES = (("all", MAIN_N, (1, 2, 3, 4, 5)), ("layers 2-5", MAIN_N, (2, 3, 4, 5)),
                    ("layers 3-5", MAIN_N, (3, 4, 5)), ("layer 1", MAIN_N, (1,)), ("layer 5", MAIN_N, (5,)),
                    ("one image", 1, (1, 2, 3, 4, 5)))
