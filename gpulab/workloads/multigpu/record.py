"""The recorded run: what ``python -m gpulab record multigpu`` measures on a machine with two GPUs.

One process drives both GPUs through CuPy; the all-reduce is NCCL's
(``cupy.cuda.nccl``: a communicator per GPU from ``ncclCommInitAll``, the two
calls of each collective inside ``groupStart``/``groupEnd``). Each replica runs
the training chapter's step-9 kernels (see :mod:`.replicas`).

Experiments (the ``experiment`` column):

* ``step``: time per SGD step against the global batch B = 1,024 ... 65,536:
  one GPU (the training chapter's step 9, eager, and step 10, its CUDA graph;
  and the gradient-then-update form the replicas use, without an all-reduce),
  two GPUs with one all-reduce of the whole gradient after the backward pass
  ("2 GPUs, one all-reduce"), with the bucketed all-reduce on a second stream
  overlapping the backward pass ("2 GPUs, bucketed, overlapped"), and with no
  all-reduce at all ("2 GPUs, compute only": the replicas drift apart, a
  timing of the computation alone, never a training step);
* ``allreduce``: NCCL's all-reduce alone, 1 KiB to 256 MiB and the gradient's
  own size, on both GPUs at once;
* ``ddp``: PyTorch DistributedDataParallel on the same model (a sparse first
  layer, ``F.embedding_bag`` with per-sample weights, dense gradients), two
  processes (:mod:`.ddp`), same batches.

On the lab's device machines: the kind ``nvidia-h200-x2``, command
``python -m gpulab record multigpu --out $OUT/runs`` (a few minutes; NCCL_NVLS_ENABLE=0
stays set, and the record sets it again), then copy the returned ``runs/<gpu>/multigpu.*``
files into ``labdata/runs/<gpu>/``. ``--quick`` records batches 1,024 and 65,536 only
(a smoke test, not for committing).

Side tables: ``checks`` (every variant against the float64 reference and the
one-GPU step; the two replicas' parameters compared bit for bit), ``topology``
(what NCCL and CUDA say links the GPUs). Every variant is checked before it is
timed.
"""
from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

import numpy as np

from ...check import compare
from ...device import gpu_count
from ...errors import CheckFailed, GpulabError
from ..training import data, reference
from ..training.reference import LEARNING_RATE, PARAMS
from .replicas import Layout, Replica, split_batch

BATCHES = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
QUICK_BATCHES = (1024, 65536)
ALLREDUCE_BYTES = tuple(2 ** k for k in range(10, 29, 2))          # 1 KiB .. 256 MiB
BUCKETS = 4
CHECK_STEPS = 3
#: The two GPUs' summed gradient against one GPU's on the whole batch (relative,
#: whole gradient): the same float32 sums in another order.
GRADIENT_TOLERANCE = 1e-5
TIMING_BUDGET_MS = 1500.0
#: The documents the run samples (more than the training set: B goes to 65,536).
DOCS = max(BATCHES)
GPUS = 2


class NeedsTwoGpus(GpulabError):
    """The chapter's benchmarks need two GPUs."""


def require_gpus(n: int = GPUS) -> None:
    found = gpu_count()
    if found < n:
        raise NeedsTwoGpus(f"the multigpu chapter's run needs {n} GPUs, found {found}. Record it on a machine "
                           f"with two GPUs: python -m gpulab record multigpu")


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


class Nccl:
    """One communicator per GPU, in this one process."""

    def __init__(self, devices=(0, 1)):
        self.lib = nccl()
        self.devices = tuple(devices)
        self.comms = self.lib.NcclCommunicator.initAll(list(self.devices))

    def allreduce(self, buffers, lo: int, hi: int, streams) -> None:
        """Sum ``buffers[d][lo:hi]`` (float32) over the GPUs, in place, each
        GPU's call on ``streams[d]`` (grouped, as one process must)."""
        import cupy
        lib = self.lib
        lib.groupStart()
        try:
            for dev, comm, buf, stream in zip(self.devices, self.comms, buffers, streams):
                with cupy.cuda.Device(dev):
                    ptr = buf[lo:hi].data.ptr
                    comm.allReduce(ptr, ptr, hi - lo, lib.NCCL_FLOAT32, lib.NCCL_SUM, stream.ptr)
        finally:
            lib.groupEnd()


