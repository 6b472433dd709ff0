"""Hardware counters from Nsight Compute, as tidy tables.

The event timers say *how long* a kernel takes; the profiler says *why*:
how many shared-memory bank conflicts it had, how many 32-byte sectors each
global load request touched (4 is perfectly coalesced for 4-byte loads, 32
the worst), how many warps were resident. :func:`profile` runs Nsight
Compute's command-line profiler (``ncu``) over a Python driver that launches
the kernels of interest, and :func:`parse_csv` turns its ``--csv`` output into
one row per (kernel launch, metric). Everything but :func:`profile` itself
works without a GPU, so recorded profiles can be read anywhere.

    rows = profile(driver("fcnet", "large"), metrics=STANDARD_METRICS, kernel_regex="^(matmul|relu)$")
    table = per_launch(rows)
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Sequence

import pandas as pd

from .errors import GpulabError

#: Counters the book reads, with the short names its tables use.
STANDARD_METRICS = {
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "shared_load_bank_conflicts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "shared_store_bank_conflicts",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "shared_load_wavefronts",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "global_load_sectors",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "global_load_requests",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "launch__registers_per_thread": "registers_per_thread",
    "launch__occupancy_limit_registers": "occupancy_limit_registers",
    "gpu__time_duration.sum": "duration_ns",
    "dram__bytes_read.sum": "dram_bytes_read",
    "sm__inst_executed_pipe_fma.sum": "fma_pipe_instructions",
}
#: How busy the SMs, DRAM and the FMA and tensor pipes were, and the work done (L2 bytes,
#: instructions): the utilisation the conv chapters' profile tables add (alexnet, lenet).
UTILISATION_METRICS = {
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_busy_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_busy_pct",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": "fma_pipe_pct",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor_pipe_pct",
    "lts__t_bytes.sum": "l2_bytes",
    "smsp__inst_executed.sum": "warp_instructions",
}
#: Why warps wait (cycles stalled per issued instruction, by reason), and how busy the issue
#: slots were. Not every ncu knows all of them: :func:`profile_launches` retries without them.
STALL_METRICS = {
    "sm__inst_issued.avg.pct_of_peak_sustained_active": "issue_slots_busy_pct",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": "stall_global_memory",
    "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio": "stall_shared_memory",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": "stall_barrier",
    "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio": "stall_mio_throttle",
    "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio": "stall_lg_throttle",
    "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio": "stall_math_pipe",
    "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio": "stall_fixed_latency",
}
#: Every counter a chapter's profile reads, with the short name its tables use: the metric sets
#: above and the few single counters a chapter adds. One name per counter, wherever it is read.
SHORT_NAMES = {**STANDARD_METRICS, **UTILISATION_METRICS, **STALL_METRICS,
               "dram__bytes_write.sum": "dram_bytes_write",
               "sm__inst_executed.sum": "warp_instructions"}

#: The columns :func:`parse_csv` returns.
COLUMNS = ["id", "kernel", "block", "grid", "metric", "name", "unit", "value"]


class ProfilerError(GpulabError, RuntimeError):
    """Nsight Compute is missing, failed, or printed something unreadable."""


def ncu_path() -> str | None:
    """The ``ncu`` executable on PATH (or in the usual CUDA folders), or None."""
    found = shutil.which("ncu")
    if found:
        return found
    for folder in ("/usr/local/cuda/bin", "/opt/nvidia/nsight-compute"):
        candidate = os.path.join(folder, "ncu")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def driver(chapter: str, *options: str, python: str = sys.executable) -> list[str]:
    """The child process Nsight Compute watches for ``chapter``, the same entry point for every
    chapter: ``python -m gpulab profile-driver CHAPTER [OPTION ...]``, which calls the chapter's
    ``profile_driver(*options)`` (it launches each profiled kernel once)."""
    return [python, "-m", "gpulab", "profile-driver", chapter, *options]


def command(driver: Sequence[str], metrics: Sequence[str], *, kernel_regex: str | None = None,
            log_file: str | None = None, ncu: str = "ncu") -> list[str]:
    """The ncu command line :func:`profile` runs (shown so a reader can run it by hand).

    ``--clock-control none`` leaves the GPU's clocks as they are (by default ncu
    locks them to the base clock while it measures)."""
    if not metrics:
        raise ValueError("metrics must name at least one Nsight Compute metric")
    cmd = [ncu, "--csv", "--print-units", "base", "--clock-control", "none",
           "--metrics", ",".join(metrics), "--target-processes", "all"]
    if kernel_regex:
        cmd += ["--kernel-name", f"regex:{kernel_regex}"]
    if log_file:
        cmd += ["--log-file", log_file]
    return cmd + list(driver)


def profile(driver: Sequence[str], metrics: Sequence[str] = tuple(STANDARD_METRICS), *,
            kernel_regex: str | None = None, timeout: float = 600, env: dict | None = None) -> pd.DataFrame:
    """Run ``driver`` (a command, e.g. :func:`driver`'s ``[python, "-m", "gpulab", "profile-driver", chapter]``)
    under ncu, collecting ``metrics`` for every kernel whose name matches
    ``kernel_regex``; return :func:`parse_csv`'s table."""
    ncu = ncu_path()
    if ncu is None:
        raise ProfilerError("Nsight Compute's 'ncu' is not on PATH; it ships with the CUDA toolkit "
                            "(or as the nsight-compute package) on GPU machines")
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "ncu.csv")
        cmd = command(driver, metrics, kernel_regex=kernel_regex, log_file=log, ncu=ncu)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})
        text = open(log).read() if os.path.exists(log) else ""
    if done.returncode != 0:
        raise ProfilerError(f"ncu exited with status {done.returncode}:\n{(done.stderr or done.stdout)[-3000:]}"
                            f"\n{text[-2000:]}")
    return parse_csv(text)


