"""The Nsight Compute view of the fcnet ladder: the counters the chapter reads, and the child
process ncu watches (``python -m gpulab profile-driver fcnet [CASE]``)."""
from __future__ import annotations

import pandas as pd

from ... import profiler
from ...kernels import get_backend
from .launchers import SEQUENCE, buffers, runnable_steps
from .problem import SIZES, Vectors, make_inputs, make_weights
from .steps import STEPS


#: The Nsight Compute counters the chapter reads (see gpulab.profiler.STANDARD_METRICS).
PROFILE_METRICS = [
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "launch__occupancy_limit_registers",
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
]


def profile_driver(case: str = "large") -> None:
    """Launch every kernel of the ladder once on one case, for Nsight Compute
    to watch (``python -m gpulab profile-driver fcnet [CASE]``); steps 13
    and 14 launch both their kernels, since either may be the case's fastest."""
    import cupy
    weights = make_weights()
    be = get_backend("gpu")
    n = SIZES[case]
    bufs = buffers(be, make_inputs(n), weights, scratch=True)
    for step_ in runnable_steps(STEPS)[0]:
        SEQUENCE.bind(step_, Vectors(n), bufs, be)()
    cupy.cuda.get_current_stream().synchronize()


def kernel_names() -> list[str]:
    return list(dict.fromkeys(name for s in STEPS for name in s.kernels))


def profile_steps(quick: bool = False, case: str = "large") -> pd.DataFrame:
    """The profiler's figures for every step on one case: one row per kernel
    launch, labelled with its step."""
    raw = profiler.profile(profiler.driver("fcnet", case), PROFILE_METRICS,
                           kernel_regex="^(" + "|".join(kernel_names()) + ")$")
    table = profiler.per_launch(raw)
    launches = [(s, launch.kernel) for s in runnable_steps(STEPS)[0] for launch in s.launches]
    if len(launches) != len(table):
        raise RuntimeError(f"expected {len(launches)} profiled launches, got {len(table)}")
    table = table.sort_values("id").reset_index(drop=True)
    table.insert(0, "step", [s.ordinal for s, _ in launches])
    table.insert(1, "variant", [s.label for s, _ in launches])
    table["case"] = case
    return table
