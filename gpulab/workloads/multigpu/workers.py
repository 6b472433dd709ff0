"""One process per GPU, as NCCL's users (PyTorch DDP, Megatron, torchrun) run:
the recorded run's multi-GPU steps, all-reduce curves and timeline.

:func:`run_workers` starts one process per GPU (``multiprocessing``, spawn),
each of which binds its GPU, joins an NCCL communicator of ``world`` ranks
(``ncclCommInitRank`` with a unique id made by the parent) and runs
:func:`_worker`. Every rank runs the same sequence of collectives, so the
ranks stay in step; what only rank 0 measures (the one-GPU baselines) runs
while the other ranks wait at a host barrier. The ranks write their rows to
JSON files; the parent merges them.

:class:`GpuStep` is one rank's data-parallel step on its GPU: the replica's
kernels on a compute stream; the all-reduces on a communication stream; the
updates (bucketed) on a third stream, so that bucket k's update never delays
bucket k+1's all-reduce. The step forks from and joins back to the caller's
stream with events, so it can be timed with events there and captured whole,
NCCL calls included, into one CUDA graph.

:func:`_sweep` times every launch configuration of the bucketed step
(:data:`OVERLAPS`: bucket count, the scatter's grid, stream and graph-node
priorities) and both forms of the plain step at a batch and picks the
fastest the same way on every rank (times max-reduced over NCCL).

On two GPUs, :class:`PeerLink` maps each rank's gradient buffer into the other's
process (CUDA IPC), so that the steps with the peer update
(``kernels/multigpu/06_peer_update.cu``: the all-reduce fused with the update, each
GPU reading the other's gradient over NVLink) need no NCCL call at all.

Every number a rank records comes from the same timer as the rest of the lab
(:func:`gpulab.timing.graph_benchmark` / :func:`~gpulab.timing.benchmark`)
with a *fixed* number of repeats: a stop rule could stop the ranks after
different numbers of collectives and leave one waiting for the other forever.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import socket
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ...errors import CheckFailed, GpulabError
from ..training import data, reference
from ..training.reference import LEARNING_RATE, PARAMS
from .replicas import PEER_MAX_BLOCKS, Bucket, Layout, Replica, row_work, split_batch

MODES = ("plain", "bucketed", "compute only")
#: Call sites of the peer update in one step (its flag slots): the plain step's one, or one per W1 bucket.
PEER_SLOTS = 8
#: One GPU's step with W1's gradient in the forward kernel, then the small gradients and the update.
ONE_GPU_FORWARD = "1 GPU, gradient in the forward kernel then update (CUDA graph)"
#: Variant names of the recorded rows, for ``p`` GPUs.
def variant(mode: str, p: int) -> str:
    names = {"plain": "one all-reduce", "bucketed": "bucketed, overlapped", "compute only": "compute only",
             "plain eager": "one all-reduce, eager", "bucketed eager": "bucketed, overlapped, eager"}
    return f"{p} GPUs, {names[mode]}"


STEP_LAUNCHES = 10           # steps per CUDA graph in the step timings
ALLREDUCE_LAUNCHES = 10      # all-reduces per CUDA graph in the all-reduce curve
WAIT_S = 540                  # the parent gives up on the workers after this long
#: Steps each mode runs before its copies are compared bit for bit across the GPUs.
CHECK_STEPS = 3
#: The two GPUs' summed gradient against one GPU's on the whole batch (relative,
#: whole gradient): the same float32 sums in another order.
GRADIENT_TOLERANCE = 1e-5
#: The same for the parameter-averaging form, whose gradient is read back as (W before -
#: W after) / lr: each of a row's atomic adds into W1 rounds at W's float32 spacing, not the
#: gradient's (step 9 on one GPU carries the same rounding).
UPDATE_TOLERANCE = 1e-4


def nccl_env() -> None:
    """NVLink multicast (NVLS) stays off on the lab's machines: set before NCCL loads."""
    os.environ["NCCL_NVLS_ENABLE"] = "0"


def nccl():
    """``cupy.cuda.nccl``. CuPy's wheels do not ship NCCL: the library of the
    ``nvidia-nccl-cu*`` wheel (the one PyTorch uses) is loaded first, globally,
    so that CuPy's bindings find the same copy."""
    import importlib
    import sys
    if "cupy.cuda.nccl" not in sys.modules:
        for name in ("nvidia.nccl",):
            try:
                pkg = importlib.import_module(name)
            except ImportError:
                continue
            for root in pkg.__path__:
                lib = Path(root) / "lib" / "libnccl.so.2"
                if lib.exists():
                    ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
    mod = importlib.import_module("cupy.cuda.nccl")
    if not getattr(mod, "available", False):
        raise GpulabError("CuPy cannot load NCCL (cupy.cuda.nccl.available is False); install the NCCL wheel "
                          "matching your CUDA (nvidia-nccl-cu12 or nvidia-nccl-cu13)")
    return mod


def _work(batch: data.Corpus) -> dict:
    from ..training.record import bytes_per_step, flops_per_step
    from ..training.problem import Dims
    d = Dims(batch.docs, batch.vocab)
    return {"flops": flops_per_step(d, batch.nnz), "bytes": bytes_per_step(d, batch.nnz)}


@dataclass(frozen=True)
class Overlap:
    """How the bucketed step is launched: ``buckets`` of W1 (cut at equal work,
    rarest words first), the scatter's grid (``blocks_per_sm`` blocks per SM
    in a grid-stride loop, leaving the rest of each SM to NCCL's and the
    update's blocks; None: one block per document), and whether the all-reduces
    and updates run at the device's highest stream priority (in a graph: with
    node priorities). ``rare_share``: the rarest words' bucket holds this share
    of the batch's non-zeros (None: 1 / buckets, equal work; see
    :meth:`~.replicas.Layout.buckets`). ``overlapped`` False: the same buckets,
    all-reduces and launches, but every all-reduce waits for the whole scatter
    (a measurement of what splitting costs without the overlap, never the
    step the run keeps). ``lean``: the step on the caller's stream and one
    communication stream only (see :meth:`GpuStep.lean_step`): two
    cross-stream dependencies per step instead of about eight; not
    overlapped, everything on the caller's stream, none. ``spare_sms``: the
    scatter's grid is ``blocks_per_sm`` blocks on each SM but that many (one
    block per SM: the block scheduler places a grid smaller than the SM count
    one block per SM, so ``spare_sms`` SMs stay empty for NCCL's blocks, up
    to 640 threads each, one per channel), from the second bucket on: the
    first is scattered before any all-reduce, on one block per document).
    ``comm_first`` (lean, overlapped): the all-reduces run on the caller's
    stream, straight after the first bucket's scatter, and the later buckets'
    scatters on a second stream (the small gradients in the first bucket's launch),
    so NCCL's kernel is launched first and its blocks take their SMs before
    the scatter's fill them (see :meth:`GpuStep._comm_first`). ``in_forward``
    (lean, overlapped, gradient form): the first bucket's gradient formed in the
    forward kernel (``kernels/multigpu/05_forward_and_first_bucket.cu``), so its
    all-reduce starts when the forward pass ends (see
    :meth:`GpuStep._in_forward`)."""

    buckets: int = 2
    blocks_per_sm: int | None = None
    priority: bool = True
    form: str = "gradient"
    rare_share: float | None = None
    overlapped: bool = True
    lean: bool = False
    spare_sms: int = 0
    comm_first: bool = False
    in_forward: bool = False
    peer: int = 0

    def __post_init__(self):
        if self.in_forward and not (self.lean and self.overlapped and self.form == "gradient" and self.buckets >= 2):
            raise ValueError("the first bucket in the forward kernel needs the lean, overlapped step in the gradient "
                             "form with at least 2 buckets (the parameter form's forward pass reads the W1 it would "
                             f"write), got {self}")
        if self.peer and not (self.in_forward and 2 <= self.buckets < PEER_SLOTS):
            raise ValueError(f"the peer update (all-reduce fused with the update over NVLink) is swept in the step with "
                             f"the first bucket in the forward kernel, 2 to {PEER_SLOTS - 1} buckets, got {self}")
        if self.peer < 0:
            raise ValueError(f"peer is the number of blocks of the earlier buckets' peer updates (0: NCCL), got {self.peer}")

    @property
    def share(self) -> float:
        """The rare-word bucket's share of the work."""
        return 1.0 / self.buckets if self.rare_share is None else self.rare_share

    def blocks(self, sms: int) -> int | None:
        if self.blocks_per_sm is None:
            return None
        if self.spare_sms == 0:
            return self.blocks_per_sm * sms
        if not 0 < self.spare_sms < sms:
            raise ValueError(f"spare_sms must leave the scatter at least one of the {sms} SMs, got {self.spare_sms}")
        # The first bucket is scattered before any all-reduce has started: one block per document.
        return [None] + [self.blocks_per_sm * (sms - self.spare_sms)] * (self.buckets - 1)

    @property
    def label(self) -> str:
        k = self.blocks_per_sm
        grid = "one block per document" if k is None else f"{k} block{'s' if k != 1 else ''} per SM"
        if self.spare_sms:
            grid = f"one block per document, then {grid} on all but {self.spare_sms} SMs"
        what = "" if self.form == "gradient" else "parameter average, "
        share = "" if self.rare_share is None else f" (the rarest words' {self.rare_share:.0%} of the work first)"
        what = what if self.overlapped else "not overlapped, " + what
        streams = "" if not self.lean else ", one stream" if not self.overlapped else \
            ", two streams, all-reduce first" if self.comm_first else \
            ", two streams, first bucket in the forward kernel" if self.in_forward else ", two streams"
        if self.peer:
            streams += f", all-reduce fused with the update over NVLink ({self.peer} blocks beside the scatter)"
        return (f"{what}{self.buckets} buckets{share}, scatter on {grid}, "
                f"{'high' if self.priority else 'equal'} priority{streams}")