class TwoGpus:
    """A data-parallel SGD step on two GPUs: ``step()`` runs one.

    ``mode``: ``"plain"`` (the whole gradient, then one all-reduce on the
    compute stream), ``"bucketed"`` (bucket k's all-reduce and update on a
    second stream while bucket k+1 is computed), ``"compute only"`` (no
    all-reduce: timing of the computation alone).

    Each step forks from, and joins back to, device 0's current stream with
    events, so CUDA events on that stream time the whole two-GPU step."""

    def __init__(self, batch: data.Corpus, params: dict, comm: Nccl, mode: str = "plain",
                 lr: float = LEARNING_RATE, buckets: int = BUCKETS):
        import cupy
        if mode not in ("plain", "bucketed", "compute only"):
            raise ValueError(f"mode must be 'plain', 'bucketed' or 'compute only', got {mode!r}")
        self.mode, self.comm = mode, comm
        parts = split_batch(batch, len(comm.devices))
        self.replicas, self.compute, self.side, self.ready, self.done = [], [], [], [], []
        for dev, part in zip(comm.devices, parts):
            with cupy.cuda.Device(dev):
                self.replicas.append(Replica(part, params, batch.docs, "gpu", lr, buckets))
                self.compute.append(cupy.cuda.Stream(non_blocking=True))
                self.side.append(cupy.cuda.Stream(non_blocking=True))
                self.ready.append([cupy.cuda.Event(disable_timing=True) for _ in range(buckets + 1)])
                self.done.append((cupy.cuda.Event(disable_timing=True), cupy.cuda.Event(disable_timing=True)))
        with cupy.cuda.Device(comm.devices[0]):
            self.fork = cupy.cuda.Event(disable_timing=True)
        self.grads = [r.grad for r in self.replicas]

    def step(self) -> None:
        import cupy
        devs, reps = self.comm.devices, self.replicas
        with cupy.cuda.Device(devs[0]):
            main = cupy.cuda.get_current_stream()
            self.fork.record(main)
        for dev, r, s in zip(devs, reps, self.compute):
            with cupy.cuda.Device(dev), s:
                s.wait_event(self.fork)
                r.forward_backward()
        if self.mode == "bucketed":
            buckets = reps[0].buckets
            for k, bucket in enumerate(buckets):
                for dev, r, s, side, ready in zip(devs, reps, self.compute, self.side, self.ready):
                    with cupy.cuda.Device(dev), s:
                        r.backward_bucket(k)
                        ready[k].record(s)
                        side.wait_event(ready[k])
                self.comm.allreduce(self.grads, bucket.start, bucket.stop, self.side)
                for dev, r, side in zip(devs, reps, self.side):
                    with cupy.cuda.Device(dev), side:
                        r.update(bucket)()
            for dev, s, side, (side_done, _) in zip(devs, self.compute, self.side, self.done):
                with cupy.cuda.Device(dev):
                    side_done.record(side)
                    s.wait_event(side_done)
        else:
            whole = reps[0].layout.whole()
            for dev, r, s in zip(devs, reps, self.compute):
                with cupy.cuda.Device(dev), s:
                    r.backward_plain()
            if self.mode == "plain":
                self.comm.allreduce(self.grads, whole.start, whole.stop, self.compute)
            for dev, r, s in zip(devs, reps, self.compute):
                with cupy.cuda.Device(dev), s:
                    r.update(whole)()
        with cupy.cuda.Device(devs[0]):
            for dev, s, (_, finished) in zip(devs, self.compute, self.done):
                with cupy.cuda.Device(dev):
                    finished.record(s)
                main.wait_event(finished)

    __call__ = step

    def params(self, device_index: int) -> dict:
        import cupy
        with cupy.cuda.Device(self.comm.devices[device_index]):
            return self.replicas[device_index].params()

    def identical(self) -> bool:
        import cupy
        flats = []
        for dev, r in zip(self.comm.devices, self.replicas):
            with cupy.cuda.Device(dev):
                flats.append(cupy.asnumpy(r.flat))
        return all(np.array_equal(flats[0].view(np.uint32), f.view(np.uint32)) for f in flats[1:])


class OneGpuReplica:
    """One GPU, the replicas' form of the step (gradient, then update), no all-reduce."""

    def __init__(self, batch: data.Corpus, params: dict, lr: float = LEARNING_RATE):
        self.replica = Replica(batch, params, batch.docs, "gpu", lr)
        self.whole = self.replica.layout.whole()

    def __call__(self):
        r = self.replica
        r.forward_backward()
        r.backward_plain()
        r.update(self.whole)()


def _synchronize_all(devices=(0, 1)) -> None:
    import cupy
    for dev in devices:
        with cupy.cuda.Device(dev):
            cupy.cuda.Device(dev).synchronize()


