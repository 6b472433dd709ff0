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


#: Nsight Compute counters the chapter reads to explain the big steps: the profiler module's
#: standard set and its utilisation set (how busy the FMA and tensor pipes and the memories were),
#: with its stall reasons where this ncu knows them.
PROFILE_METRICS = [*profiler.STANDARD_METRICS, *profiler.UTILISATION_METRICS]
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
    table = profiler.profile_launches(NAME, profiler.driver(NAME), PROFILE_METRICS, kernel_regex="^(conv_|reduce_)",
                                      timeout=240, stalls=list(profiler.STALL_METRICS))
    if table is None:
        return None
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