#: The rare-word bucket's share of the work in the sweep's unequal cuts: its all-reduce (89% of W1's
#: bytes) starts after a quarter of the scatter instead of half, and the frequent words' bucket
#: left for the last all-reduce grows from ~0.26 to ~1.9 MB (counted on the CPU for this corpus).
RARE_SHARE = 0.25
#: SMs the narrow scatter leaves empty for NCCL's blocks: as many as NCCL's channels at most (32 with
#: NCCL_MIN_NCHANNELS=32, the setting the H200 run kept), each channel one block.
SPARE_SMS = 32
#: The lean steps (:meth:`GpuStep.lean_step`): at B = 1,024 the split step not overlapped cost 28 µs
#: more than the plain one on the H200s where its kernels and its second all-reduce add up to 9 µs,
#: all of it in the step's streams and events. Both forms and both grids, overlapped (two streams),
#: the rare-word bucket's quarter cut, and not overlapped (one stream: what splitting costs with no
#: cross-stream dependency at all); and with the all-reduce launched first (comm_first: its kernel,
#: not the next scatter, is what follows the first bucket's scatter on the caller's stream; in a graph
#: the scatter on the other stream starts a cross-stream dependency later, and NCCL's blocks are placed
#: before the scatter's fill the SMs), which was the fastest overlapped step at four of the seven
#: batches of the H100 run: there also on 4 blocks per SM (more room for NCCL's blocks), with the
#: quarter cut on 8, and in three buckets. (The scatter on one block per SM of all but SPARE_SMS,
#: which leaves whole SMs to NCCL, was behind the fastest overlapped step at every batch of the H100
#: run, by 5 µs at B = 1,024 to 126 µs at 65,536: a grid that small cannot keep the scatter's
#: atomics in flight. It is no longer swept.)
LEAN = tuple(Overlap(2, k, True, form, lean=True) for form in ("parameters", "gradient") for k in (None, 8)) + \
    tuple(Overlap(2, k, True, "parameters", RARE_SHARE, lean=True) for k in (None, 8)) + \
    tuple(Overlap(2, k, True, "parameters", overlapped=False, lean=True) for k in (None, 8)) + \
    tuple(Overlap(2, k, True, "parameters", lean=True, comm_first=True) for k in (None, 8, 4)) + \
    tuple(Overlap(2, k, True, "parameters", RARE_SHARE, lean=True, comm_first=True) for k in (None, 8)) + \
    (Overlap(2, None, True, "gradient", lean=True, comm_first=True),
     Overlap(3, 8, True, "parameters", lean=True, comm_first=True)) + \
    tuple(Overlap(2, k, True, "gradient", share, lean=True, in_forward=True) for k in (None, 8)
          for share in (None, RARE_SHARE))
#: Blocks of the earlier buckets' peer updates (06_peer_update.cu, 512 threads each, one per SM) beside
#: the later buckets' scatter: the SMs the peer update takes, the scatter keeps the rest (a development
#: sweep on the H100s also tried 16 and 132, every SM: both slower than 32 or 66 at every batch it
#: timed, B = 1,024 to 8,192 and 65,536).
PEER_BLOCKS = (32, 48, 66, 96)
#: The overlapped step with the all-reduce fused with the update over NVLink (two GPUs only): the first
#: bucket's gradient in the forward kernel, its peer update beside the frequent words' scatter.
PEER_OVERLAPS = tuple(Overlap(2, k, True, "gradient", share, lean=True, in_forward=True, peer=n)
                      for n in PEER_BLOCKS for k in (None, 8) for share in (None, RARE_SHARE))
#: The bucketed step's launch configurations the run tries at every batch (the fastest is kept).
#: 128-thread blocks: an H100 SM holds 16 of them, so 12, 8 and 4 per SM leave it 512 to 1,536
#: threads for NCCL's blocks (512 or 640 threads each).
OVERLAPS = tuple(Overlap(n, k, p) for n in (2, 4) for k in (None, 12, 8, 4) for p in (True, False)) + \
    tuple(Overlap(n, k, True, "parameters") for n in (2, 4) for k in (None, 8)) + \
    tuple(Overlap(2, k, True, "parameters", RARE_SHARE) for k in (None, 8)) + \
    tuple(Overlap(2, k, True, "parameters", overlapped=False) for k in (None, 8)) + \
    LEAN + PEER_OVERLAPS
#: NCCL settings tried at the largest batch, each in a fresh pair of processes (NCCL reads them once):
#: fewer channels or threads (less contention with the scatter beside it), or more channels (a faster
#: all-reduce of the 16.8 MB at the cost of more SMs).
NCCL_SETTINGS = ({}, {"NCCL_MAX_NCHANNELS": "8"}, {"NCCL_NTHREADS": "256"}, {"NCCL_MIN_NCHANNELS": "32"})
#: The bucketed configurations timed under each NCCL setting (with the plain step's forms): the
#: fastest of each kind at the largest batch in the recorded runs (four streams in both forms, the
#: lean step, all-reduce first), not the whole sweep: each setting needs its own processes, and the
#: whole sweep under four settings took half of the H100 run's time.
NCCL_SWEEP = (Overlap(2, 8, False), Overlap(2, 8, True, "parameters", RARE_SHARE), Overlap(4, None, True, "parameters"),
              Overlap(2, 8, True, "parameters", lean=True), Overlap(2, 8, True, "parameters", lean=True, comm_first=True),
              Overlap(2, None, True, "parameters", RARE_SHARE, lean=True, comm_first=True),
              Overlap(2, 8, True, "gradient", lean=True, in_forward=True))


def nccl_label(env: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(env.items())) or "NCCL defaults"


