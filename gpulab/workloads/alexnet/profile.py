"""The Nsight Compute profile of the AlexNet ladder's big steps: which launches, which counters,
and the child process ncu watches (``python -m gpulab profile-driver alexnet``)."""
from __future__ import annotations

import pandas as pd

from ... import ladder, profiler
from .problem import LAYERS, NAME, Conv, make_inputs
from .steps import STEPS


def profile_runs() -> list[tuple[int, str]]:
    """:data:`PROFILE_RUNS` less the runs this GPU refuses (step 25 off Hopper), in launch order."""
    steps = {number: ladder.find(STEPS, number) for _, number in PROFILE_RUNS}
    return [(layer, number) for layer, number in PROFILE_RUNS if not steps[number].launcher.refusal(steps[number])]


#: Nsight Compute counters the chapter reads to explain the big steps: the profiler
#: module's standard set, plus how busy the FMA and tensor pipes and the memories were.
PROFILE_EXTRA_METRICS = {
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_busy_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_busy_pct",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": "fma_pipe_pct",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor_pipe_pct",
    "lts__t_bytes.sum": "l2_bytes",
    "smsp__inst_executed.sum": "warp_instructions",
}
#: Why warps wait (cycles stalled per issued instruction, by reason). Collected when this
#: ncu knows them; the profile is retried without them otherwise.
PROFILE_STALL_METRICS = {
    "sm__inst_issued.avg.pct_of_peak_sustained_active": "issue_slots_busy_pct",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": "stall_global_memory",
    "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio": "stall_shared_memory",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": "stall_barrier",
    "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio": "stall_mio_throttle",
    "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio": "stall_lg_throttle",
    "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio": "stall_math_pipe",
    "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio": "stall_fixed_latency",
}
#: (layer, step) pairs the profile covers, in launch order: the big steps on layer 2,
#: layer 1's two thread mappings (steps 2 and 10), steps 20 and 25 on a 13 x 13 layer (3),
#: where step 25's 128-pixel tiles are fullest of padding rows, and steps 26-27 on layers 2 and 3.
PROFILE_RUNS = ([(2, s) for s in ("01", "02", "04", "07", "09", "11", "13", "14", "15", "16", "17",
                                   "18", "19", "20", "21", "22", "25")]
                + [(1, "02"), (1, "10"), (3, "20"), (3, "25")]
                + [(layer, s) for layer in (2, 3) for s in ("26", "27")])     # the float steps on wgmma
PROFILE_N = 32


def profile_table() -> pd.DataFrame | None:
    """The profiler's view of :data:`PROFILE_RUNS` at N = 32: one row per kernel launch,
    from Nsight Compute run over a child process; None where ``ncu`` is missing or fails
    (the reason is printed)."""
    if profiler.ncu_path() is None:
        print("alexnet: no ncu here, so the run has no profile table")
        return None
    driver = profiler.driver(NAME)
    base = list(profiler.STANDARD_METRICS) + list(PROFILE_EXTRA_METRICS)
    table = None
    for metrics in (base + list(PROFILE_STALL_METRICS), base):
        try:
            table = profiler.per_launch(profiler.profile(driver, metrics, kernel_regex="^(conv_|reduce_)",
                                                         timeout=240))
            break
        except Exception as exc:    # a profiler failure must not lose the timings
            print(f"alexnet: the profile with {len(metrics)} metrics failed: {str(exc)[-1500:]}")
    if table is None:
        return None
    table = table.rename(columns={**PROFILE_EXTRA_METRICS, **PROFILE_STALL_METRICS})
    table = table.sort_values("id").reset_index(drop=True)
    return label_profile(table)


def label_profile(table: pd.DataFrame) -> pd.DataFrame:
    """Label the profiled launches (in launch order) with the layer and step of
    :data:`PROFILE_RUNS`: each run makes one ``conv_`` launch (steps 18 on pick their GEMM per
    layer, so the kernel's name alone does not say the step), and a ``reduce_`` launch belongs
    to the run before it."""
    runs, labels, current = iter(profile_runs()), [], (None, None)
    for kernel in table["kernel"]:
        if str(kernel).startswith("conv_"):
            current = next(runs, (None, None))
        labels.append(current)
    table = table.copy()
    table["layer"] = [layer for layer, _ in labels]
    table["step"] = [step for _, step in labels]
    table["size"] = PROFILE_N
    return table


def profile_driver() -> None:
    """Run each of :data:`PROFILE_RUNS` once at N = 32: the child process Nsight Compute watches
    (``python -m gpulab profile-driver alexnet``)."""
    import cupy
    for index, number in profile_runs():
        layer, step = LAYERS[index - 1], ladder.find(STEPS, number)
        x, w = make_inputs(layer, PROFILE_N)
        arrays = {"x": cupy.asarray(x.astype(step.dtype)), "w": cupy.asarray(w.astype(step.dtype)),
                  "y": cupy.empty(layer.y_shape(PROFILE_N), dtype=step.dtype)}
        step.launcher.bind(step, Conv(layer, PROFILE_N), arrays, "gpu")()
    cupy.cuda.get_current_stream().synchronize()
