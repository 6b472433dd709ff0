"""The chapter's launch-shape sweeps, through the shared :func:`gpulab.sweep.sweep`.

* ``shape``: step 5 (the fused strip kernel, whose grid and block are free) over threads per
  block x pooled outputs per thread (Q, compiled in), with one block per strip;
* ``blocks``: the report's table, extended: step 5 over blocks x threads per block at the
  best Q, every block looping over strips;
* ``tiles``: the tensor-core steps over their tile's width (128 or 256 pixels) and STAGES,
  the depth of their cp.async ring, at batch 1 and 32.

Each point is checked against the float64 reference before it is timed; a launch the GPU refuses
is listed as invalid, with the reason, and a wrong result as wrong. So is a point this GPU (or the
simulated one, :func:`gpulab.device.simulate`) cannot run: a tile needing more shared memory per
block than it allows, the tensor-core steps below compute capability 8.0, a batch over the memory
budget (see :func:`.launchers.unfit_reason`).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from ...check import compare
from ...device import limits
from ...errors import RecordedRunError
from ...kernels import get_backend, load_module, occupancy
from ...ladder import find
from ...sweep import best, sweep
from .launchers import MEMORY_FRACTION, footprint_bytes, strips, tc_shared_bytes, unfit_reason
from .problem import LAYER, Conv, Shape, layer_arrays, make_inputs, reference
from .steps import STEPS

THREADS = (32, 64, 128, 256, 512, 1024)
Q_VALUES = (1, 2, 4, 8, 16)
#: Grids of the blocks sweep: the report's 28, 56 and 112 work-groups, in steps of 2x from 14 to
#: 1792 (13.6 blocks per SM), and "one block per strip" (0 in the table: strips(...) blocks).
BLOCKS = (14, 28, 56, 112, 224, 448, 896, 1792, 0)
#: The report's best launch (56 work-groups of 256 work-items), run at the same Q.
REPORT_POINT = {"blocks": 56, "threads": 256}
STAGES = (2, 3, 4)
#: The blocks sweep's threads per block: the report's 64, 128 and 256, and up to 1024.
BLOCK_THREADS = (64, 128, 256, 512, 1024)
TILE_PIXELS = (128, 256)
TILE_BATCHES = (1, 32)


class _Layer:
    """Inputs, reference and a poisoned output for one shape, made once for a whole sweep; each
    point is a step with other options or another launch shape, bound by its family."""

    def __init__(self, shape: Shape, backend, steps, seed: int = 0):
        self.be = get_backend(backend)
        self.case = Conv(shape)
        xp = self.be.xp
        x, w, b = make_inputs(shape, seed, xp=xp) if self.be.name == "gpu" else make_inputs(shape, seed)
        self.ref = reference(x, w, b, xp=xp)
        channels_last = [s.dtype for s in steps if s.launcher.channels_last]
        self.arrays = layer_arrays(x, w, b, shape, channels_last, xp=xp)
        self.arrays[Conv.output_name] = self.y = self.be.poisoned(shape.y_shape, np.float32)

    def launch(self, step, **changes):
        point = replace(step, **changes)
        return point.launcher.bind(point, self.case, self.arrays, self.be)

    def reset(self, _point=None):
        self.y.fill(np.nan)

    def verify(self, step, name: str):
        return compare(self.y, self.ref, step.precision, name=name)


def occupancy_columns(step, threads: int, options=(), shared: int = 0, backend=None) -> dict:
    """Registers per thread, resident blocks and warps per SM, and occupancy (resident warps over
    the SM's 64) of ``step`` compiled with ``options`` at ``threads`` per block: CUDA's occupancy
    calculator, on the GPU. On the CPU backend these do not exist: an empty dict."""
    be = get_backend(backend)
    if be.name != "gpu":
        return {}
    kernel = load_module(step.file, be, options=tuple(options)).get_function(step.kernel)
    attrs = kernel.raw.attributes
    row = {"registers": attrs["num_regs"], "max_threads_per_block": attrs["max_threads_per_block"]}
    if threads > attrs["max_threads_per_block"]:
        return {**row, "blocks_per_sm": 0, "warps_per_sm": 0, "occupancy": 0.0}
    if shared > 48 * 1024:
        kernel.allow_shared_memory(shared)
    return {**row, **occupancy(kernel, threads, shared)}


def shape_sweep(backend=None, shape: Shape = LAYER, threads=THREADS, q_values=Q_VALUES, seed: int = 0,
                log=None) -> pd.DataFrame:
    """Step 5 over threads per block x pooled outputs per thread (Q), one block per strip."""
    step = find(STEPS, "05")
    layer = _Layer(shape, backend, [step], seed)

    def prepare(p):
        return layer.launch(step, options=(f"-DQ={p['Q']}",), threads=p["threads"])
    return sweep({"Q": list(q_values), "threads": list(threads)}, prepare, reset=layer.reset,
                 verify=lambda p: layer.verify(step, f"Q={p['Q']}, {p['threads']} threads"),
                 describe=lambda p: {"blocks": strips(replace(step, options=(f"-DQ={p['Q']}",)), shape),
                                     **occupancy_columns(step, p["threads"], (f"-DQ={p['Q']}",), backend=layer.be)},
                 flops=shape.flops, log=log)


def blocks_sweep(q: int, backend=None, shape: Shape = LAYER, blocks=BLOCKS, threads=BLOCK_THREADS, seed: int = 0,
                 log=None) -> pd.DataFrame:
    """Step 5 at ``q`` pooled outputs per thread over blocks x threads per block (blocks 0: one
    block per strip); each block loops over the strips, so every point computes the whole layer."""
    step = find(STEPS, "05")
    options = (f"-DQ={q}",)
    layer = _Layer(shape, backend, [step], seed)
    all_strips = strips(replace(step, options=options), shape)

    def prepare(p):
        return layer.launch(step, options=options, blocks=p["blocks"] or all_strips, threads=p["threads"])
    table = sweep({"blocks": list(blocks), "threads": list(threads)}, prepare, reset=layer.reset,
                  verify=lambda p: layer.verify(step, f"{p['blocks']} blocks, {p['threads']} threads"),
                  describe=lambda p: {"Q": q, "strips": all_strips,
                                      **occupancy_columns(step, p["threads"], options, backend=layer.be)},
                  flops=shape.flops, log=log)
    return table.assign(grid=[b or all_strips for b in table["blocks"]])


def tile_options(point: dict) -> tuple:
    """The compile options of a tile-sweep point: STAGES and the tile's pixels (TC_BN)."""
    return (f"-DSTAGES={point['STAGES']}", f"-DTC_BN={point['pixels']}")


def tile_sweep(backend=None, batches=TILE_BATCHES, stages=STAGES, pixels=TILE_PIXELS, steps=("07", "08"),
               shape: Shape = LAYER, seed: int = 0, log=None) -> pd.DataFrame:
    """The tensor-core steps over tile width (128 or 256 pixels) x STAGES (cp.async slices in
    flight), at each batch size."""
    frames = []
    for N in batches:
        at_n = shape.batch(N)
        chosen = [find(STEPS, s) for s in steps]
        here = limits()
        too_large = here.memory_fits(footprint_bytes(at_n), MEMORY_FRACTION) if here is not None else None
        if too_large:             # not even allocated: every point of this batch is invalid, with the reason
            frames.append(pd.DataFrame([{"pixels": px, "STAGES": st, "step": number, "N": N, "status": "invalid",
                                         "reason": too_large, "timed": False, "repeats": 0}
                                        for number in steps for px in pixels for st in stages]))
            continue
        layer = _Layer(at_n, backend, chosen, seed)
        for number in steps:
            step = find(STEPS, number)

            def prepare(p, step=step):
                return layer.launch(step, options=tile_options(p))

            def describe(p, step=step):
                shared = tc_shared_bytes(replace(step, options=tile_options(p)))
                row = {"step": step.number, "N": N, "shared_bytes": shared}
                if unfit_reason(replace(step, options=tile_options(p)), at_n):   # its binding says why: no occupancy
                    return row
                return {**row, **occupancy_columns(step, 256, tile_options(p), shared, backend=layer.be)}
            frames.append(sweep({"pixels": list(pixels), "STAGES": list(stages)}, prepare, reset=layer.reset,
                                verify=lambda p, step=step: layer.verify(step, f"step {step.number} {p}"),
                                describe=describe, flops=at_n.flops, log=log))
        del layer
    return pd.concat(frames, ignore_index=True)


def record_sweeps(quick: bool = False, log=None) -> dict:
    """The three sweeps of the recorded run, as one side table ``sweeps`` whose column ``sweep``
    says which ("shape", "blocks", "tiles"): one file, since the device machine returns at most
    eight files from a run."""
    shape_table = shape_sweep(threads=THREADS if not quick else (64, 256), q_values=Q_VALUES if not quick else (4, 8),
                              log=log)
    q = int(best(shape_table)["Q"])
    blocks_table = blocks_sweep(q, blocks=BLOCKS if not quick else (56, 0),
                                threads=BLOCK_THREADS if not quick else (64, 256), log=log)
    tiles = tile_sweep(batches=TILE_BATCHES if not quick else (1,), log=log)
    return {"sweeps": pd.concat([shape_table.assign(sweep="shape"), blocks_table.assign(sweep="blocks"),
                                 tiles.assign(sweep="tiles")], ignore_index=True)}


def sweep_table(run, name: str) -> pd.DataFrame:
    """One sweep ("shape", "blocks" or "tiles") of a run's ``sweeps`` table, without the columns
    the other sweeps use."""
    if name not in ("shape", "blocks", "tiles"):
        raise ValueError(f"name must be 'shape', 'blocks' or 'tiles', got {name!r}")
    if "sweeps" not in run.tables:
        raise RecordedRunError(f"the {run.chapter} run on {run.gpu} has no sweeps table; re-record it with "
                               f"`python -m gpulab record {run.chapter}` on a GPU machine")
    table = run.tables["sweeps"]
    table = table[table["sweep"] == name].dropna(axis=1, how="all").reset_index(drop=True)
    for column in ("median_ms", "gflops"):   # kept when no point was timed (all invalid on this GPU)
        if column not in table:
            table[column] = np.nan
    for column in table.columns:           # whole numbers read back as floats (other sweeps' NaN)
        values = table[column]
        if values.dtype.kind == "f" and values.dropna().mod(1).eq(0).all():
            table[column] = values.astype("Int64")
    table["reason"] = table["reason"].fillna("") if "reason" in table else ""
    return table