class GpuStep:
    """This rank's data-parallel SGD step on its GPU (the current CuPy device).

    ``mode``: ``"plain"`` (the whole gradient, then one all-reduce and the
    update, all on the compute stream), ``"bucketed"`` (bucket k's all-reduce
    on the communication stream as soon as its gradient is ready, its update
    on the update stream), ``"compute only"`` (no all-reduce: the
    computation alone; the replicas drift apart, so it is a timing, never a
    training step). ``comm``: an NCCL communicator (``None`` only for
    ``"compute only"``). ``config``: how the bucketed step is launched
    (:class:`Overlap`). ``split`` (plain and compute only): the gradient in two
    launches on two streams, the coalesced small gradients beside W1's scatter,
    instead of step 9's one launch; ``"forward"`` (gradient form): W1's whole
    gradient in the forward kernel, then the small gradients, the all-reduce
    and the update, all on the caller's stream (see
    :meth:`_plain_in_forward`). ``form`` (plain and compute only; the
    bucketed step takes ``config.form``): ``"gradient"`` (a gradient buffer,
    summed, then the update) or ``"parameters"`` (each GPU steps its own copy
    with ``world`` times the learning rate in the backward pass, the all-reduce
    averages the copies: no gradient buffer, no update launch; see
    :mod:`.replicas`). ``world``: the number of GPUs (the communicator's)."""

    def __init__(self, part: data.Corpus, params: dict, global_batch: int, comm, mode: str, buckets: list,
                 lr: float = LEARNING_RATE, config: "Overlap | None" = None, ranges: list | None = None,
                 split: bool | str = False, form: str = "gradient", world: int | None = None):
        import cupy
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if split not in (False, True, "forward") + PEER_SPLITS or (split in ("forward",) + PEER_SPLITS
                                                                     and form != "gradient"):
            raise ValueError(f"split must be False, True, 'forward' or one of {PEER_SPLITS} (the last three the "
                             f"gradient form only: the parameter form's forward pass reads the W1 it would write, and "
                             f"the peer update reads gradients), got {split!r} with form {form!r}")
        if comm is None and mode != "compute only":
            raise ValueError(f"mode {mode!r} needs an NCCL communicator")
        self.mode, self.comm, self.split = mode, comm, split
        self.config = config or Overlap(form=form)
        self.form = self.config.form if mode == "bucketed" else form
        self.world = world if world is not None else (comm.size() if comm is not None else 1)
        self.lib = nccl() if comm is not None else None
        sms = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["multiProcessorCount"]
        self.replica = Replica(part, params, global_batch, "gpu", lr, buckets, scatter_blocks=self.config.blocks(sms),
                               ranges=ranges, form=self.form, replicas=self.world)
        self.flat0 = self.replica.flat.copy()      # the parameters before any step (checks)
        #: The all-reduce fused with the update, each GPU reading the other's gradient (06_peer_update.cu).
        self.peer = (self.config.peer > 0) if mode == "bucketed" else split in PEER_SPLITS
        self.sms, self.link, self.peer_launches = sms, None, {}
        if self.peer and mode != "compute only":
            self.link = PeerLink(self.replica, comm, self.lib)
            r = self.replica
            if mode == "plain":
                self.peer_launches[0] = self.link.launch([r.layout.whole()], 0, min(sms, PEER_MAX_BLOCKS))
            else:
                last = len(r.buckets) - 1
                for k in range(1, last):
                    self.peer_launches[k] = self.link.launch([r.buckets[k]], k, min(self.config.peer, PEER_MAX_BLOCKS))
                self.peer_launches[last] = self.link.launch([r.buckets[last], r.buckets[0]], last,
                                                            min(sms, PEER_MAX_BLOCKS))
        # With config.priority, the all-reduces and the updates run on the device's highest-priority
        # streams: whenever an SM frees up, the block scheduler hands it to their waiting blocks before
        # the scatter's. A CUDA graph keeps each captured kernel's stream priority as a node attribute
        # but replays every node at the launch stream's priority unless instantiated with
        # cudaGraphInstantiateFlagUseNodePriority: :func:`time_step` asks graph_benchmark for that.
        try:
            least, greatest = cupy.cuda.runtime.deviceGetStreamPriorityRange()
        except AttributeError:
            least = greatest = 0
        r = self.replica
        if mode == "bucketed" and r.buckets[1].stop != r.buckets[0].start:
            raise ValueError("the bucketed step sends the small parameters with W1's first bucket: the buckets must "
                             "be Layout.buckets' (the small parameters, then W1's rows, rarest words first)")
        high = greatest if self.config.priority else least
        self.compute, self.small = _stream(least), _stream(least)
        self.side, self.upd = _stream(high), _stream(high)
        n = len(self.replica.buckets)
        ev = lambda: cupy.cuda.Event(disable_timing=True)     # noqa: E731
        self.fork, self.ready, self.reduced = ev(), [ev() for _ in range(n)], [ev() for _ in range(n)]
        self.forward_done, self.small_done = ev(), ev()
        self.joins = [ev() for _ in range(4)]

    def span(self, k: int) -> Bucket:
        """What W1 bucket ``k``'s all-reduce sends: the first bucket (the rarest words' rows) with
        the small parameters, which follow W1's last row in the flat buffer; the others alone."""
        r = self.replica
        if k != 1:
            return r.buckets[k]
        return Bucket(f"{r.buckets[1].name} and {r.buckets[0].name}", r.buckets[1].start, r.buckets[0].stop)

    def allreduce(self, lo: int, hi: int, stream) -> None:
        """Sum the gradient's [lo, hi) (gradient form) or average the parameters' (parameter form)."""
        r = self.replica
        ptr = r.reduced[lo:hi].data.ptr
        op = self.lib.NCCL_SUM if r.op == "sum" else getattr(self.lib, "NCCL_AVG", NCCL_AVG)
        self.comm.allReduce(ptr, ptr, hi - lo, self.lib.NCCL_FLOAT32, op, stream.ptr)

    def effective_gradient(self, snapshot):
        """The summed gradient this step applied, float64, from a :meth:`step`
        snapshot: the snapshot itself (gradient form), or (W before - W after) / lr
        (parameter form, whose snapshot is the averaged parameters; the peer update's, whose
        snapshot is the updated parameters: no summed gradient is ever stored)."""
        import cupy
        if self.form == "gradient" and not self.peer:
            return snapshot.astype(cupy.float64)
        return (self.flat0.astype(cupy.float64) - snapshot.astype(cupy.float64)) / self.replica.lr

    @property
    def tolerance(self) -> float:
        """The checks' tolerance: the summed gradient read back from the parameters (the parameter
        form, the peer update) carries W's float32 rounding."""
        return GRADIENT_TOLERANCE if self.form == "gradient" and not self.peer else UPDATE_TOLERANCE

    def _on(self, stream, lane: str, name: str, fn, trace):
        import cupy
        with stream:
            if trace is None:
                fn()
                return
            a, b = cupy.cuda.Event(), cupy.cuda.Event()
            a.record(stream)
            fn()
            b.record(stream)
            trace.append((lane, name, a, b))

    def step(self, trace: list | None = None, snapshot=None) -> None:
        """One step on the current stream. ``trace``: a list that receives
        (lane, operation, start event, end event) for each operation (eager
        runs only). ``snapshot``: a float32 array the size of the gradient
        that receives the summed gradient before the updates zero it (gradient
        form), or the averaged parameters (parameter form): checks."""
        import cupy
        if self.mode == "bucketed" and self.config.lean:
            self.lean_step(trace, snapshot)
            return
        if self.mode != "bucketed" and self.split in PEER_SPLITS:
            self._plain_peer(trace, snapshot)
            return
        if self.mode != "bucketed" and self.split == "forward":
            self._plain_in_forward(trace, snapshot)
            return
        r, main = self.replica, cupy.cuda.get_current_stream()
        params = self.form == "parameters"
        what = "all-reduce (average)" if params else "all-reduce"
        self.fork.record(main)
        for s in (self.compute, self.small, self.side, self.upd):
            s.wait_event(self.fork)
        self._on(self.compute, "compute", "forward + backward to dZ1", r.forward_backward, trace)
        save = None if snapshot is None else (lambda lo, hi: snapshot.__setitem__(slice(lo, hi), r.reduced[lo:hi]))
        if self.mode == "bucketed":
            # The small parameters' gradient runs beside the first W1 bucket's scatter on a stream
            # of its own. The small parameters follow W1's last row (the rarest word) in the flat
            # buffer, so they travel with the first bucket: one all-reduce and one update fewer per
            # step, and the last all-reduce, which nothing hides, carries W1's frequent rows only.
            self.forward_done.record(self.compute)
            self.small.wait_event(self.forward_done)
            self._on(self.small, "compute (small)", f"gradient: {r.buckets[0].name}", lambda: r.backward_bucket(0),
                     trace)
            self.small_done.record(self.small)
            last = len(r.buckets) - 1
            if not self.config.overlapped:
                # Every bucket's scatter before any all-reduce: the split step without the overlap.
                for k in range(1, last + 1):
                    self._on(self.compute, "compute", f"gradient: {r.buckets[k].name}",
                             lambda k=k: r.backward_bucket(k), trace)
                self.ready[last].record(self.compute)
            for k in range(1, last + 1):
                bucket = r.buckets[k]
                if self.config.overlapped:
                    self._on(self.compute, "compute", f"gradient: {bucket.name}", lambda k=k: r.backward_bucket(k),
                             trace)
                    self.ready[k].record(self.compute)
                self.side.wait_event(self.ready[k] if self.config.overlapped else self.ready[last])
                span = self.span(k)
                if k == 1:
                    self.side.wait_event(self.small_done)
                self._on(self.side, "communication", f"{what}: {span.name}",
                         lambda b=span: self.allreduce(b.start, b.stop, self.side), trace)
                self.reduced[k].record(self.side)
                self.upd.wait_event(self.reduced[k])
                if save:
                    with self.upd:
                        save(span.start, span.stop)
                if not params:         # the parameter form's average is the update
                    self._on(self.upd, "update", f"update: {span.name}", r.update(span), trace)
        else:
            whole = r.layout.whole()
            if self.split:
                # The small parameters' gradient (coalesced) beside W1's scatter, joined before the sum.
                self.forward_done.record(self.compute)
                self.small.wait_event(self.forward_done)
                self._on(self.small, "compute (small)", "gradient: W2, b1, b2", r.small_gradients, trace)
                self.small_done.record(self.small)
                self._on(self.compute, "compute", "gradient: W1", r.w1_gradient, trace)
                self.compute.wait_event(self.small_done)
            else:
                self._on(self.compute, "compute", "gradient: whole", r.backward_plain, trace)
            if self.mode == "plain":
                self._on(self.compute, "communication", f"{what}: whole",
                         lambda: self.allreduce(whole.start, whole.stop, self.compute), trace)
            if save:
                with self.compute:
                    save(whole.start, whole.stop)
            if not params:
                self._on(self.compute, "update", "update: whole", r.update(whole), trace)
        for s, e in zip((self.compute, self.small, self.side, self.upd), self.joins):
            e.record(s)
            main.wait_event(e)

    def lean_step(self, trace: list | None = None, snapshot=None) -> None:
        """The bucketed step with as few cross-stream dependencies as overlap allows: the
        computation, the last all-reduce and the update run on the caller's stream (no fork,
        no join), and only the earlier buckets' all-reduces on the communication stream.

        On the caller's stream: the forward pass, the first W1 bucket's scatter (the rarest
        words) and the small parameters' gradient in one launch
        (``kernels/multigpu/04_first_bucket_and_small.cu``), then each later bucket's scatter;
        after each bucket but the last, an event the communication stream waits for before that
        bucket's all-reduce (the first with the small parameters). Then it waits once for the
        communication stream's last all-reduce, sends the last bucket (the most frequent
        words' rows) and (gradient form) applies one update to the whole buffer. Two
        cross-stream dependencies per step (one per earlier bucket, and one back), where
        :meth:`step` has about eight (a fork to four streams, the small gradients' stream,
        each bucket's ready and reduced events, a join of four). Not overlapped
        (``config.overlapped`` False): everything on the caller's stream, the earlier
        buckets' all-reduces after the whole scatter, none at all."""
        import cupy
        r, main = self.replica, cupy.cuda.get_current_stream()
        what = "all-reduce (average)" if self.form == "parameters" else "all-reduce"
        last = len(r.buckets) - 1
        if self.config.in_forward:
            self._in_forward(main, trace, snapshot, what)
            return
        self._on(main, "compute", "forward + backward to dZ1", r.forward_backward, trace)
        if self.config.comm_first and self.config.overlapped and last > 1:
            self._comm_first(main, trace, snapshot, what)
            return
        for k in range(1, last + 1):
            self._scatter(main, "compute", k, trace)
            if k < last and self.config.overlapped:
                self.ready[k].record(main)
                self.side.wait_event(self.ready[k])
                self._on(self.side, "communication", f"{what}: {self.span(k).name}",
                         lambda b=self.span(k): self.allreduce(b.start, b.stop, self.side), trace)
        if self.config.overlapped and last > 1:
            self.reduced[last - 1].record(self.side)
            main.wait_event(self.reduced[last - 1])
        elif not self.config.overlapped:
            for k in range(1, last):
                self._on(main, "communication", f"{what}: {self.span(k).name}",
                         lambda b=self.span(k): self.allreduce(b.start, b.stop, main), trace)
        self._last_bucket(main, trace, snapshot, what)

    def _scatter(self, stream, lane: str, k: int, trace) -> None:
        """W1 bucket ``k``'s scatter on ``stream``; the first with the small parameters' gradient,
        in one launch."""
        r = self.replica
        if k == 1:
            self._on(stream, lane, f"gradient: {r.buckets[1].name} and {r.buckets[0].name}", r.first_bucket_and_small,
                     trace)
        else:
            self._on(stream, lane, f"gradient: {r.buckets[k].name}", lambda: r.backward_bucket(k), trace)

    def _last_bucket(self, main, trace, snapshot, what: str) -> None:
        """The lean steps' end, on the caller's stream: the last bucket's all-reduce (with the small
        parameters if it is the first), the snapshot (checks), and (gradient form) one update of the
        whole buffer."""
        r = self.replica
        span = self.span(len(r.buckets) - 1)
        self._on(main, "communication", f"{what}: {span.name}", lambda: self.allreduce(span.start, span.stop, main),
                 trace)
        whole = r.layout.whole()
        if snapshot is not None:
            with main:
                snapshot[whole.start:whole.stop] = r.reduced[whole.start:whole.stop]
        if self.form != "parameters":
            self._on(main, "update", "update: whole", r.update(whole), trace)

    def _comm_first(self, main, trace, snapshot, what: str) -> None:
        """:meth:`lean_step` with the streams' roles swapped after the first bucket: the caller's
        stream runs the first bucket's scatter (with the small gradients) and then every
        all-reduce; the later buckets' scatters run on a second stream (the lowest priority),
        each all-reduce waiting for its bucket's scatter. The host launches each all-reduce
        before the next scatter, and in a graph that scatter starts a cross-stream dependency
        after the all-reduce: NCCL's blocks are placed first."""
        r = self.replica
        last = len(r.buckets) - 1
        scatter = self.small                  # a lowest-priority stream
        self._scatter(main, "compute", 1, trace)
        self.ready[1].record(main)
        scatter.wait_event(self.ready[1])
        for k in range(1, last):
            if k > 1:
                main.wait_event(self.ready[k])
            self._on(main, "communication", f"{what}: {self.span(k).name}",
                     lambda b=self.span(k): self.allreduce(b.start, b.stop, main), trace)
            self._scatter(scatter, "compute (second stream)", k + 1, trace)
            self.ready[k + 1].record(scatter)
        main.wait_event(self.ready[last])
        self._last_bucket(main, trace, snapshot, what)

    def _grouped(self, spans, stream) -> None:
        """The all-reduces of several ranges as one NCCL group: NCCL aggregates a group's collectives
        into one launch, so two ranges cost about one all-reduce of their joint size."""
        if self.lib is not None:
            self.lib.groupStart()
        try:
            for b in spans:
                self.allreduce(b.start, b.stop, stream)
        finally:
            if self.lib is not None:
                self.lib.groupEnd()

    def _in_forward(self, main, trace, snapshot, what: str) -> None:
        """The lean step with the first bucket's gradient formed in the forward kernel (gradient
        form): on the caller's stream the forward kernel (05_forward_and_first_bucket.cu), after
        which the communication stream all-reduces the first bucket and applies its update (the
        next step's forward pass is the first to read those rows); the caller's stream meanwhile
        scatters the later buckets (each all-reduced and updated on the communication stream in
        turn), the last with the small gradients in one launch (04_first_bucket_and_small.cu),
        sends the last bucket and the small parameters, which are not contiguous, as one NCCL
        group, updates them, and waits for the communication stream. With the peer update
        (``config.peer``, 06_peer_update.cu) each bucket's all-reduce and update are one launch
        instead: the earlier buckets' on ``config.peer`` blocks beside the scatter, the last
        bucket's and the small parameters' on every SM."""
        r = self.replica
        last = len(r.buckets) - 1
        self._on(main, "compute", f"forward + backward to dZ1, gradient: {r.buckets[1].name}", r.forward_and_first_bucket,
                 trace)
        for k in range(1, last):
            if k > 1:
                self._on(main, "compute", f"gradient: {r.buckets[k].name}", lambda k=k: r.backward_bucket(k), trace)
            b = r.buckets[k]
            self.ready[k].record(main)
            self.side.wait_event(self.ready[k])
            if self.peer:
                self._on(self.side, "communication", f"{PEER_OP}: {b.name}", self.peer_launches[k], trace)
                continue
            self._on(self.side, "communication", f"{what}: {b.name}", lambda b=b: self.allreduce(b.start, b.stop, self.side),
                     trace)
            if snapshot is not None:
                with self.side:
                    snapshot[b.start:b.stop] = r.grad[b.start:b.stop]
            self._on(self.side, "update", f"update: {b.name}", r.update(b), trace)
        tail, small = r.buckets[last], r.buckets[0]
        name = f"{tail.name} and {small.name}"
        self._on(main, "compute", f"gradient: {name}", r.bucket_and_small[last - 1], trace)
        if self.peer:
            self._on(main, "communication", f"{PEER_OP}: {name}", self.peer_launches[last], trace)
        else:
            self._on(main, "communication", f"{what}: {name}", lambda: self._grouped((tail, small), main), trace)
            if snapshot is not None:
                with main:
                    for b in (tail, small):
                        snapshot[b.start:b.stop] = r.grad[b.start:b.stop]
            self._on(main, "update", f"update: {name}", lambda: (r.update(tail)(), r.update(small)()), trace)
        self.reduced[last - 1].record(self.side)
        main.wait_event(self.reduced[last - 1])
        if self.peer and snapshot is not None:      # the updated parameters: no summed gradient is stored
            with main:
                snapshot[...] = r.flat

    def _plain_in_forward(self, trace, snapshot) -> None:
        """The plain step (or its computation alone) with W1's whole gradient in the forward kernel
        (05_forward_and_first_bucket.cu over every document's whole row), then the small gradients,
        the all-reduce of the whole buffer and the update, all on the caller's stream: the plain
        step's chance at what :meth:`_in_forward` does."""
        import cupy
        r, main = self.replica, cupy.cuda.get_current_stream()
        whole = r.layout.whole()
        self._on(main, "compute", "forward + backward to dZ1, gradient: W1", r.forward_and_w1_gradient, trace)
        self._on(main, "compute", "gradient: W2, b1, b2", r.small_gradients, trace)
        if self.mode == "plain":
            self._on(main, "communication", "all-reduce: whole", lambda: self.allreduce(whole.start, whole.stop, main),
                     trace)
        if snapshot is not None:
            with main:
                snapshot[whole.start:whole.stop] = r.grad[whole.start:whole.stop]
        self._on(main, "update", "update: whole", r.update(whole), trace)

    def _plain_peer(self, trace, snapshot) -> None:
        """The plain step with the all-reduce fused with the update (06_peer_update.cu): W1's
        whole gradient in the forward kernel and the small gradients (``split="forward peer"``) or
        step 9's gradient kernel (``"peer"``), then one peer update of the whole buffer, all on the
        caller's stream. Computation alone (``"compute only"``): the same kernels and the ordinary
        update (02_update_and_zero.cu) of this GPU's own gradient."""
        import cupy
        r, main = self.replica, cupy.cuda.get_current_stream()
        whole = r.layout.whole()
        if self.split == "forward peer":
            self._on(main, "compute", "forward + backward to dZ1, gradient: W1", r.forward_and_w1_gradient, trace)
            self._on(main, "compute", "gradient: W2, b1, b2", r.small_gradients, trace)
        else:
            self._on(main, "compute", "forward + backward to dZ1", r.forward_backward, trace)
            self._on(main, "compute", "gradient: whole", r.backward_plain, trace)
        if self.mode == "plain":
            self._on(main, "communication", f"{PEER_OP}: whole", self.peer_launches[0], trace)
            if snapshot is not None:
                with main:
                    snapshot[...] = r.flat
        else:
            self._on(main, "update", "update: whole", r.update(whole), trace)

    __call__ = step


