"""The fcnet chapter's ladder: each step a kernel file and the launches one inference takes
(the launch declarations say which form of the weights each kernel reads), what each needs of
the device, how a step is bound and run, the checks against the float64 reference, and what
each kernel file predicts."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ... import ladder as protocol   # (fcnet.ladder is views.ladder: a run's ladder table)
from ... import predictions
from ...check import CheckTable, compare
from ...device import limits as device_limits
from ...kernels import Backend, Kernel, get_backend, load_module, occupancy
from .shapes import (CHECK_SIZES, HID, IN, OUT, SIZES, TC_K1, TC_SHARED_BYTES, make_inputs, make_weights,
                     reference, weight_forms)


#: CPU backend: the grid "persistent" kernels get (the GPU's is measured).
CPU_PERSISTENT_BLOCKS = 3


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

#: Exercise 2 (fcnet.1): step 1 with the ReLU fused into the matmul, three launches instead of five.
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


def unfit_reason(step: Step, limits=None) -> str | None:
    """Why ``step`` cannot run on this device (or the simulated one: see
    :func:`gpulab.device.simulate`), or None when it can: a launch asking for
    more dynamic shared memory per block than the device allows (step 14's
    large kernel asks 105,472 bytes; a T4 allows 65,536, an L4 101,376)."""
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


# The kernel files' predictions as claims a run can check (gpulab.predictions states the rules),
# on the large case unless a claim names the small one; a reason is shown only when the run says
# the claim failed in that direction (the chapter's "What we learned" cells give the evidence).
def _predicted():
    p = predictions
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
