"""Chapter 2's workload: a 72-64-64-4 fully-connected network's inference.

    Y = W3 relu(W2 relu(W1 X))

applied to N input vectors at once, declared once: the shapes, the seeded
weights and inputs, the FLOP and byte counts, the float64 reference, the
ladder of kernels with their launch configurations, the checks, and the
benchmark that ``python -m gpulab record fcnet`` turns into the recorded run.

Layout (every step): X is feature-major, ``X[k, v]`` at ``k*N + v`` (72 x N),
so consecutive threads reading consecutive vectors read consecutive
addresses; Y is 4 x N the same way. Weights are row-major as in ``y = W x``
(``W1`` is 64 x 72); some steps take them transposed or in half precision,
and each launch names which form it reads.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from .. import ladder as protocol   # (this module's own ladder() reads a run's ladder table)
from ..check import CheckTable, compare
from ..kernels import Backend, Kernel, get_backend, load_module

CHAPTER = "fcnet"
TITLE = "A fully-connected network's inference, from five kernel launches to one kernel at the hardware limit"

IN, HID, OUT = 72, 64, 4          # inputs, hidden units per layer, outputs
#: The two cases of the report: 12,800 vectors ("small") and 5,120,000 ("large").
SIZES = {"small": 12_800, "large": 5_120_000}
#: Why a vendor path has no ``rel_error_vs_fp32`` (the lab's fp16 steps are also compared with
#: the lab's own fp32 result; a vendor path only with the reference).
FP32_GAP = "vendor paths are checked against the float64 reference only"
#: Why :func:`warm_cold` has no graph times for CuPy's chain (see baselines.cupy_chain).
COLD_GAP = ("CuPy's matmul chain is not timed in a CUDA graph: it re-binds its cuBLAS handle to the stream "
            "on every call, which stream capture forbids")
#: Correctness sizes: 1000 leaves a partial last tile for the tiled steps (32,
#: 64 or 128 vectors) and takes the float4 paths (a multiple of 4); 4099 is odd,
#: so every step's last block is partial and the scalar paths run.
CHECK_SIZES = (1000, 4099)
MACS_PER_VECTOR = IN * HID + HID * HID + HID * OUT          # 8,960 multiply-adds
FLOPS_PER_VECTOR = 2 * MACS_PER_VECTOR
BYTES_PER_VECTOR = 4 * (IN + OUT)                           # read 72 floats, write 4
WEIGHT_SEED, INPUT_SEED = 2026, 7
#: CPU backend: the grid "persistent" kernels get (the GPU's is measured).
CPU_PERSISTENT_BLOCKS = 3


def work(n: int) -> dict:
    """FLOPs and the fewest bytes of device memory one inference of n vectors needs."""
    return {"flops": float(FLOPS_PER_VECTOR * n), "bytes": float(BYTES_PER_VECTOR * n)}


def floors_ms(n: int, tflops: float, gbs: float) -> dict:
    """The arithmetic floor and the memory floor of one inference of n vectors,
    in ms, at ``tflops`` (FP32 TFLOP/s) and ``gbs`` (GB/s of device memory):
    pass a run's measured ceilings (:func:`measured_rates`) or the datasheet's."""
    from ..roofline import floors_ms as roofline_floors
    w = work(n)
    floors = roofline_floors(w["flops"], w["bytes"], peak_gflops=tflops * 1e3, peak_gbs=gbs)
    return {"arithmetic_ms": floors["compute_ms"], "memory_ms": floors["memory_ms"]}


def measured_rates(run) -> dict:
    """The run's measured ceilings: FP32 TFLOP/s (cuBLAS SGEMM), copy GB/s and,
    when recorded, the fp16 tensor-core TFLOP/s (cuBLAS HGEMM)."""
    from ..roofline import rates
    rows = rates(run.timings[run.timings["experiment"] == "ceilings"]).set_index("variant")
    out = {"fp32_tflops": rows.loc["cuBLAS SGEMM", "gflops"] / 1e3, "copy_gbs": rows.loc["device copy", "gbs"]}
    if "cuBLAS HGEMM (fp16)" in rows.index:
        out["fp16_tensor_tflops"] = rows.loc["cuBLAS HGEMM (fp16)", "gflops"] / 1e3
    return out


# ----------------------------------------------------------------- data and reference
def make_weights(seed: int = WEIGHT_SEED) -> dict[str, np.ndarray]:
    """W1 (64x72), W2 (64x64), W3 (4x64), float32, uniform in +-sqrt(6/fan_in)
    (He initialisation: activations keep their scale through the ReLUs, so
    half precision neither overflows nor underflows)."""
    rng = np.random.default_rng(seed)
    shapes = {"W1": (HID, IN), "W2": (HID, HID), "W3": (OUT, HID)}
    return {name: rng.uniform(-1, 1, shape).astype(np.float32) * np.float32(math.sqrt(6 / shape[1]))
            for name, shape in shapes.items()}


def make_inputs(n: int, seed: int = INPUT_SEED) -> np.ndarray:
    """X: 72 x n float32, uniform in [-1, 1), feature-major."""
    if n < 1:
        raise ValueError(f"n must be a positive number of vectors, got {n}")
    return np.random.default_rng(seed).uniform(-1, 1, (IN, n)).astype(np.float32)


#: Vectors the reference computes at once: its float64 intermediates are HID x chunk (134 MB at
#: 262,144), not HID x n (2.6 GB for the large case's 5,120,000, which with the inputs cast to
#: float64 did not fit an 8 GB GPU beside the kernels' own buffers).
REFERENCE_CHUNK = 262_144


def reference(x, weights: dict, dtype=np.float64, xp=np, chunk: int = REFERENCE_CHUNK):
    """Y = W3 relu(W2 relu(W1 X)) computed in ``dtype`` (float64 for checks;
    float32 to measure what half precision costs against single precision), ``chunk``
    vectors (columns of X) at a time: the same numbers, in a fraction of the memory."""
    if chunk < 1:
        raise ValueError(f"chunk must be a positive number of vectors, got {chunk}")
    w = {k: xp.asarray(v, dtype=dtype) for k, v in weights.items()}
    n = x.shape[1]
    y = xp.empty((w["W3"].shape[0], n), dtype=dtype)
    for start in range(0, n, chunk):
        h = xp.maximum(w["W1"] @ xp.asarray(x[:, start:start + chunk], dtype=dtype), 0)
        h = xp.maximum(w["W2"] @ h, 0)
        y[:, start:start + chunk] = w["W3"] @ h
    return y


#: The share of the device's memory one case of the record may use (the rest: PyTorch's cache,
#: cuBLAS's workspaces, the vendor paths' own copies).
MEMORY_FRACTION = 0.75


def footprint_bytes(n: int) -> int:
    """Device memory the record holds at once for a case of ``n`` vectors: the fp32 inputs and
    output, the H1/H2 scratch of the unfused steps, the float64 reference output (and one chunk of
    its intermediates), the fp32 reference, and the largest vendor path's copies (inputs in half
    precision and two fp32 hidden activations)."""
    chunk = min(n, REFERENCE_CHUNK)
    ours = 4 * n * (IN + OUT + 2 * HID)
    ref = 8 * n * OUT + 4 * n * OUT + 8 * chunk * (IN + 2 * HID)
    vendor = 2 * n * IN + 4 * n * 2 * HID + 4 * n * OUT
    return int(ours + ref + vendor)


def plan_sizes(sizes: dict, limits=None) -> tuple[dict, list[dict]]:
    """The cases of ``sizes`` ({case: n}) whose :func:`footprint_bytes` fits
    :data:`MEMORY_FRACTION` of this device's memory (``limits``; default: this device's, or the
    simulated one's), and a ``skipped`` row with the reason for each that does not."""
    from ..device import limits as device_limits
    here = limits if limits is not None else device_limits()
    chosen, skipped = {}, []
    for case, n in sizes.items():
        why = here.memory_fits(footprint_bytes(n), MEMORY_FRACTION) if here is not None else None
        if why:
            skipped.append({"step": "all", "variant": f"{case} case, every step and vendor path",
                            "library": "", "precision": "", "size": n, "reason": why})
        else:
            chosen[case] = n
    return chosen, skipped