#: The peer update's operation in the timeline.
PEER_OP = "all-reduce and update over NVLink"
#: The plain step's forms with the peer update: after step 9's gradient kernel, or after the forward
#: kernel that forms W1's whole gradient.
PEER_SPLITS = ("peer", "forward peer")


class PeerLink:
    """Two GPUs' processes sharing their gradient buffers and flags through CUDA IPC, for
    :meth:`.replicas.Replica.peer_update`: this rank's gradient moves to a buffer of its own
    ``cudaMalloc`` (an IPC handle covers a whole allocation, which CuPy's pool may share), the
    handles of it and of a flag array go to the other rank (an NCCL all-gather), and the other's
    are opened here (``cudaIpcOpenMemHandle`` with lazy peer access: NVLink). Both ranks must
    build their links, and their launches, in the same order. The allocations are kept until the
    process ends (:data:`_KEPT`): the other process may still map them."""

    def __init__(self, replica, comm, lib):
        import cupy
        rt = cupy.cuda.runtime
        world = comm.size()
        if world != 2:
            raise GpulabError(f"the peer update reads one other GPU's gradient: it needs 2 GPUs, the communicator has "
                              f"{world}")
        n = replica.layout.size
        nflags = 2 * PEER_SLOTS * PEER_MAX_BLOCKS
        grad_mem, flag_mem = cupy.cuda.memory.Memory(4 * n), cupy.cuda.memory.Memory(4 * nflags)
        grad = cupy.ndarray((n,), cupy.float32, cupy.cuda.memory.MemoryPointer(grad_mem, 0))
        grad[...] = replica.grad
        replica.use_gradient_buffer(grad)
        self.replica = replica
        self.flags = cupy.ndarray((nflags,), cupy.uint32, cupy.cuda.memory.MemoryPointer(flag_mem, 0))
        self.flags.fill(0)
        self.epochs = cupy.zeros(PEER_SLOTS * PEER_MAX_BLOCKS, cupy.uint32)
        cupy.cuda.Device().synchronize()      # zeroed before the other GPU can write a flag here
        mine = np.frombuffer(bytes(rt.ipcGetMemHandle(grad_mem.ptr)) + bytes(rt.ipcGetMemHandle(flag_mem.ptr)), np.uint8)
        size = mine.size
        send, recv = cupy.asarray(mine), cupy.zeros(world * size, cupy.uint8)
        stream = cupy.cuda.get_current_stream()
        comm.allGather(send.data.ptr, recv.data.ptr, size, getattr(lib, "NCCL_UINT8", 1), stream.ptr)
        stream.synchronize()
        other = cupy.asnumpy(recv).reshape(world, size)[1 - comm.rank_id()].tobytes()
        half = size // 2
        peer_grad, peer_flags = rt.ipcOpenMemHandle(other[:half]), rt.ipcOpenMemHandle(other[half:])
        dev = cupy.cuda.Device().id
        self.peer_grad = cupy.ndarray((n,), cupy.float32, cupy.cuda.memory.MemoryPointer(
            cupy.cuda.memory.UnownedMemory(peer_grad, 4 * n, self, dev), 0))
        self.peer_flags = cupy.ndarray((nflags,), cupy.uint32, cupy.cuda.memory.MemoryPointer(
            cupy.cuda.memory.UnownedMemory(peer_flags, 4 * nflags, self, dev), 0))
        _KEPT.append((grad_mem, flag_mem, self.flags, self.epochs, self.peer_grad, self.peer_flags))

    def launch(self, spans, slot: int, blocks: int):
        """The peer update over ``spans`` (one or two buckets) at flag ``slot``, on ``blocks`` blocks."""
        if not 0 <= slot < PEER_SLOTS:
            raise ValueError(f"the peer update has {PEER_SLOTS} flag slots, got slot {slot}")
        return self.replica.peer_update(spans, self.peer_grad, self.flags, self.peer_flags, self.epochs, slot, blocks)