def _number(text: str) -> float:
    cleaned = text.replace(",", "").strip()
    if cleaned in ("", "n/a", "N/A"):
        return float("nan")
    try:
        return float(cleaned)
    except ValueError:
        return float("nan")


def parse_csv(text: str) -> pd.DataFrame:
    """Nsight Compute ``--csv`` output (details page: one line per kernel
    launch and metric) as a tidy table with :data:`COLUMNS`: the launch ``id``,
    the kernel's name (without argument list), block and grid shapes, the
    metric's full name, its short ``name`` from :data:`SHORT_NAMES`
    (or the full name), the unit, and the value as a float.

    Lines that are not CSV (``==PROF==`` progress, the driver's own prints)
    are skipped; a missing header is an error naming what was found."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines)
                  if line.startswith('"ID"') and '"Metric Name"' in line), None)
    if start is None:
        shown = "\n".join(lines[:10]) or "(nothing)"
        raise ProfilerError("no Nsight Compute CSV header (\"ID\",...,\"Metric Name\",...) in the "
                            f"profiler output; its first lines were:\n{shown}")
    body = [lines[start]] + [line for line in lines[start + 1:] if line.startswith('"')]
    reader = csv.DictReader(io.StringIO("\n".join(body)))
    needed = {"ID", "Kernel Name", "Metric Name", "Metric Value"}
    if not needed <= set(reader.fieldnames or []):
        raise ProfilerError(f"the profiler's CSV lacks columns {sorted(needed - set(reader.fieldnames or []))}; "
                            f"it has {reader.fieldnames}")
    rows = []
    for record in reader:
        metric = record["Metric Name"]
        rows.append({"id": int(_number(record["ID"])),
                     "kernel": record["Kernel Name"].split("(")[0].strip(),
                     "block": record.get("Block Size", ""), "grid": record.get("Grid Size", ""),
                     "metric": metric, "name": SHORT_NAMES.get(metric, metric),
                     "unit": record.get("Metric Unit", ""), "value": _number(record["Metric Value"])})
    return pd.DataFrame(rows, columns=COLUMNS)


def per_launch(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per kernel launch, one column per metric (short names), plus
    ``sectors_per_request`` when both global-load counters are present."""
    if rows.empty:
        raise ProfilerError("no profiler rows: did the kernel-name filter match any launch?")
    table = rows.pivot_table(index=["id", "kernel"], columns="name", values="value", aggfunc="first")
    table = table.reset_index()
    table.columns.name = None
    if {"global_load_sectors", "global_load_requests"} <= set(table.columns):
        requests = table["global_load_requests"].where(table["global_load_requests"] > 0)
        table["sectors_per_request"] = table["global_load_sectors"] / requests
    return table


def profile_launches(who: str, driver: Sequence[str], metrics: Sequence[str], *, kernel_regex: str,
                     timeout: float, stalls: Sequence[str] = ()) -> pd.DataFrame | None:
    """:func:`per_launch` of ``metrics`` over ``driver``, in launch order (short names,
    :data:`SHORT_NAMES`): first with the counters ``stalls`` as well, then, where that ncu does
    not know one of them, without. None where ncu is missing or every try fails, the reason
    printed under the chapter's name ``who``: a profiler failure must not lose a run's timings."""
    if ncu_path() is None:
        print(f"{who}: no ncu here, so the run has no profile table")
        return None
    tries = [[*metrics, *stalls], list(metrics)] if stalls else [list(metrics)]
    for wanted in tries:
        try:
            table = per_launch(profile(driver, wanted, kernel_regex=kernel_regex, timeout=timeout))
        except Exception as exc:     # any failure of ncu or of its output: try the next set
            print(f"{who}: the profile with {len(wanted)} metrics failed: {str(exc)[-1500:]}")
            continue
        return table.sort_values("id").reset_index(drop=True)
    return None