def weight_forms(weights: dict) -> dict[str, np.ndarray]:
    """Every form a kernel reads the weights in, by the names launches use:
    w1 row-major fp32, w1t transposed, w1h half, w1th transposed half, and the
    tensor-core step's zero-padded half matrices (w1tc: 64 x 80, w3tc: 16 x 64)."""
    forms = {}
    for i in (1, 2, 3):
        w = weights[f"W{i}"]
        forms[f"w{i}"] = np.ascontiguousarray(w)
        forms[f"w{i}t"] = np.ascontiguousarray(w.T)
        forms[f"w{i}h"] = w.astype(np.float16)
        forms[f"w{i}th"] = np.ascontiguousarray(w.T).astype(np.float16)
    pad1 = np.zeros((HID, TC_K1), np.float16)
    pad1[:, :IN] = weights["W1"]
    pad3 = np.zeros((TC_M3, HID), np.float16)
    pad3[:OUT] = weights["W3"]
    forms["w1tc"], forms["w2tc"], forms["w3tc"] = pad1, weights["W2"].astype(np.float16), pad3
    return forms


TC_K1 = 80     # the tensor-core step pads layer 1's 72 inputs to a multiple of 16
TC_M3 = 16     # and layer 3's 4 outputs to one 16-row tile
#: Step 15's dynamic shared memory (SMEM_BYTES in its kernel file).
TC_SHARED_BYTES = 2 * (HID * (TC_K1 + 8) + HID * (HID + 8) + TC_M3 * (HID + 8) + TC_K1 * 136
                       + HID * 136) + 8 * 16 * 16 * 4