def check_variants(batch: data.Corpus, params: dict, comm: Nccl, with_reference: bool) -> list[dict]:
    """Each two-GPU mode, one step from ``params``: the summed gradient both
    GPUs hold after the all-reduce against the one-GPU gradient on the whole
    batch (and, with ``with_reference``, against float64 NumPy); then
    CHECK_STEPS steps, after which the two GPUs' parameters must be equal bit
    for bit."""
    import cupy
    rows = []
    with cupy.cuda.Device(comm.devices[0]):
        one = OneGpuReplica(batch, params)
        one()
        cupy.cuda.Device(comm.devices[0]).synchronize()
        g_one = cupy.asnumpy(one.replica.grad).astype(np.float64)
        layout = one.replica.layout
        del one
    ref = None
    if with_reference:
        p64 = {k: v.astype(np.float64) for k, v in params.items()}
        grads = reference.backward(batch, batch.labels, p64, reference.forward(batch, p64))
        ref = {k: grads["d" + k] for k in PARAMS}
    for mode in ("plain", "bucketed"):
        two = TwoGpus(batch, params, comm, mode)
        with cupy.cuda.Device(comm.devices[0]):
            two()
        _synchronize_all(comm.devices)
        summed = [cupy.asnumpy(g).astype(np.float64) for g in two.grads]
        err = float(np.linalg.norm(summed[0] - g_one) / np.linalg.norm(g_one))
        rows.append({"batch": batch.docs, "variant": mode, "quantity": "summed gradient vs 1-GPU gradient",
                     "rel_error": err, "tolerance": GRADIENT_TOLERANCE, "passed": err <= GRADIENT_TOLERANCE})
        same_grad = np.array_equal(summed[0], summed[1])
        rows.append({"batch": batch.docs, "variant": mode, "quantity": "both GPUs hold the same summed gradient",
                     "rel_error": 0.0 if same_grad else float("inf"), "tolerance": 0.0, "passed": same_grad})
        if ref is not None:
            views = layout.views(summed[0])
            for k in PARAMS:
                r = compare(views[k], ref[k], "fp32", name=f"{mode}: gradient of {k}")
                rows.append({"batch": batch.docs, "variant": mode, "quantity": f"gradient of {k} vs float64",
                             "rel_error": r.rel_error, "tolerance": r.tolerance, "passed": r.passed})
        with cupy.cuda.Device(comm.devices[0]):
            for _ in range(CHECK_STEPS - 1):
                two()
        _synchronize_all(comm.devices)
        same = two.identical()
        rows.append({"batch": batch.docs, "variant": mode,
                     "quantity": f"parameters bit-identical after {CHECK_STEPS} steps",
                     "rel_error": 0.0 if same else float("inf"), "tolerance": 0.0, "passed": same})
        del two
    failed = [r for r in rows if not r["passed"]]
    if failed:
        raise CheckFailed(f"two-GPU step at B = {batch.docs} failed its checks: {failed}")
    return rows


def _work(batch: data.Corpus) -> dict:
    from ..training.record import bytes_per_step, flops_per_step
    from ..training.steps import Dims
    d = Dims(batch.docs, batch.vocab)
    return {"flops": flops_per_step(d, batch.nnz), "bytes": bytes_per_step(d, batch.nnz)}


