"""One rank's data-parallel step on its GPU: :class:`GpuStep` (the replica's kernels on a compute
stream, the all-reduces on a communication stream, the updates on a third, forked from and joined
back to the caller's stream with events, so the step can be timed there and captured whole, NCCL
calls included, into one CUDA graph), :class:`PeerLink` (two processes sharing their gradients
through CUDA IPC for the peer update, ``kernels/multigpu/06_peer_update.cu``), NCCL itself
(:func:`nccl`) and the step's timer (:func:`time_step`).
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np

from ...errors import GpulabError
from ..training import data
from ..training.reference import LEARNING_RATE
from .configs import MODES, PEER_OP, PEER_SLOTS, PEER_SPLITS, Overlap
from .replicas import PEER_MAX_BLOCKS, Bucket, Replica

STEP_LAUNCHES = 10           # steps per CUDA graph in the step timings
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


def _stream(priority: int):
    import cupy
    try:
        return cupy.cuda.Stream(non_blocking=True, priority=priority)
    except TypeError:            # a CuPy without stream priorities: the default one
        return cupy.cuda.Stream(non_blocking=True)