#: Every PeerLink's allocations, kept for the process's life (see :class:`PeerLink`).
_KEPT: list = []


#: ncclAvg in NCCL's ncclRedOp_t (for a CuPy whose bindings lack the constant).
NCCL_AVG = 4


def time_step(step: "GpuStep", repeats: int):
    """A step's time per call in a CUDA graph of STEP_LAUNCHES steps; with node
    priorities where the step's streams have them."""
    global _PRIORITY_FAILED
    from ...timing import graph_benchmark
    if step.mode == "bucketed" and step.config.priority and not _PRIORITY_FAILED:
        try:
            return graph_benchmark(step, launches=STEP_LAUNCHES, repeats=repeats, rel_ci=None, warmup=3,
                                   node_priorities=True)
        except GpulabError as exc:
            # Both ranks' graphs hold the same collectives either way, so falling back keeps them in step.
            _PRIORITY_FAILED = f"{exc}"
            print(f"node priorities unavailable, plain graphs from here on: {exc}", flush=True)
    return graph_benchmark(step, launches=STEP_LAUNCHES, repeats=repeats, rel_ci=None)


_PRIORITY_FAILED = ""


class Buckets:
    """A batch's W1 buckets for each bucket count, and every rank's word
    ranges for them, found once (every configuration of the sweep reuses them)."""

    def __init__(self, batch: data.Corpus, part: data.Corpus):
        from .replicas import bucket_ranges
        self.batch, self.part, self._cache = batch, part, {}
        self._ranges = bucket_ranges

    def get(self, n: int, rare_share: float | None = None) -> tuple[list, list]:
        key = (n, rare_share)
        if key not in self._cache:
            buckets = Layout(self.batch.vocab).buckets(n, row_work(self.batch), rare_share)
            self._cache[key] = (buckets, [self._ranges(self.part, k.rows) for k in buckets[1:]])
        return self._cache[key]


def _stream(priority: int):
    import cupy
    try:
        return cupy.cuda.Stream(non_blocking=True, priority=priority)
    except TypeError:            # a CuPy without stream priorities: the default one
        return cupy.cuda.Stream(non_blocking=True)


def _digest(array) -> str:
    import cupy
    return hashlib.sha1(cupy.asnumpy(array).tobytes()).hexdigest()


def _one_gpu_gradient(batch: data.Corpus, params: dict):
    """One GPU, the whole batch: the gradient (float64, host) the replicas' sum must equal."""
    import cupy
    r = Replica(batch, params, batch.docs, "gpu")
    r.forward_backward()
    r.backward_plain()
    g = cupy.asnumpy(r.grad).astype(np.float64)
    del r
    return g