def time_steps(corpus: data.Corpus, params: dict, comm: Nccl, batches, repeats: int, log=print) -> list[dict]:
    import cupy
    from ...timing import benchmark, graph_benchmark
    from ..training.steps import BoundStep, Config, Dims, buffers, step
    rows = []
    for b in batches:
        batch = corpus.rows(0, b)
        work = _work(batch)
        with cupy.cuda.Device(0):
            d = Dims(b, batch.vocab)
            s9 = step(9)
            bound = BoundStep(s9, d, buffers(cupy_backend(), s9, d, batch, params), Config(), "gpu")
            t = benchmark(bound, repeats=repeats, budget_ms=TIMING_BUDGET_MS)
            rows.append(t.row("step", "1 GPU, step 9", b, phase="step", gpus=1, **work))
            t = graph_benchmark(bound, launches=10, repeats=max(20, repeats // 2), budget_ms=TIMING_BUDGET_MS)
            rows.append(t.row("step", "1 GPU, step 10 (CUDA graph)", b, phase="step", gpus=1, **work))
            t = benchmark(OneGpuReplica(batch, params), repeats=repeats, budget_ms=TIMING_BUDGET_MS)
            rows.append(t.row("step", "1 GPU, gradient then update", b, phase="step", gpus=1, **work))
            for mode, label in (("plain", "2 GPUs, one all-reduce"), ("bucketed", "2 GPUs, bucketed, overlapped"),
                                ("compute only", "2 GPUs, compute only")):
                two = TwoGpus(batch, params, comm, mode)
                t = benchmark(two, repeats=repeats, budget_ms=TIMING_BUDGET_MS)
                rows.append(t.row("step", label, b, phase="step", gpus=2, **work))
                del two
        log(f"B={b:6d} " + ", ".join(f"{r['variant']} {r['median_ms']:.4f} ms" for r in rows[-6:]), flush=True)
    return rows


def cupy_backend():
    from ...kernels import get_backend
    return get_backend("gpu")


def time_allreduce(comm: Nccl, repeats: int, sizes=ALLREDUCE_BYTES, log=print) -> list[dict]:
    """NCCL's all-reduce alone, both GPUs, timed on device 0's stream around
    both calls (device 1's stream forked from and joined to it)."""
    import cupy
    from ...timing import benchmark
    grad_bytes = 4 * Layout(data.VOCAB).size
    rows = []
    for nbytes in sorted(set(sizes) | {grad_bytes}):
        n = nbytes // 4
        bufs, streams, fork, join = [], [], None, []
        for dev in comm.devices:
            with cupy.cuda.Device(dev):
                bufs.append(cupy.ones(n, cupy.float32))
                streams.append(cupy.cuda.get_current_stream())
                join.append(cupy.cuda.Event(disable_timing=True))
        with cupy.cuda.Device(comm.devices[0]):
            fork = cupy.cuda.Event(disable_timing=True)

        def run():
            fork.record(streams[0])
            for dev, s in zip(comm.devices[1:], streams[1:]):
                with cupy.cuda.Device(dev):
                    s.wait_event(fork)
            comm.allreduce(bufs, 0, n, streams)
            for dev, s, e in zip(comm.devices[1:], streams[1:], join[1:]):
                with cupy.cuda.Device(dev):
                    e.record(s)
                streams[0].wait_event(e)
        comm.allreduce(bufs, 0, n, streams)
        _synchronize_all(comm.devices)
        got = [float(cupy.asnumpy(b[-1:])[0]) for b in bufs]
        if got != [2.0, 2.0]:
            raise CheckFailed(f"NCCL all-reduce of ones over 2 GPUs gave {got}, expected [2.0, 2.0]")
        for dev, b in zip(comm.devices, bufs):
            with cupy.cuda.Device(dev):
                b.fill(0)            # timed on zeros: repeated sums of ones would overflow to inf
        _synchronize_all(comm.devices)
        with cupy.cuda.Device(comm.devices[0]):
            t = benchmark(run, repeats=repeats, budget_ms=TIMING_BUDGET_MS)
        rows.append(t.row("allreduce", "NCCL all-reduce (CuPy, one process)", nbytes, phase="allreduce",
                          bytes=float(nbytes), gpus=2, gradient=nbytes == grad_bytes))
        log(f"all-reduce {nbytes:>11d} B: {t.median_ms * 1e3:9.1f} us", flush=True)
        del bufs
    return rows


def topology() -> list[dict]:
    """How CUDA says the GPUs are linked (peer access, NVLink-or-not is in NCCL's log)."""
    import cupy
    rt = cupy.cuda.runtime
    rows = []
    for a in range(2):
        for b in range(2):
            if a != b:
                rows.append({"from": a, "to": b, "peer_access": bool(rt.deviceCanAccessPeer(a, b)),
                             "name": rt.getDeviceProperties(a)["name"].decode()})
    return rows


def benchmark_all(repeats: int = 100, quick: bool = False, deadline_s: float | None = None, log=print):
    """Every experiment on two GPUs: (rows, side tables)."""
    require_gpus(GPUS)
    os.environ["NCCL_NVLS_ENABLE"] = "0"      # NVLink multicast stays off (see the lab's device notes)
    start = time.perf_counter()
    batches = QUICK_BATCHES if quick else BATCHES
    corpus = data.sample(max(batches), data.VOCAB, stream=400)
    params = reference.init_params()
    comm = Nccl((0, 1))
    checks = []
    for b in batches:
        checks += check_variants(corpus.rows(0, b), params, comm, with_reference=b == batches[0])
    log(f"checks passed ({len(checks)} rows) in {time.perf_counter() - start:.0f} s", flush=True)
    rows = time_allreduce(comm, repeats)
    rows += time_steps(corpus, params, comm, batches, repeats, log)
    problems = []
    if deadline_s is not None and time.perf_counter() - start >= deadline_s:
        problems.append({"experiment": "ddp", "problem": f"left out: the deadline of {deadline_s:g} s was reached"})
    else:
        # The baseline runs in other processes: if it fails, the lab's own measurements are kept
        # and the run says why the baseline is missing (the notebook shows the problems table).
        from .ddp import time_ddp
        try:
            ddp_rows, ddp_checks = time_ddp(corpus, params, batches, repeats=min(repeats, 30))
            rows += ddp_rows
            checks += ddp_checks
        except Exception as exc:       # noqa: BLE001 -- recorded, not hidden
            problems.append({"experiment": "ddp", "problem": f"{type(exc).__name__}: {exc}"[:2000]})
            log(f"PyTorch DDP failed: {problems[-1]['problem']}", flush=True)
    tables = {"checks": checks, "topology": topology()}
    if problems:
        tables["problems"] = problems
    return rows, tables