# ----------------------------------------------------------------- the ladder
@dataclass(frozen=True)
class Launch:
    """One kernel launch of a step. ``args`` name the buffers and sizes the
    kernel takes (see :func:`buffers`). The grid covers the vectors:
    ``ceil(N / vectors_per_block)`` blocks, times ``rows`` along y; a
    ``persistent`` kernel instead gets as many blocks as fit on the GPU at once
    and loops over its work."""

    kernel: str
    args: tuple[str, ...]
    block: tuple[int, ...] = (256,)
    vectors_per_block: int = 256
    rows: int = 1
    persistent: bool = False
    shared_mem: int = 0

    def grid(self, n: int, resident_blocks: int | None = None) -> tuple[int, int]:
        blocks = -(-n // self.vectors_per_block)
        if self.persistent:
            blocks = min(blocks, resident_blocks or CPU_PERSISTENT_BLOCKS)
        return (max(1, blocks), self.rows)


@dataclass(frozen=True)
class Step(protocol.Step):
    """One rung of the ladder: a kernel file and the launches one inference takes."""

    launches: tuple[Launch, ...]
    #: The cases this kernel was written for (a prediction: the ladder shows, per
    #: case, whichever of a step's kernels the run measured fastest).
    sizes: tuple[str, ...] = ("small", "large")

    @property
    def kernels(self) -> list[str]:
        return list(dict.fromkeys(launch.kernel for launch in self.launches))


_FUSED = ("n", "x", "w1", "w2", "w3", "y")
_FUSED_T = ("n", "x", "w1t", "w2t", "w3t", "y")
_HALF = ("n", "x", "w1h", "w2h", "w3h", "y")
_HALF_T = ("n", "x", "w1th", "w2th", "w3h", "y")   # W3 stays row-major: its reads were coalesced
_MMA = ("n", "x", "w1tc", "w2tc", "w3tc", "y")


def tf32x3_shared_bytes(tile: int, warps: int) -> int:
    """Step 18's dynamic shared memory: W1 and W2 split into tf32 hi and lo parts (64 rows of
    36 float4), then two input buffers of 72 x (tile + 4) floats per warp."""
    return 2 * HID * 36 * 16 + warps * 2 * IN * (tile + 4) * 4


def mma_shared_bytes(tile: int, warps: int = 8, stages: int = 2) -> int:
    """Step 17's dynamic shared memory: the half weights in padded rows (W1 64 x 88, W2 64 x 72,
    W3 8 x 72), then ``stages`` input buffers of 72 x (tile + 4) floats per warp."""
    return 2 * (HID * (TC_K1 + 8) + HID * (HID + 8) + 8 * (HID + 8)) + warps * stages * IN * (tile + 4) * 4


def _matmul(m: int, k: int, a: str, b: str, c: str) -> Launch:
    return Launch("matmul", (str(m), "n", str(k), a, b, c), block=(16, 16), vectors_per_block=16,
                  rows=-(-m // 16))


def _relu(buffer: str) -> Launch:
    return Launch("relu", ("hid_n", buffer), vectors_per_block=256 // HID)


STEPS = [
    Step(1, "fcnet/01_matmul_relu.cu", "matmul + relu, five launches",
         (_matmul(HID, IN, "w1", "x", "h1"), _relu("h1"), _matmul(HID, HID, "w2", "h1", "h2"),
          _relu("h2"), _matmul(OUT, HID, "w3", "h2", "y"))),
    Step(2, "fcnet/02_fused_global.cu", "fused, hidden layers in global memory",
         (Launch("fused_global", ("n", "x", "w1", "w2", "w3", "h1", "h2", "y"), vectors_per_block=4),)),
    Step(3, "fcnet/03_fused_shared.cu", "fused, shared memory",
         (Launch("fused_shared", _FUSED, vectors_per_block=4),)),
    Step(4, "fcnet/04_whole_net_shared.cu", "whole net in shared memory",
         (Launch("whole_net_shared", _FUSED, vectors_per_block=4, persistent=True),)),
    Step(5, "fcnet/05_shared_and_registers.cu", "shared memory + registers",
         (Launch("shared_and_registers", _FUSED, vectors_per_block=4, persistent=True),)),
    Step(6, "fcnet/06_last_layer_shuffle.cu", "last layer by warp shuffles",
         (Launch("last_layer_shuffle", _FUSED, vectors_per_block=4, persistent=True),)),
    Step(7, "fcnet/07_whole_net_registers.cu", "whole net in registers",
         (Launch("whole_net_registers", _FUSED, vectors_per_block=2, persistent=True),)),
    Step(8, "fcnet/08_half_precision.cu", "half precision",
         (Launch("half_precision", _HALF, vectors_per_block=2, persistent=True),), precision="fp16"),
    Step(9, "fcnet/09_conflict_free_tile.cu", "32-vector tiles, conflict-free fill",
         (Launch("conflict_free_tile", _HALF, vectors_per_block=32, persistent=True),), precision="fp16"),
    Step(10, "fcnet/10_coalesced_weights.cu", "coalesced reads of transposed weights",
         (Launch("coalesced_weights", _HALF_T, vectors_per_block=32, persistent=True),), precision="fp16"),
    Step(11, "fcnet/11_hide_input_loads.cu", "hiding input loads",
         (Launch("hide_input_loads", _HALF_T, vectors_per_block=32, persistent=True),), precision="fp16"),
    Step(12, "fcnet/12_fewer_registers.cu", "fewer registers, more warps",
         (Launch("fewer_registers", _HALF_T, vectors_per_block=32, persistent=True),), precision="fp16"),
    Step(13, "fcnet/13_best_per_size.cu", "one-warp outputs + tile loop",
         (Launch("best_large", _HALF_T, vectors_per_block=32, persistent=True),), precision="fp16",
         sizes=("large",)),
    Step(13, "fcnet/13_best_per_size.cu", "one-warp outputs + one tile per block",
         (Launch("best_small", _HALF_T, vectors_per_block=32),), precision="fp16", sizes=("small",)),
    Step(14, "fcnet/14_register_tiles_fp32.cu", "fp32 register tiles (large)",
         (Launch("tiled_fp32_large", _FUSED_T, block=(128,), vectors_per_block=128, persistent=True,
                 shared_mem=4 * (IN * HID + HID * HID + HID * OUT + (IN + HID) * 128)),),
         sizes=("large",)),
    Step(14, "fcnet/14_register_tiles_fp32.cu", "fp32 register tiles (small)",
         (Launch("tiled_fp32_small", _FUSED_T, block=(128,), vectors_per_block=64, persistent=True,
                 shared_mem=4 * (IN * HID + HID * HID + HID * OUT + (IN + HID) * 64)),),
         sizes=("small",)),
    Step(15, "fcnet/15_tensor_cores.cu", "tensor cores (wmma fp16)",
         (Launch("tensor_cores", ("n", "x", "w1tc", "w2tc", "w3tc", "y"), vectors_per_block=128,
                 persistent=True, shared_mem=TC_SHARED_BYTES),), precision="fp16"),
]
#: Steps beyond wmma (16 is the exercise): mma.sync with the activations in registers and
#: cp.async input streams.
MMA_STEPS = [
    Step(17, "fcnet/17_mma_registers.cu", "mma.sync, activations in registers (large)",
         (Launch("mma_fp16_large", _MMA, block=(256,), vectors_per_block=8 * 32, persistent=True,
                 shared_mem=mma_shared_bytes(32)),), precision="fp16", sizes=("large",)),
    Step(17, "fcnet/17_mma_registers.cu", "mma.sync, activations in registers (small)",
         (Launch("mma_fp16_small", _MMA, block=(256,), vectors_per_block=8 * 16, persistent=True,
                 shared_mem=mma_shared_bytes(16)),), precision="fp16", sizes=("small",)),
    Step(18, "fcnet/18_tf32x3_fp32.cu", "fp32 accuracy on tensor cores (3xTF32)",
         (Launch("tf32x3", _FUSED, block=(256,), vectors_per_block=8 * 16, persistent=True,
                 shared_mem=tf32x3_shared_bytes(16, 8)),)),
]
STEPS += MMA_STEPS

#: Exercise 1: step 1 with the ReLU fused into the matmul, three launches instead of five.
EXERCISE = Step(16, "fcnet/16_exercise_matmul_relu.cu", "exercise: matmul with fused relu, three launches",
                (Launch("matmul_relu", (str(HID), "n", str(IN), "1", "w1", "x", "h1"), block=(16, 16),
                        vectors_per_block=16, rows=HID // 16),
                 Launch("matmul_relu", (str(HID), "n", str(HID), "1", "w2", "h1", "h2"), block=(16, 16),
                        vectors_per_block=16, rows=HID // 16),
                 Launch("matmul_relu", (str(OUT), "n", str(HID), "0", "w3", "h2", "y"), block=(16, 16),
                        vectors_per_block=16, rows=1)))


def steps(number: int | str | None = None, size: str | None = None) -> list[Step]:
    """The ladder's steps, optionally only step ``number`` (13 and 14 have one
    kernel per size) and only those written for ``size`` ("small" or "large")."""
    if size is not None and size not in SIZES:
        raise ValueError(f"size must be one of {list(SIZES)}, got {size!r}")
    chosen = [s for s in protocol.select(STEPS, number) if size is None or size in s.sizes]
    if not chosen:
        raise KeyError(f"step {number} of the fcnet ladder has no kernel written for size {size}")
    return chosen


# ----------------------------------------------------------------- fitting the device
def unfit_reason(step: Step, limits=None) -> str | None:
    """Why ``step`` cannot run on this device (or the simulated one: see
    :func:`gpulab.device.simulate`), or None when it can: a launch asking for
    more dynamic shared memory per block than the device allows (step 14's
    large kernel asks 105,472 bytes; a T4 allows 65,536, an L4 101,376)."""
    from ..device import limits as device_limits
    limits = limits if limits is not None else device_limits()
    if limits is None:             # the CPU backend, no profile simulated: no such limit
        return None
    for launch in step.launches:
        why = limits.shared_fits(launch.shared_mem)
        if why:
            return f"step {step.number} ({launch.kernel}) {why}"
    return None


def runnable_steps(steps_=None, limits=None) -> tuple[list[Step], list[dict]]:
    """The steps this device can run, and one row per step it cannot, with the reason."""
    ok, skipped = [], []
    for step_ in steps_ or STEPS:
        why = unfit_reason(step_, limits)
        if why:
            skipped.append({"step": step_.ordinal, "variant": step_.label, "reason": why})
        else:
            ok.append(step_)
    return ok, skipped


# ----------------------------------------------------------------- running a step
def buffers(be: Backend, x, weights: dict, scratch: bool = False) -> dict:
    """Device copies of the inputs and every weight form, a NaN-poisoned output
    and (for the steps that need them) H1/H2 scratch, by the names launches use."""
    n = x.shape[1]
    bufs = {"n": n, "hid_n": HID * n, "x": be.to_device(x), "y": be.poisoned((OUT, n), np.float32)}
    bufs.update({name: be.to_device(w) for name, w in weight_forms(weights).items()})
    if scratch:
        bufs["h1"] = be.poisoned((HID, n), np.float32)
        bufs["h2"] = be.poisoned((HID, n), np.float32)
    return bufs


def _resolve(token: str, bufs: dict):
    if token.isdigit():
        return int(token)
    return bufs[token]


def resident_blocks(fn: Kernel, launch: Launch) -> int | None:
    """How many blocks of ``launch`` fit on the whole GPU at once (None on the CPU)."""
    if fn.module.backend.name != "gpu":
        return None
    import cupy
    from ..kernels import occupancy
    sms = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["multiProcessorCount"]
    threads = int(np.prod(launch.block))
    return sms * max(1, occupancy(fn, threads, launch.shared_mem)["blocks_per_sm"])


def step_kernels(step: Step, backend=None) -> dict[str, Kernel]:
    be = get_backend(backend)
    module = load_module(step.file, be)
    fns = {name: module.get_function(name) for name in step.kernels}
    for launch in step.launches:
        if launch.shared_mem > 48 * 1024:
            fns[launch.kernel].allow_shared_memory(launch.shared_mem)
    return fns


def bind(step: Step, fns: dict[str, Kernel], bufs: dict) -> Callable[[], None]:
    """One inference of ``step`` over ``bufs`` as a no-argument function (the
    launches checked once, so the timers measure only the launches)."""
    n = bufs["n"]
    calls = []
    for launch in step.launches:
        fn = fns[launch.kernel]
        args = tuple(_resolve(t, bufs) for t in launch.args)
        calls.append(fn.bind(launch.grid(n, resident_blocks(fn, launch)), launch.block, args,
                             launch.shared_mem))
    if len(calls) == 1:
        return calls[0]

    def inference():
        for call in calls:
            call()
    return inference


def run(step: Step, x: np.ndarray, weights: dict | None = None, backend=None) -> np.ndarray:
    """One inference of ``step`` on host inputs X (72 x n), output poisoned
    beforehand; returns Y (4 x n) on the host."""
    be = get_backend(backend)
    if step.gpu_only and be.name != "gpu":
        raise NotImplementedError(f"step {step.number} ({step.file}) is marked gpu_only: it uses "
                                  "instructions the CPU backend does not run")
    weights = weights or make_weights()
    bufs = buffers(be, x, weights, scratch=any("h1" in launch.args for launch in step.launches))
    bind(step, step_kernels(step, be), bufs)()
    be.synchronize()
    return be.to_host(bufs["y"])


def check_steps(backend=None, steps=None, sizes=CHECK_SIZES, seed: int = 0) -> CheckTable:
    """Every step against the float64 reference at every check size, fresh
    inputs each time. Half-precision steps also report their error against the
    float32 result (``vs_fp32``). Steps the device cannot run are listed as skipped."""
    weights = make_weights()

    def check_one(step_, be):
        for i, n in enumerate(sizes):
            x = make_inputs(n, seed + 100 + i)
            out = run(step_, x, weights, be)
            vs32 = compare(out, reference(x, weights, np.float32), step_.precision).rel_error
            yield ({"kernel": ", ".join(step_.kernels), "n": n, "precision": step_.precision, "vs_fp32": vs32},
                   compare(out, reference(x, weights), step_.precision, name=f"{step_.file} n={n}"))
    return protocol.check_steps(steps or STEPS, check_one, backend, skip=unfit_reason)


# ----------------------------------------------------------------- reading the recorded run
#: The vendor rows of runs recorded before gpulab.baselines (kept so those runs still read).
VENDOR = ("cuBLAS fp32 chain", "cuBLAS fp16 chain")
#: The ReLUs of the chain: after layers 1 and 2, not after the output layer.
RELU = (True, True, False)


def ladder(timings: pd.DataFrame, case: str, experiment: str = "ladder") -> pd.DataFrame:
    """The ladder for one case, in order: one kernel per step -- where a step
    has several (13, 14), the one measured fastest on this case, whichever
    case it was written for -- with its speedup over step 1 and over the
    previous step."""
    n = SIZES[case]
    rows = timings[(timings["experiment"] == experiment) & (timings["size"] == n)]
    times = rows.set_index("variant")["median_ms"]
    order = []
    for number in dict.fromkeys(s.number for s in STEPS):
        measured = [s.label for s in STEPS if s.number == number and s.label in times.index]
        if measured:
            order.append(min(measured, key=lambda label: times[label]))
    table = rows.set_index("variant").loc[order].reset_index()
    table["vs_step_1"] = table["median_ms"].iloc[0] / table["median_ms"]
    table["vs_previous"] = table["median_ms"].shift(1) / table["median_ms"]
    return table


def vendor(timings: pd.DataFrame, case: str, experiment: str = "ladder") -> pd.DataFrame:
    """Every vendor path measured on one case: eager ("ladder") or in CUDA graphs ("graph")."""
    from ..baselines import is_vendor
    rows = timings[(timings["experiment"] == experiment) & (timings["size"] == SIZES[case])]
    return rows[is_vendor(rows)].sort_values("median_ms").reset_index(drop=True)


def best_vendor(timings: pd.DataFrame, case: str, precision: str, mode: str | None = None) -> pd.Series | None:
    """The fastest vendor path of matching precision on one case (see
    :func:`gpulab.baselines.fastest`): ``mode`` "eager", "graph" or None (either)."""
    from ..baselines import fastest, is_vendor
    rows = timings[(timings["size"] == SIZES[case]) & timings["experiment"].isin(["ladder", "graph"])]
    rows = rows[is_vendor(rows)]
    if "mode" not in rows.columns:          # a run recorded before the modes were labelled
        rows = rows.assign(mode=np.where(rows["experiment"] == "graph", "graph", "eager"))
    return fastest(rows, precision, mode=mode)


def vendor_lines(timings: pd.DataFrame, case: str, experiment: str = "ladder") -> pd.DataFrame:
    """The fastest vendor path per precision class (fp32 without tf32, tf32, fp16/bf16)
    among the rows of ``experiment``: the dashed lines of the ladder figures."""
    mode = "graph" if experiment == "graph" else ("eager" if case == "small" else None)
    picks = [best_vendor(timings, case, p, mode) for p in ("fp32", "tf32", "fp16")]
    return pd.DataFrame([p for p in picks if p is not None]).reset_index(drop=True)


def step_times(run, number: int):
    """One step's times on both cases (eager, and in a CUDA graph on the small
    case), with the speedups over step 1 and over the previous step."""
    out = []
    several = len(steps(number)) > 1
    for case, n in SIZES.items():
        table = ladder(run.timings, case)
        first, previous = table["median_ms"].iloc[0], table["median_ms"].shift(1)[table["step"] == number]
        measured = run.timings[(run.timings["size"] == n) & (run.timings["step"] == number)]
        for step_ in steps(number):
            eager = measured[(measured["experiment"] == "ladder") & (measured["variant"] == step_.label)]
            if eager.empty:
                continue
            ms = eager["median_ms"].iloc[0]
            entry = {"case": case, "kernel": ", ".join(step_.kernels), "time (ms)": ms,
                     "vs step 1": first / ms, "vs previous step": previous.iloc[0] / ms if len(previous) else np.nan}
            if several:
                entry["on the ladder"] = "yes" if step_.label in set(table["variant"]) else "no (slower here)"
            graph = measured[(measured["experiment"] == "graph") & (measured["variant"] == step_.label)]
            if case == "small" and not graph.empty:
                entry["in a CUDA graph (ms)"] = graph["median_ms"].iloc[0]
            out.append(entry)
    table = pd.DataFrame(out)
    text = ("case", "kernel", "on the ladder")
    return (table.style.format({c: "{:.4g}" for c in table.columns if c not in text}, na_rep="")
            .hide(axis="index").set_caption(run.caption))


def tiles_per_block(run, step_: Step, case: str) -> float:
    """How many tiles (``vectors_per_block`` vectors) each block of ``step_``
    works through on ``case`` in ``run``: the grid is the run's SMs times the
    blocks per SM its resource table shows (persistent kernels), or one
    block per tile."""
    launch = step_.launches[0]
    tiles = -(-SIZES[case] // launch.vectors_per_block)
    if not launch.persistent:
        return 1.0
    resources = run.tables["resources"].set_index("variant")
    resident = int(run.meta["sms"]) * int(resources.loc[step_.label, "blocks_per_sm"])
    return tiles / min(tiles, resident)


def profile_run(run):
    """The run whose Nsight Compute figures the chapter shows: ``run`` itself,
    or, for a live run on a machine without a usable ``ncu``, the recorded one."""
    if "profile" in run.tables:
        return run
    from ..runs import load_run
    return load_run(CHAPTER)


def profile_table(run) -> pd.DataFrame:
    """The Nsight Compute figures of :func:`profile_run` (large case)."""
    return profile_run(run).tables["profile"]


def profile_of(run, numbers):
    """The profiler's figures (large case) for the given steps, one row per
    kernel launch, captioned with the run they come from."""
    source = profile_run(run)
    table = source.tables["profile"]
    columns = ["step", "kernel", "duration_ns", "dram_bytes_read", "shared_load_bank_conflicts",
               "shared_store_bank_conflicts",
               "sectors_per_request", "achieved_occupancy_pct", "registers_per_thread"]
    shown = table[table["step"].isin(list(numbers))][[c for c in columns if c in table.columns]]
    note = "" if source is run else "this run has no profiler figures (is ncu installed?), so these are the recorded ones: "
    return (shown.style.format(precision=3, thousands=",").hide(axis="index")
            .set_caption(f"Nsight Compute, large case; {note}{source.caption}"))


def ladder_figure(run, case: str, experiment: str = "ladder", *, title: str, ax=None, caption: bool = True):
    """The speedup ladder of one case with the fastest vendor path per precision
    class as dashed lines (every path: :func:`vendor_figure`). When ``run`` is
    live, the recorded runs of the same steps (H100, H200) are marked beside
    each bar, so a step that is slower on the reader's GPU shows at once."""
    from .. import plots
    from ..runs import recorded_beside
    others = {gpu: ladder(other.timings, case, experiment) for gpu, other in recorded_beside(run).items()}
    return plots.speedup_ladder(ladder(run.timings, case, experiment),
                                vendor=vendor_lines(run.timings, case, experiment), others=others,
                                title=title, ax=ax, caption=run.caption if caption else None)


def eager_vs_graph_figure(run, case: str = "small"):
    """One case's ladder timed both ways, eager launches and a CUDA graph, as
    pairs of bars per step (the fastest fp32 and fp16 vendor paths last): short labels and large
    type, so the figure reads at phone width as well as on a desktop."""
    import matplotlib.pyplot as plt
    from .. import plots

    eager, graph = ladder(run.timings, case), ladder(run.timings, case, "graph")
    names = [f"step {int(s):02d}" for s in eager["step"]]
    # Each step's fastest kernel each way: where a step has two (13, 14), eager launches and a
    # graph may favour different ones, so the pairs are matched by step, not by kernel.
    e_ms, g_ms = list(eager["median_ms"]), list(graph.set_index("step").loc[eager["step"], "median_ms"])
    for dtype in ("fp32", "fp16"):       # the fastest vendor path of each precision, each way
        eager_best, graph_best = best_vendor(run.timings, case, dtype, "eager"), best_vendor(run.timings, case, dtype, "graph")
        if eager_best is not None and graph_best is not None:
            names.append(f"vendor {dtype}")
            e_ms.append(eager_best["median_ms"])
            g_ms.append(graph_best["median_ms"])
    fig, ax = plt.subplots(figsize=(6.4, 0.42 * len(names) + 1.9))
    y = np.arange(len(names))[::-1]
    ax.barh(y + 0.2, np.array(e_ms) * 1e3, height=0.4, color="#A6BDDB", label="eager launches")
    ax.barh(y - 0.2, np.array(g_ms) * 1e3, height=0.4, color="#2B5C8A", label="in a CUDA graph")
    for yy, g in zip(y, g_ms):
        ax.text(g * 1e3, yy - 0.2, f" {g * 1e3:.0f}", va="center", fontsize=9, color="#2B5C8A")
    ax.set_yticks(y, names, fontsize=10)
    for tick, name in zip(ax.get_yticklabels(), names):
        if name.startswith("vendor"):
            tick.set_color(plots.VENDOR_COLOR)
    ax.set_xscale("log")
    plots._log_axis(ax.xaxis)
    ax.set_xlabel("time per inference (µs, median; numbers: in a graph)", fontsize=10)
    ax.legend(loc="lower right", fontsize=9.5, frameon=True)
    ax.set_xlim(min(g_ms) * 1e3 / 1.5, max(e_ms) * 1e3 * 1.6)
    return plots._finish(fig, ax, f"{case.capitalize()} case ({SIZES[case]:,} vectors): how much does a CUDA "
                         "graph save at each step?", run.caption)


def vendor_figure(run, case: str, *, title: str | None = None):
    """Every vendor path measured on one case (eager and in CUDA graphs), by
    precision class, with the fastest of each class marked."""
    from .. import plots
    rows = pd.concat([vendor(run.timings, case, "ladder"), vendor(run.timings, case, "graph")])
    return plots.vendor_paths(rows, title=title or f"Which vendor path is fastest? ({case} case, "
                              f"{SIZES[case]:,} vectors)", caption=run.caption)


def floor_ms(run, case: str, precision: str) -> dict:
    """The floor of one inference on this run's GPU: the FLOPs at the measured rate of
    the precision's units (FP32 CUDA cores for fp32, the fp16 tensor-core rate for
    reduced precision) or the bytes at the measured bandwidth, whichever is longer."""
    from ..roofline import ceilings_table
    from ..roofline import floors_ms as roofline_floors
    ceilings = ceilings_table(run.timings, run.gpu)
    key = "FP32 rate (GFLOP/s)" if precision == "fp32" else "fp16 tensor-core rate (GFLOP/s)"
    if key not in ceilings.index:
        key = "FP32 rate (GFLOP/s)"              # a run recorded before the fp16 rate was measured
    w = work(SIZES[case])
    return roofline_floors(w["flops"], w["bytes"], ceilings.loc[key, "measured"],
                           ceilings.loc["memory bandwidth (GB/s)", "measured"]) | {"rate": key}


def roofline_figure(run, case: str = "large"):
    """Every step of one case on the roofline: the measured FP32 roof, the
    datasheet's, and the tensor cores' measured fp16 matrix rate (dashed), the
    roof of the reduced-precision steps. All steps share one arithmetic
    intensity, so each point is labelled with its step number and the legend
    sits outside the plot."""
    from .. import plots, roofline
    ceilings = roofline.ceilings_table(run.timings, run.gpu)
    fp32, gbs = ceilings.loc["FP32 rate (GFLOP/s)", "measured"], ceilings.loc["memory bandwidth (GB/s)", "measured"]
    sheet = roofline.datasheet(run.gpu) or {}
    points = roofline.rates(ladder(run.timings, case))
    fig = plots.roofline(points, peak_gflops=fp32, peak_gbs=gbs, datasheet_gflops=sheet.get("fp32_tflops", 0) * 1e3,
                         datasheet_gbs=sheet.get("memory_gbs"), caption=run.caption,
                         title=f"How close is each step to the hardware's limits? ({case} case)")
    ax = fig.axes[0]
    hgemm = roofline.rates(run.timings[(run.timings["experiment"] == "ceilings")
                                       & (run.timings["variant"] == "cuBLAS HGEMM (fp16)")])["gflops"]
    xs = np.logspace(0, 3.5, 100)
    if len(hgemm):
        ax.plot(xs, np.minimum(hgemm.iloc[0], xs * gbs), "k--", lw=1,
                label=f"fp16 tensor cores, measured (cuBLAS HGEMM): {hgemm.iloc[0] / 1e3:,.0f} TFLOP/s "
                      "(the roof of the fp16 steps)")
    for _, p in points.iterrows():
        ax.annotate(f"{int(p['step']):02d}", (p["intensity"], p["gflops"]), xytext=(6, -3),
                    textcoords="offset points", fontsize=7)
    ax.set_xlim(1, 10**3.5)
    ax.set_ylim(points["gflops"].min() / 3, None)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.set_size_inches(11, 5.5)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def warm_cold(run, case: str = "small") -> pd.DataFrame | None:
    """Warm against cold L2 on one case: per kernel of the ladder and per vendor path,
    the eager time warm (``ladder``) and with L2 flushed between calls
    (``ladder_cold``), and a one-call CUDA graph warm and cold (``graph_cold``);
    None for a run recorded before the flush existed."""
    t = run.timings
    n = SIZES[case]
    if "ladder_cold" not in set(t["experiment"]):
        return None
    at = t[t["size"] == n]
    cold = at[at["experiment"] == "ladder_cold"].set_index("variant")["median_ms"]
    warm = at[at["experiment"] == "ladder"].set_index("variant")["median_ms"]
    graphs = at[at["experiment"] == "graph_cold"]
    g_warm = graphs[~graphs["l2_flushed"].astype(bool)].set_index("variant")["median_ms"]
    g_cold = graphs[graphs["l2_flushed"].astype(bool)].set_index("variant")["median_ms"]
    g_warm.index = g_warm.index.str.removesuffix(", CUDA graph")
    g_cold.index = g_cold.index.str.removesuffix(", CUDA graph")
    table = pd.DataFrame({"eager, warm (ms)": warm.reindex(cold.index), "eager, L2 flushed (ms)": cold,
                          "graph of 1 call, warm (ms)": g_warm.reindex(cold.index),
                          "graph of 1 call, L2 flushed (ms)": g_cold.reindex(cold.index)})
    table["flushed / warm (graph)"] = table["graph of 1 call, L2 flushed (ms)"] / table["graph of 1 call, warm (ms)"]
    return table.rename_axis("variant").reset_index()


def gpu_comparison(root=None):
    """Per step of the large case, the H200's recorded time over the H100's, against
    the roofline's prediction (:func:`gpulab.runs.gpu_comparison`); None until both
    GPUs' runs are recorded."""
    from ..runs import gpu_comparison as compare_gpus
    return compare_gpus(CHAPTER, lambda run: ladder(run.timings, "large"), root=root,
                        title="Does each step gain what the roofline predicts on the H200? (large case)")


#: The report's RTX 3080 Ti times on the large case (ms, from its tables), for the steps
#: where that GPU was faster than the lab's H100 versions.
REPORT_3080TI_LARGE_MS = {7: 8.632, 8: 6.029, 13: 3.932}


def report_gpu_table(run) -> pd.DataFrame:
    """The steps the report's RTX 3080 Ti ran faster than this run's GPU (large case):
    both times, and this run's registers, warps per SM and occupancy for the step."""
    table = ladder(run.timings, "large").set_index("step")
    resources = run.tables.get("resources", pd.DataFrame()).set_index("variant") if "resources" in run.tables \
        else pd.DataFrame()
    rows = []
    for number, report_ms in REPORT_3080TI_LARGE_MS.items():
        ours = table.loc[number]
        res = resources.loc[ours["variant"]] if ours["variant"] in resources.index else {}
        rows.append({"step": number, "kernel": ours["variant"], "RTX 3080 Ti, report (ms)": report_ms,
                     f"{run.gpu} (ms)": ours["median_ms"], "ratio": ours["median_ms"] / report_ms,
                     "registers": res.get("registers", np.nan), "warps per SM": res.get("warps_per_sm", np.nan),
                     "occupancy": res.get("occupancy", np.nan)})
    return pd.DataFrame(rows)


#: The chapter's targets for the best kernels, each judged against the fastest vendor path of
#: matching precision measured in the same run (issue 14): the large case against any mode
#: (eager or a CUDA graph: launch overhead is negligible there), the small case in a graph
#: against the vendor paths in graphs.
TARGETS = [
    # what, case, our kernels' precision, how ours are timed, vendor mode, max ms
    ("large, fp32 arithmetic", "large", "fp32", "ladder", None, 1.8),
    ("large, reduced precision", "large", "fp16", "ladder", None, 0.58),
    ("small, fp32, in a CUDA graph", "small", "fp32", "graph", "graph", 0.02),
    ("small, reduced precision, in a CUDA graph", "small", "fp16", "graph", "graph", 0.006),
]


def targets(run) -> pd.DataFrame:
    """The best kernel of the ladder for each target, its time, the fastest vendor
    path of matching precision and its time, the floor of that precision (the
    fp16 tensor-core rate for reduced precision), and whether the target was met:
    at most the target time and faster than the vendor path."""
    rows = []
    for what, case, precision, experiment, mode, max_ms in TARGETS:
        table = ladder(run.timings, case, experiment)
        ours = table[table["precision"] == precision].sort_values("median_ms").iloc[0]
        best = best_vendor(run.timings, case, precision, mode)
        blas_ms = best["median_ms"] if best is not None else np.nan
        floor = floor_ms(run, case, precision)
        speedup = blas_ms / ours["median_ms"]
        rows.append({"target": what, "best kernel": ours["variant"], "time (ms)": ours["median_ms"],
                     "target (ms)": max_ms, "fastest vendor path": best["variant"] if best is not None else "none",
                     "vendor (ms)": blas_ms, "speedup": speedup, "floor (ms)": floor["floor_ms"],
                     "x floor": ours["median_ms"] / floor["floor_ms"],
                     "met": bool(ours["median_ms"] <= max_ms and speedup > 1.0)})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------- the recorded run
def _case(n: int) -> str:
    return next((name for name, size in SIZES.items() if size == n), "check")


def _row_labels(step_: Step, n: int) -> dict:
    return {"step": step_.ordinal, "case": _case(n), "precision": step_.precision,
            "kernel": ", ".join(step_.kernels)}


#: Time one vendor path may take to time (the stop rule usually ends it sooner).
VENDOR_BUDGET_MS = 600.0
#: Time one variant may take to time: slow kernels get fewer repeats (at least 10).
TIMING_BUDGET_MS = 1500.0


def benchmark_all(repeats: int = 100, quick: bool = False, profile: bool = True):
    """Every experiment of this chapter on the GPU: returns (rows, tables).

    Each kernel is checked against the float64 reference at full size before
    it is timed (a failure raises), every variant reads the same inputs, and
    every vendor path (:func:`gpulab.baselines.matmul_chain_paths`: cuBLAS
    through CuPy, PyTorch with and without cuBLASLt ReLU epilogues, both
    layouts, fp32 / tf32 / fp16 / bf16, eager and in CUDA graphs) runs in the
    same process, side by side. The small case is also timed cold (L2 flushed
    between repeats: experiments ``ladder_cold`` and ``graph_cold``). Steps this
    GPU cannot run (too much shared memory per block) are skipped and listed
    with the reason in the ``skipped`` table. ``quick`` runs a tenth of the
    large case (a smoke test, not for committing)."""
    import cupy

    from .. import baselines, roofline
    from ..check import check
    from ..timing import benchmark, graph_benchmark

    weights = make_weights()
    matrices = [weights["W1"], weights["W2"], weights["W3"]]
    rows: list[dict] = []
    sizes = dict(SIZES)
    if quick:
        sizes["large"] = SIZES["large"] // 10
    here, skipped = runnable_steps()
    sizes, too_large = plan_sizes(sizes)
    skipped += too_large
    for entry in skipped:
        print(f"skipping {entry['variant']}: {entry['reason']}", file=sys.stderr)
    fns_by_step = {step_.label: step_kernels(step_, "gpu") for step_ in here}
    vendor_kernels = []

    for case, n in sizes.items():
        bufs = buffers(get_backend("gpu"), make_inputs(n), weights, scratch=True)
        x32 = bufs["x"]
        ref = reference(x32, weights, cupy.float64, xp=cupy)
        ref32 = reference(x32, weights, cupy.float32, xp=cupy).get()
        for step_ in here:
            fns = fns_by_step[step_.label]
            bufs["y"].fill(cupy.nan)
            inference = bind(step_, fns, bufs)
            inference()
            result = check(bufs["y"], ref, step_.precision, name=f"{step_.label} n={n}")
            labels = {**_row_labels(step_, n), "rel_error": result.rel_error, "intended": case in step_.sizes,
                      "rel_error_vs_fp32": compare(bufs["y"], ref32, step_.precision).rel_error}
            timing = benchmark(inference, repeats=repeats, budget_ms=TIMING_BUDGET_MS, min_repeats=10)
            rows.append(timing.row("ladder", step_.label, n, **work(n), **labels))
            if case == "small":
                rows.append(graph_benchmark(inference, launches=20, repeats=repeats)
                            .row("graph", step_.label, n, **work(n), **labels))
                rows.extend(_cold_rows(inference, step_.label, n, labels, repeats))
            print(f"{case:5s} {step_.label:45s} {rows[-1]['median_ms']:.4f} ms", flush=True)

        # Every vendor path, checked against the same reference, eager and in CUDA graphs.
        eager = baselines.matmul_chain_paths(x32, matrices, RELU)
        paths = eager + baselines.graph_paths(eager, launches=10)
        labels = {"step": np.nan, "case": case, "intended": True}
        w = work(n)
        half_bytes = lambda path: w["bytes"] / (2 if path.precision in ("fp16", "bf16") else 1)   # noqa: E731
        result = baselines.measure(paths, reference=ref, experiment="ladder", graph_experiment="graph", size=n,
                                   flops=w["flops"], bytes=half_bytes, repeats=repeats,
                                   budget_ms=VENDOR_BUDGET_MS, labels=labels, on_failure="skip")
        rows += result.rows
        skipped += [{"step": "vendor", **entry} for entry in result.skipped]
        if case == "small":          # cold: L2 flushed before every call, eager and in one-call graphs
            capturable = [p for p in eager if p.capture != "none"]
            for experiment, chosen, flush in (("ladder_cold", eager, True),
                                              ("graph_cold", [baselines.in_graph(p, 1) for p in capturable], False),
                                              ("graph_cold", [baselines.in_graph(p, 1) for p in capturable], True)):
                rows += baselines.measure(chosen, reference=ref, experiment=experiment, size=n, flops=w["flops"],
                                          bytes=half_bytes, repeats=repeats, budget_ms=500, flush_l2=flush,
                                          labels=labels, on_failure="skip", log=lambda text: None).rows
        vendor_kernels += _vendor_kernel_names(eager, case)
        del bufs, x32, ref, ref32
        cupy.get_default_memory_pool().free_all_blocks()

    # Where the time goes when X starts on the host: on each case, the kernel of
    # steps 13, 14, 15 and 17 that the ladder (just measured) shows, pinned memory.
    measured = pd.DataFrame(rows)
    for case, n in sizes.items():
        shown = set(ladder(measured, case)["variant"]) if n == SIZES[case] else set()
        x_host = make_inputs(n)
        for step_ in [s for s in here if s.number in ("13", "14", "15", "17")]:
            if step_.label in shown or (not shown and case in step_.sizes):
                rows.extend(_transfer_rows(step_, fns_by_step[step_.label], x_host, weights, n, repeats))
    rows.extend(roofline.measure_ceilings(repeats=20))

    tables = {"resources": resources(fns_by_step),
              "skipped": pd.DataFrame(skipped, columns=["step", "variant", "library", "precision", "size",
                                                        "reason"]),
              "vendor_kernels": pd.DataFrame(vendor_kernels, columns=["case", "variant", "kernels"])}
    if profile:
        try:
            tables["profile"] = profile_steps(quick=quick)
        except Exception as exc:   # no ncu here: the run still has its timings; say why
            print(f"profiling skipped: {exc}", file=sys.stderr)
    return rows, tables


def _cold_rows(inference, label: str, n: int, labels: dict, repeats: int) -> list[dict]:
    """The small case cold: L2 flushed before every call, eager (``ladder_cold``)
    and in a one-call graph, with its unflushed twin (``graph_cold``)."""
    from ..timing import benchmark, graph_benchmark
    w = work(n)
    out = [benchmark(inference, repeats=repeats, budget_ms=500, flush_l2=True)
           .row("ladder_cold", label, n, **w, **labels)]
    for flush in (False, True):
        out.append(graph_benchmark(inference, launches=1, repeats=repeats, flush_l2=flush)
                   .row("graph_cold", label, n, **w, **labels))
    return out


def _vendor_kernel_names(paths, case: str) -> list[dict]:
    """The GPU kernels each eager PyTorch fp32/fp16 path launches, from the PyTorch
    profiler: whether cuBLASLt's fused ReLU epilogue really runs at this size."""
    from .. import baselines
    out = []
    for path in paths:
        if "PyTorch" not in path.library or path.precision not in ("fp32", "fp16"):
            continue
        names = baselines.path_kernels(path)
        out.append({"case": case, "variant": path.label, "kernels": " | ".join(names)})
    return out


def _transfer_rows(step_: Step, fns, x_host, weights, n, repeats) -> list[dict]:
    from .. import transfers

    be = get_backend("gpu")
    base = buffers(be, x_host[:, :1], weights)
    bound = {}

    def launch(inputs, output):
        key = (inputs[0].data.ptr, output.data.ptr)
        if key not in bound:   # bind once per buffer pair: no host work inside the timed region
            bound[key] = bind(step_, fns, {**base, "n": n, "hid_n": HID * n, "x": inputs[0], "y": output})
        bound[key]()

    memories = ("pinned",) if n > 1_000_000 else ("pageable", "pinned")
    out = []
    for memory in memories:
        for row in transfers.transfer_breakdown(launch, [x_host], (OUT, n), np.float32, memory=memory,
                                                repeats=max(5, repeats // 10), size=n):
            out.append({**row, **_row_labels(step_, n), "variant": step_.label})
    return out


def resources(fns_by_step: dict) -> pd.DataFrame:
    """Registers, shared memory, local (spilled) bytes and occupancy of every
    ladder kernel as compiled for this GPU, at the launch shape the ladder uses."""
    from ..kernels import occupancy, resource_table
    rows = []
    for step_ in [s for s in STEPS if s.label in fns_by_step]:
        fns = fns_by_step[step_.label]
        for launch in step_.launches:
            fn = fns[launch.kernel]
            res = resource_table(fn.module).loc[launch.kernel]
            threads = int(np.prod(launch.block))
            occ = occupancy(fn, threads, launch.shared_mem)
            rows.append({"step": step_.ordinal, "variant": step_.label, "kernel": launch.kernel,
                         "threads_per_block": threads, "registers": int(res["registers"]),
                         "static_shared_bytes": int(res["static_shared_bytes"]),
                         "dynamic_shared_bytes": launch.shared_mem, "local_bytes": int(res["local_bytes"]),
                         "blocks_per_sm": occ["blocks_per_sm"], "warps_per_sm": occ["warps_per_sm"],
                         "occupancy": occ["occupancy"]})
    return pd.DataFrame(rows).drop_duplicates(["variant", "kernel"])


# ----------------------------------------------------------------- the profiler's view
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
    to watch (``python -m gpulab.workloads.fcnet --profile-driver``); steps 13
    and 14 launch both their kernels, since either may be the case's fastest."""
    import cupy
    weights = make_weights()
    be = get_backend("gpu")
    n = SIZES[case]
    bufs = buffers(be, make_inputs(n), weights, scratch=True)
    for step_ in runnable_steps()[0]:
        bind(step_, step_kernels(step_, be), bufs)()
    cupy.cuda.get_current_stream().synchronize()


def kernel_names() -> list[str]:
    return list(dict.fromkeys(name for s in STEPS for name in s.kernels))


def profile_steps(quick: bool = False, case: str = "large") -> pd.DataFrame:
    """The profiler's figures for every step on one case: one row per kernel
    launch, labelled with its step."""
    from .. import profiler
    driver = [sys.executable, "-m", "gpulab.workloads.fcnet", "--profile-driver", "--case", case]
    raw = profiler.profile(driver, PROFILE_METRICS, kernel_regex="^(" + "|".join(kernel_names()) + ")$")
    table = profiler.per_launch(raw)
    launches = [(s, launch.kernel) for s in runnable_steps()[0] for launch in s.launches]
    if len(launches) != len(table):
        raise RuntimeError(f"expected {len(launches)} profiled launches, got {len(table)}")
    table = table.sort_values("id").reset_index(drop=True)
    table.insert(0, "step", [s.ordinal for s, _ in launches])
    table.insert(1, "variant", [s.label for s, _ in launches])
    table["case"] = case
    return table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpulab.workloads.fcnet")
    parser.add_argument("--profile-driver", action="store_true",
                        help="launch every step once (for Nsight Compute)")
    parser.add_argument("--case", default="large", choices=list(SIZES))
    args = parser.parse_args(argv)
    if args.profile_driver:
        profile_driver(args.case)
        return 0
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())


# ------------------------------------------------------------ what each step's prediction claims
# The kernel files' predictions as claims a run can check (gpulab.predictions states the rules),
# on the large case unless a claim names the small one; a reason is shown only when the run says
# the claim failed in that direction (the chapter's "What we learned" cells give the evidence).
def _predicted():
    from .. import predictions as p
    conflicts = ("the bank conflicts of its shared-memory weight reads and the per-block weight copy "
                 "(1.28 million copies on the large case) cost more than the re-reads they saved")
    return {
        1: p.unjudged("the baseline: every later step is measured against it"),
        2: (p.times(1 / 2, 1 / 1.5, 1, claim="1.5-2x slower than step 1 (large case)", because=(
                "its hidden layers' scattered reads and writes in global memory touch many more sectors per "
                "request than step 1's (see the profile)")),
            p.times(1 / 2, 1 / 1.5, 1, "small", claim="1.5-2x slower than step 1 (small case)", because=(
                "its hidden layers' scattered reads and writes in global memory touch many more sectors per "
                "request than step 1's (see the profile)"))),
        3: p.times(2, 3, 1, because=conflicts),
        4: (p.faster(3), p.same(3, "small", because_faster=(
            "one copy of the weights per block instead of per group of vectors pays on the small case too"))),
        5: p.times(1.3, 1.6, 4, because_faster=(
            "the bank conflicts dropped with the 32-way conflicted reads of W2s, which were most of "
            "them (see the profile)")),
        6: p.same(5, claim="a few percent at most faster than step 5", because_faster=(
            "the 64-long serial loop in 4 threads was the critical path of every group, and the other "
            "60 threads waited for it at the next barrier: a serial tail costs more than its operations")),
        7: p.times(1.5, 2, 6, because=(
            "occupancy stays where step 5 left it (registers), and the input loads touch more sectors per "
            "request (see the profile)")),
        8: p.times(1.3, 1.6, 7, because=(
            "fewer registers did not buy more warps (the occupancy is unchanged) and the scattered input "
            "loads are unchanged")),
        9: p.times(1.5, 2, 8),
        10: (p.same(9), p.times(1.1, 1.25, 9, "small", claim="10-25% faster than step 9 on the small case",
                                because=("with several tiles per block the weight prologue is a smaller share of "
                                         "a block's life than the prediction assumed, and the weights come "
                                         "from L2"))),
        11: (p.times(1.1, 1.2, 10), p.same(10, "small")),
        12: p.Expect(None, p.FASTER, 11, claim="no faster than step 11", because_faster=(
            "occupancy was part of what held step 11 back, the exception the prediction allowed")),
        13: p.unjudged("two kernels, one written for each case; the ladder shows the faster on each case, "
                       "and the step's section sets each against its own prediction"),
        14: p.times(2, 3, 13, because=(
            "the prediction asked for nearly all of the rate cuBLAS's SGEMM measured")),
        15: p.ms_between(0.6, 0.7),
        17: p.ms_between(0.57, 0.59, because=(
            "what it removed from step 15 (shared-memory round trips, barriers) was not the limit; the "
            "stream of reads of X from DRAM was, and a kernel that only reads gets somewhat less out of "
            "memory than the copy ceiling's equal reads and writes"), because_faster=(
            "the prediction was made for an H100's memory; this GPU's reads X faster")),
        18: p.ms_between(1.0, 1.2, because=(
            "each product's three tensor-core instructions depend on one another through the accumulator, "
            "and one block of 8 warps per SM is too few to cover that latency (see the profile)")),
    }


#: step number -> the checkable claim(s) of its kernel file's prediction (see gpulab.predictions)
PREDICTED = _predicted()


def prediction_table(run, case: str = "large"):
    """Each step's prediction (from its kernel file) against ``run``: times of ``case``, claims
    about the other case judged on it."""
    from .. import predictions
    measured = pd.concat([ladder(run.timings, c)[["step", "median_ms"]].assign(case=c) for c in SIZES])
    measured["step"] = measured["step"].astype(int)
    return predictions.table(predictions.ladder_steps(STEPS, key=lambda s: s.ordinal), measured, PREDICTED,
                             main_case=case)