def _checks(rank, world, comm, batch, params, bk: Buckets, config: Overlap, plain: tuple, with_reference,
            barrier) -> tuple[list, list]:
    """Each mode (the bucketed one in ``config``), one step with the summed
    gradient saved: rank 0 compares it with one GPU's gradient on the whole
    batch (and float64); every rank reports digests of its summed gradient and,
    after CHECK_STEPS steps, of its parameters (the parent compares them across ranks).
    The parameter form's summed gradient is the one its step applied, (W before -
    W after) / lr, which also carries W's float32 rounding (UPDATE_TOLERANCE)."""
    import cupy
    from ...check import compare
    rows, digests = [], []
    g_one = _one_gpu_gradient(batch, params) if rank == 0 else None
    form, split = plain
    for mode in ("plain", "bucketed"):
        buckets, ranges = bk.get(config.buckets, config.rare_share)
        step = GpuStep(bk.part, params, batch.docs, comm, mode, buckets, config=config, ranges=ranges, split=split,
                       form=form, world=world)
        snap = cupy.empty_like(step.replica.flat)
        snap.fill(np.nan)
        step(snapshot=snap)
        for _ in range(CHECK_STEPS - 1):
            step()
        cupy.cuda.Device().synchronize()
        label = f"plain ({PLAIN_FORMS[plain]})" if mode == "plain" else f"bucketed ({config.label})"
        digests.append({"batch": batch.docs, "variant": label, "rank": rank, "gradient": _digest(snap),
                        "parameters": _digest(step.replica.flat)})
        if rank == 0:
            tol = step.tolerance
            summed = cupy.asnumpy(step.effective_gradient(snap))
            err = float(np.linalg.norm(summed - g_one) / np.linalg.norm(g_one)) if np.isfinite(summed).all() \
                else float("inf")
            rows.append({"batch": batch.docs, "variant": label, "quantity": f"summed gradient ({world} GPUs) vs 1-GPU "
                         "gradient", "rel_error": err, "tolerance": tol, "passed": err <= tol})
            if with_reference:
                p64 = {k: v.astype(np.float64) for k, v in params.items()}
                ref = reference.backward(batch, batch.labels, p64, reference.forward(batch, p64))
                views = step.replica.layout.views(summed)
                for k in PARAMS:
                    c = compare(views[k], ref["d" + k], "fp32", name=f"{mode}: gradient of {k}")
                    tol = max(c.tolerance, step.tolerance)
                    rows.append({"batch": batch.docs, "variant": label, "quantity": f"gradient of {k} vs float64",
                                 "rel_error": c.rel_error, "tolerance": tol, "passed": bool(c.rel_error <= tol)})
        del step, snap
    barrier.wait()
    return rows, digests


#: The plain step's forms, by (form, split): what the sweep tries and the run records.
PLAIN_FORMS = {("gradient", False): "step 9's gradient kernel", ("gradient", True): "split gradient",
               ("gradient", "forward"): "gradient in the forward kernel",
               ("parameters", False): "parameter average, step 9's kernels",
               ("parameters", True): "parameter average, split",
               ("gradient", "peer"): "step 9's gradient kernel, all-reduce fused with the update over NVLink",
               ("gradient", "forward peer"): "gradient in the forward kernel, all-reduce fused with the update over NVLink"}


def plain_forms(world: int) -> list:
    """The plain step's forms on ``world`` GPUs: the peer update's only on two."""
    return [key for key in PLAIN_FORMS if world == 2 or key[1] not in PEER_SPLITS]


def overlaps(configs, world: int) -> tuple:
    """``configs`` that run on ``world`` GPUs: the peer update's only on two."""
    return tuple(c for c in configs if world == 2 or not c.peer)


def _sweep(rank, world, comm, batch, params, bk: Buckets, configs, repeats, nccl_settings: str, experiment: str):
    """The plain step in every form (:data:`PLAIN_FORMS`) and the bucketed
    step in every configuration, at this batch: each checked (the summed
    gradient it applied against the plain gradient step's, on rank 0) and
    timed in a CUDA graph. Returns (rows, checks, the fastest bucketed
    configuration, the fastest plain form's key): the ranks' times are
    max-reduced over NCCL first, so every rank picks the same (their
    all-reduces must match)."""
    import cupy
    lib = nccl()
    rows, checks, medians = [], [], []
    buckets, ranges = bk.get(2)
    reference_step = GpuStep(bk.part, params, batch.docs, comm, "plain", buckets, ranges=ranges, world=world)
    want = cupy.full_like(reference_step.replica.grad, np.nan)
    reference_step(snapshot=want)
    del reference_step
    want = want.astype(cupy.float64)
    norm = float(cupy.linalg.norm(want))
    configs = overlaps(configs, world)
    runs = [("plain", key, None) for key in plain_forms(world)] + [("bucketed", ("gradient", False), c) for c in configs]
    for mode, (form, split), config in runs:
        buckets, ranges = bk.get(config.buckets, config.rare_share) if config else bk.get(2)
        step = GpuStep(bk.part, params, batch.docs, comm, mode, buckets, config=config, ranges=ranges, split=split,
                       form=form, world=world)
        got = cupy.full_like(step.replica.flat, np.nan)
        step(snapshot=got)
        err = float(cupy.linalg.norm(step.effective_gradient(got) - want)) / norm
        err = err if np.isfinite(err) else float("inf")
        tol = step.tolerance
        label = f"one all-reduce, {PLAIN_FORMS[(form, split)]}" if config is None else f"bucketed: {config.label}"
        if rank == 0:
            checks.append({"batch": batch.docs, "variant": f"{label}; {nccl_settings}",
                           "quantity": "summed gradient vs the plain step's", "rel_error": err,
                           "tolerance": tol, "passed": err <= tol})
        t = time_step(step, repeats)
        medians.append(t.median_ms if err <= tol else float("inf"))
        extra = {"peer": int(step.peer)} if config is None else {"peer": int(step.peer), "buckets": config.buckets,
                                                                 "blocks_per_sm": config.blocks_per_sm or 0,
                                           "spare_sms": config.spare_sms, "peer_blocks": config.peer,
                                           "priority": int(config.priority), "rare_share": config.share,
                                           "overlapped": int(config.overlapped)}
        rows.append(t.row(experiment, f"{world} GPUs, {label}; {nccl_settings}", batch.docs, phase="step", gpus=world,
                          rank=rank, form=step.form, rel_error=err, **extra))
        del step, got
    worst = cupy.asarray(medians, cupy.float64)
    stream = cupy.cuda.get_current_stream()
    comm.allReduce(worst.data.ptr, worst.data.ptr, len(medians), lib.NCCL_FLOAT64, lib.NCCL_MAX, stream.ptr)
    worst = cupy.asnumpy(worst)
    for r, w in zip(rows, worst):
        r["slowest_rank_ms"] = float(w)
    cupy.get_default_memory_pool().free_all_blocks()
    p = len(plain_forms(world))
    plain = plain_forms(world)[int(np.argmin(worst[:p]))]
    # The bucketed step the run keeps is the fastest overlapped one (the others are measurements).
    overlapped = np.where([c.overlapped for c in configs], worst[p:], np.inf)
    return rows, checks, configs[int(np.argmin(overlapped))], plain


def _allreduce_curve(rank, world, comm, sizes, repeats, log) -> list:
    """The lab's all-reduce (eager and in a CUDA graph) and torch.distributed's,
    one process per GPU, each size timed on this rank's stream."""
    import cupy
    import torch
    import torch.distributed as dist
    from ...timing import benchmark, graph_benchmark
    lib = nccl()
    rows = []
    stream = cupy.cuda.Stream(non_blocking=True)
    tstream = cupy.cuda.ExternalStream(torch.cuda.current_stream(rank).cuda_stream, rank)
    for nbytes in sizes:
        n = nbytes // 4
        buf = cupy.ones(n, cupy.float32)
        with stream:
            comm.allReduce(buf.data.ptr, buf.data.ptr, n, lib.NCCL_FLOAT32, lib.NCCL_SUM, stream.ptr)
        stream.synchronize()
        got = float(buf[-1].get())
        if got != float(world):
            raise CheckFailed(f"NCCL all-reduce of ones over {world} GPUs gave {got}, expected {world}")
        buf.fill(0)              # timed on zeros: repeated sums of ones would grow
        cupy.cuda.Device().synchronize()

        def once():
            comm.allReduce(buf.data.ptr, buf.data.ptr, n, lib.NCCL_FLOAT32, lib.NCCL_SUM,
                           cupy.cuda.get_current_stream().ptr)
        with stream:
            t = benchmark(once, repeats=repeats, rel_ci=None, warmup=5, stream=stream)
        rows.append(t.row("allreduce", f"NCCL all-reduce, lab (CuPy), 1 process per GPU", nbytes,
                          phase="allreduce", bytes=float(nbytes), gpus=world))
        t = graph_benchmark(once, launches=ALLREDUCE_LAUNCHES, repeats=repeats, rel_ci=None, warmup=3)
        rows.append(t.row("allreduce", f"NCCL all-reduce, lab (CuPy), 1 process per GPU, CUDA graph", nbytes,
                          phase="allreduce", bytes=float(nbytes), gpus=world))
        tb = torch.zeros(n, dtype=torch.float32, device=f"cuda:{rank}")
        t = benchmark(lambda: dist.all_reduce(tb), repeats=repeats, rel_ci=None, warmup=5, stream=tstream)
        rows.append(t.row("allreduce", "torch.distributed all_reduce (NCCL), 1 process per GPU", nbytes,
                          phase="allreduce", bytes=float(nbytes), gpus=world))
        if rank == 0:
            log(f"all-reduce {nbytes:>11d} B: lab {rows[-3]['median_ms'] * 1e3:8.1f} us, lab graph "
                f"{rows[-2]['median_ms'] * 1e3:8.1f} us, torch {rows[-1]['median_ms'] * 1e3:8.1f} us")
        del buf, tb
    return rows


def _one_gpu_rows(batch, params, repeats, pieces: bool) -> list:
    """Rank 0 alone: the training chapter's steps 9 and 10 and the replicas'
    form of the step on one GPU, on the whole batch."""
    import cupy
    from ...kernels import get_backend
    from ...timing import benchmark, graph_benchmark
    from ..training import CHAPTER as TRAINING
    from ..training.launchers import BoundStep, Config, buffers
    from ..training.problem import Dims
    rows, b, work = [], batch.docs, _work(batch)
    d = Dims(b, batch.vocab)
    s9 = TRAINING.step(9)
    bound = BoundStep(s9, d, buffers(get_backend("gpu"), s9, d, batch, params), Config(), "gpu")
    t = benchmark(bound, repeats=repeats, rel_ci=None)
    rows.append(t.row("step", "1 GPU, step 9", b, phase="step", gpus=1, **work))
    t = graph_benchmark(bound, launches=STEP_LAUNCHES, repeats=repeats, rel_ci=None)
    rows.append(t.row("step", "1 GPU, step 10 (CUDA graph)", b, phase="step", gpus=1, **work))
    one = GpuStep(batch, params, b, None, "compute only", Layout(batch.vocab).buckets(1))
    t = graph_benchmark(one, launches=STEP_LAUNCHES, repeats=repeats, rel_ci=None)
    rows.append(t.row("step", "1 GPU, gradient then update (CUDA graph)", b, phase="step", gpus=1, **work))
    split = GpuStep(batch, params, b, None, "compute only", Layout(batch.vocab).buckets(1), split=True)
    t = graph_benchmark(split, launches=STEP_LAUNCHES, repeats=repeats, rel_ci=None)
    rows.append(t.row("step", "1 GPU, split gradient then update (CUDA graph)", b, phase="step", gpus=1, **work))
    del split
    # One GPU gets the forward kernel with W1's gradient too (05_forward_and_first_bucket.cu): if it beat
    # step 10, it would be the fastest one-GPU step the two GPUs are measured against.
    fused = GpuStep(batch, params, b, None, "compute only", Layout(batch.vocab).buckets(1), split="forward")
    t = graph_benchmark(fused, launches=STEP_LAUNCHES, repeats=repeats, rel_ci=None)
    rows.append(t.row("step", ONE_GPU_FORWARD, b, phase="step", gpus=1, **work))
    del fused
    if pieces:
        r = one.replica
        for name, fn in (("forward + backward to dZ1", r.forward_backward), ("gradient (scatter-add)", r.gradients),
                         ("small gradients, step 9's H blocks", r.small_gradients_step9),
                         ("small gradients, coalesced", r.small_gradients),
                         ("W1's gradient alone (bucket kernel, every row)", r.w1_gradient),
                         ("update and zero", r.update(r.layout.whole())),
                         ("step 9: sparse_forward_backward", bound.launches[0]),
                         ("step 9: sparse_update (scatter into W1)", bound.launches[-1])):
            t = graph_benchmark(fn, launches=STEP_LAUNCHES, repeats=repeats, rel_ci=None)
            rows.append(t.row("pieces", f"1 GPU: {name}", b, phase="kernel", gpus=1))
    del one, bound
    cupy.get_default_memory_pool().free_all_blocks()
    return rows


#: The batches at which one GPU's share of the scatter is timed bucket by bucket (``bucket pieces``):
#: where the all-reduce is the largest share of the step, and a middle batch.
BUCKET_PIECE_BATCHES = (1024, 8192)


#: The bucket piece that the first all-reduce waits for: the rare-word bucket's scatter and the small
#: gradients in one launch (kernels/multigpu/04_first_bucket_and_small.cu).
FIRST_PIECE = "W1's scatter, rare-word bucket with the small gradients"


def bucket_pieces(batch: data.Corpus, params: dict, world: int, sms: int, backend=None):
    """Yield (name, launch, floats written, blocks per SM or 0, rare-word share,
    replica) for one GPU's share of ``batch`` (what each GPU computes in the
    two-GPU step): the forward pass, the small gradients, W1's whole scatter,
    and each of the two buckets' scatters (the rare-word one also with the
    small gradients in one launch, :data:`FIRST_PIECE`), cut at equal work and with the
    rare-word bucket holding RARE_SHARE of it, on one block per document and
    on 8 blocks per SM of ``sms``. The overlap can hide only what runs after
    the first all-reduce starts: W1's scatter less the rare-word bucket's.
    Replicas in the parameter form (the form the record keeps at most batches),
    on ``backend`` (the GPU in the record; the tests use the CPU backend)."""
    from .replicas import bucket_ranges
    part = split_batch(batch, world)[0]
    work = row_work(batch)
    for per_sm in (None, 8):
        for share in (None, RARE_SHARE):
            buckets = Layout(batch.vocab).buckets(2, work, share)
            r = Replica(part, params, batch.docs, backend, buckets=buckets, form="parameters", replicas=world,
                        scatter_blocks=None if per_sm is None else per_sm * sms,
                        ranges=[bucket_ranges(part, k.rows) for k in buckets[1:]])
            pieces = [("W1's scatter, every row", r.w1_gradient, r.layout.size - r.layout.small),
                      ("W1's scatter, rare-word bucket", r.bucket_gradients[0], buckets[1].size),
                      (FIRST_PIECE, r.first_bucket_and_small, buckets[1].size + r.layout.small),
                      ("W1's scatter, frequent-word bucket", r.bucket_gradients[1], buckets[2].size)]
            if per_sm is None and share is None:
                pieces = [("forward + backward to dZ1", r.forward_backward, 0),
                          ("small gradients, coalesced", r.small_gradients, r.layout.small)] + pieces
            elif share is not None:
                pieces = pieces[1:]          # the whole scatter does not depend on the cut
            for name, fn, floats in pieces:
                yield name, fn, floats, per_sm or 0, (1 / 2 if share is None else share), r


def _bucket_pieces(batch: data.Corpus, params: dict, world: int, repeats: int) -> list:
    """Rank 0 alone: :func:`bucket_pieces`, each launch alone in a CUDA graph."""
    import cupy
    from ...timing import graph_benchmark
    sms = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["multiProcessorCount"]
    rows = []
    for name, fn, floats, per_sm, share, _ in bucket_pieces(batch, params, world, sms, "gpu"):
        t = graph_benchmark(fn, launches=STEP_LAUNCHES, repeats=repeats, rel_ci=None)
        rows.append(t.row("bucket pieces", f"1 GPU, one GPU's share: {name}", batch.docs, phase="kernel",
                          gpus=1, bytes=4.0 * floats, blocks_per_sm=per_sm, rare_share=share))
    cupy.get_default_memory_pool().free_all_blocks()
    return rows


def _timeline(step: GpuStep, rank: int, batch: int, mode: str, repeats: int = 3) -> list:
    """One eager step, after ``repeats`` untimed ones, with an event pair
    around every operation: microseconds from the step's first event."""
    import cupy
    for _ in range(repeats):
        step()
    cupy.cuda.Device().synchronize()
    trace = []
    step(trace=trace)
    cupy.cuda.Device().synchronize()
    t0 = trace[0][2]
    return [{"batch": batch, "mode": mode, "gpu": rank, "lane": lane, "operation": name,
             "start_us": 1e3 * cupy.cuda.get_elapsed_time(t0, a), "end_us": 1e3 * cupy.cuda.get_elapsed_time(t0, b)}
            for lane, name, a, b in trace]


def _worker(rank: int, world: int, uid, port: int, tmp: str, batches, sizes, repeats: int, barrier,
            timeline_batches, env: dict, sweep_only: bool, every_batch=None) -> None:
    nccl_env()
    os.environ.update(env)
    nccl_settings = nccl_label(env)
    out = Path(tmp, f"rank{rank}.json")
    log = (lambda msg: print(msg, flush=True)) if rank == 0 else (lambda msg: None)
    try:
        import cupy
        import torch
        import torch.distributed as dist
        from ...timing import benchmark
        cupy.cuda.Device(rank).use()
        torch.cuda.set_device(rank)
        lib = nccl()
        comm = lib.NcclCommunicator(world, uid, rank)
        if not sweep_only:
            dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        z = np.load(Path(tmp, "corpus.npz"))
        corpus = data.Corpus(z["indptr"], z["indices"], z["counts"], z["labels"], int(z["vocab"]))
        params = {k: z[k] for k in PARAMS}
        result = {"rows": [], "checks": [], "digests": [], "timeline": [], "choices": []}
        sweep_repeats = max(5, min(repeats, SWEEP_REPEATS))
        if sweep_only:
            for b in batches:
                batch = corpus.rows(0, b)
                bk = Buckets(batch, split_batch(batch, world)[rank])
                rows, checks, best, plain = _sweep(rank, world, comm, batch, params, bk, NCCL_SWEEP, sweep_repeats,
                                                    nccl_settings, "nccl settings")
                result["rows"] += rows
                result["checks"] += checks
                result["choices"].append({"batch": b, "nccl": nccl_settings, **asdict(best), "label": best.label,
                                          "plain": PLAIN_FORMS[plain]})
                log(f"{nccl_settings}: B={b} " + ", ".join(f"{r['variant']} {r['slowest_rank_ms']:.4f}" for r in rows))
            out.write_text(json.dumps(result, default=lambda v: v.item() if hasattr(v, "item") else str(v)))
            return
        start = time.perf_counter()
        every = tuple(every_batch or batches)       # the run's batches (this call may time some of them)
        for b in batches:
            batch = corpus.rows(0, b)
            if rank == 0:
                result["rows"] += _one_gpu_rows(batch, params, repeats, pieces=b in (max(every), max(every) // world))
                if b in BUCKET_PIECE_BATCHES or b == min(every):
                    result["rows"] += _bucket_pieces(batch, params, world, repeats)
            barrier.wait()
            bk = Buckets(batch, split_batch(batch, world)[rank])
            rows, checks, best, plain = _sweep(rank, world, comm, batch, params, bk, OVERLAPS, sweep_repeats, nccl_settings,
                                                "overlap")
            result["rows"] += rows
            result["checks"] += checks
            result["choices"].append({"batch": b, "nccl": nccl_settings, **asdict(best), "label": best.label,
                                      "plain": PLAIN_FORMS[plain]})
            rows, digests = _checks(rank, world, comm, batch, params, bk, best, plain, b == batches[0], barrier)
            result["checks"] += rows
            result["digests"] += digests
            buckets, ranges = bk.get(best.buckets, best.rare_share)
            for mode in MODES:
                step = GpuStep(bk.part, params, b, comm, mode, buckets, config=best, ranges=ranges, split=plain[1],
                               form=plain[0], world=world)
                t = time_step(step, repeats)
                result["rows"].append(t.row("step", variant(mode, world), b, phase="step", gpus=world, rank=rank,
                                            **_work(batch)))
                if mode != "compute only":
                    s = cupy.cuda.Stream(non_blocking=True)
                    with s:
                        t = benchmark(step, repeats=repeats, rel_ci=None, stream=s)
                    result["rows"].append(t.row("step", variant(mode + " eager", world), b, phase="step",
                                                gpus=world, rank=rank, **_work(batch)))
                if b in timeline_batches and mode != "compute only":
                    result["timeline"] += _timeline(step, rank, b, mode)
                del step
            # The computation alone in every form of the plain step (no NCCL call: each GPU on its
            # own): whether a form's cost on two GPUs comes with the all-reduce or without it.
            for form, split in PLAIN_FORMS:
                if split in PEER_SPLITS:      # computation alone: the same kernels as the forms without the peer
                    continue
                step = GpuStep(bk.part, params, b, None, "compute only", buckets, config=best, ranges=ranges,
                               split=split, form=form, world=world)
                t = time_step(step, repeats)
                result["rows"].append(t.row("compute forms", f"{world} GPUs, compute only, {PLAIN_FORMS[(form, split)]}",
                                            b, phase="step", gpus=world, rank=rank, form=form, **_work(batch)))
                del step
            cupy.get_default_memory_pool().free_all_blocks()
            if rank == 0:
                got = [r for r in result["rows"] if r["size"] == b and r["experiment"] == "step"]
                log(f"B={b:6d} [{best.label}; plain: {PLAIN_FORMS[plain]}] " + ", ".join(f"{r['variant']} {r['median_ms']:.4f}" for r in got)
                    + f" ({time.perf_counter() - start:.0f} s)")
        result["rows"] += _allreduce_curve(rank, world, comm, sizes, repeats, log)
        dist.destroy_process_group()
        out.write_text(json.dumps(result, default=lambda v: v.item() if hasattr(v, "item") else str(v)))
    except BaseException as exc:     # noqa: BLE001 -- reported to the parent, which raises
        Path(tmp, f"rank{rank}.error").write_text(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        raise


#: Repeats of each configuration in the sweep (its fastest is timed again, with the run's repeats).
SWEEP_REPEATS = 10


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_workers(corpus: data.Corpus, params: dict, batches, sizes, repeats: int, world: int,
                timeline_batches=(), env: dict | None = None, sweep_only: bool = False, every_batch=None) -> dict:
    """Start ``world`` processes, one per GPU, run :func:`_worker` in each and
    return {"rows": rank 0's rows, "checks", "digests" (every rank's),
    "timeline" (every rank's), "choices" (the bucketed configuration kept at
    each batch)}. ``env``: NCCL settings for the workers (set before NCCL
    loads). ``sweep_only``: only :data:`NCCL_SWEEP` and the plain step's forms,
    at each of ``batches`` (the record's NCCL-settings sweep). ``every_batch``:
    the run's batches, where this call times only some of them (the batches
    are timed in groups, each under the NCCL settings chosen for it): where
    the one-GPU pieces and the bucket pieces are timed."""
    import multiprocessing as mp
    nccl_env()
    uid = nccl().get_unique_id()
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(world)
    with tempfile.TemporaryDirectory() as tmp:
        part = corpus.rows(0, max(batches))
        np.savez(Path(tmp, "corpus.npz"), indptr=part.indptr, indices=part.indices, counts=part.counts,
                 labels=part.labels, vocab=part.vocab, **params)
        port = _free_port()
        procs = [ctx.Process(target=_worker, args=(r, world, uid, port, tmp, tuple(batches), tuple(sizes), repeats,
                                                   barrier, tuple(timeline_batches), dict(env or {}), sweep_only,
                                                   tuple(every_batch or batches)))
                 for r in range(world)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + WAIT_S
        while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
            if any(Path(tmp, f"rank{r}.error").exists() for r in range(world)):
                time.sleep(5)          # let the failing rank finish writing; the others may be stuck in NCCL
                break
            time.sleep(0.5)
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join(10)
        errors = [Path(tmp, f"rank{r}.error").read_text() for r in range(world) if Path(tmp, f"rank{r}.error").exists()]
        if errors:
            raise GpulabError("a worker failed:\n" + "\n".join(errors))
        missing = [r for r in range(world) if not Path(tmp, f"rank{r}.json").exists()]
        if missing:
            raise GpulabError(f"workers {missing} ended without results (exit codes "
                              f"{[p.exitcode for p in procs]}; time limit {WAIT_S} s)")
        results = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]
    merged = {"rows": results[0]["rows"], "checks": results[0]["checks"], "choices": results[0]["choices"],
              "digests": [d for r in results for d in r["digests"]],
              "timeline": [t for r in results for t in r["timeline"]]}
    # The ranks' copies after the all-reduce and after CHECK_STEPS steps: bit for bit the same.
    by = {}
    for d in merged["digests"]:
        by.setdefault((d["batch"], d["variant"]), []).append(d)
    for (b, mode), ds in sorted(by.items()):
        for what, label in (("gradient", f"all {world} GPUs hold the same summed gradient"),
                            ("parameters", f"parameters bit-identical on all {world} GPUs after {CHECK_STEPS} steps")):
            same = len({d[what] for d in ds}) == 1 and len(ds) == world
            merged["checks"].append({"batch": b, "variant": mode, "quantity": label,
                                     "rel_error": 0.0 if same else float("inf"), "tolerance": 0.0, "passed": same})
    return merged
