"""The recorded run: what ``python -m gpulab record multigpu`` measures on a machine with several GPUs.

The number of GPUs is the machine's (``p``, at least 2 for the record). The
lab's steps run one process per GPU (:mod:`.workers`): each process binds its
GPU, joins an NCCL communicator (CuPy's bindings) and runs its replica;
every multi-GPU step is captured whole, NCCL calls included, in a CUDA graph.

Experiments (the ``experiment`` column):

* ``step``: time per SGD step against the global batch B = 1,024 ... 65,536:
  one GPU (the training chapter's step 9, eager, and step 10, its CUDA graph;
  and the gradient-then-update form the replicas use, whole and split, in a
  graph), ``p`` GPUs
  with one all-reduce of the whole gradient after the backward pass (in a
  graph, and eager), with the bucketed all-reduce overlapping the backward
  pass, and with no all-reduce at all ("compute only": the replicas drift
  apart, a timing of the computation alone, never a training step);
* ``pieces``: the one-GPU kernels alone at the largest batch and at one GPU's
  share of it (where a replica's time goes);
* ``compute forms``: the two-GPU step's computation alone (no all-reduce) in
  every form of the plain step, at every batch;
* ``bucket pieces``: at B = 1,024 and 8,192, one GPU's share of the batch:
  the forward pass, W1's whole scatter and each bucket's scatter (cut at equal
  work, and with the rare-word bucket holding a quarter), each alone: what
  the overlap can hide (:func:`.workers.bucket_pieces`);
* ``overlap``: at every batch, the plain step in its two forms and the
  bucketed step in every launch configuration of ``workers.OVERLAPS``, each
  checked and timed (``slowest_rank_ms``: the slower GPU's median); the
  fastest of each is what the ``step`` rows time again;
* ``nccl settings``: the same sweep at the largest batch under each of
  ``workers.NCCL_SETTINGS``, each in fresh processes; the run keeps the
  setting with the fastest two-GPU step;
* ``allreduce``: the all-reduce alone, 1 KiB to 256 MiB and the gradient's own
  size: the lab's (one process per GPU, eager and in a CUDA graph),
  torch.distributed's (the same processes), and one process driving every
  GPU through ``ncclCommInitAll`` (the first version of this chapter);
* ``ddp``: PyTorch DistributedDataParallel on the same model, one process per
  GPU (:mod:`.ddp`), same batches.

On the lab's device machines: the kind ``nvidia-h100-x2``, command
``python -m gpulab record multigpu --out $OUT/runs`` (a few minutes; NCCL_NVLS_ENABLE=0
stays set in every process), then copy the returned ``runs/<gpu>/multigpu.*``
files into ``labdata/runs/<gpu>/``. ``--quick`` records batches 1,024 and 65,536 only
(a smoke test, not for committing).

Side tables: ``checks`` (every variant against the float64 reference and the
one-GPU gradient; every GPU's copy compared bit for bit), ``choices`` (per
batch, the configuration and plain form kept, and the NCCL settings), ``timeline`` (one
eager step of each mode, every operation's start and end on each GPU's
streams), ``topology`` (what CUDA says links the GPUs). Every variant is
checked before it is timed.
"""
from __future__ import annotations

import ctypes
import time
from pathlib import Path

from ...device import gpu_count
from ...errors import CheckFailed, GpulabError
from ..training import data, reference
from .replicas import Layout

BATCHES = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
QUICK_BATCHES = (1024, 65536)
ALLREDUCE_BYTES = tuple(2 ** k for k in range(10, 29, 2))          # 1 KiB .. 256 MiB
CHECK_STEPS = 3
#: The two GPUs' summed gradient against one GPU's on the whole batch (relative,
#: whole gradient): the same float32 sums in another order.
GRADIENT_TOLERANCE = 1e-5
#: The same for the parameter-averaging form, whose gradient is read back as (W before -
#: W after) / lr: each of a row's atomic adds into W1 rounds at W's float32 spacing, not the
#: gradient's (step 9 on one GPU carries the same rounding).
UPDATE_TOLERANCE = 1e-4
TIMING_BUDGET_MS = 1500.0
#: The documents the run samples (more than the training set: B goes to 65,536).
DOCS = max(BATCHES)
#: The fewest GPUs the record needs; it uses every GPU the machine has.
GPUS = 2
#: The batches whose eager steps are traced operation by operation (the timeline side table).
TIMELINE_BATCHES = (1024, 65536)


class NeedsTwoGpus(GpulabError):
    """The chapter's benchmarks need at least two GPUs."""


def require_gpus(n: int = GPUS) -> int:
    """The machine's GPU count, or a clear error if it has fewer than ``n``."""
    found = gpu_count()
    if found < n:
        raise NeedsTwoGpus(f"the multigpu chapter's run needs {n} GPUs, found {found}. Record it on a machine "
                           f"with two GPUs or more: python -m gpulab record multigpu")
    return found


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
    """One communicator per GPU, all in this one process (``ncclCommInitAll``):
    the chapter's first version, kept to measure what one process driving
    every GPU costs against one process per GPU (:mod:`.workers`)."""

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


def _synchronize_all(devices=(0, 1)) -> None:
    import cupy
    for dev in devices:
        with cupy.cuda.Device(dev):
            cupy.cuda.Device(dev).synchronize()


def _work(batch: data.Corpus) -> dict:
    from ..training.record import bytes_per_step, flops_per_step
    from ..training.steps import Dims
    d = Dims(batch.docs, batch.vocab)
    return {"flops": flops_per_step(d, batch.nnz), "bytes": bytes_per_step(d, batch.nnz)}


ONE_PROCESS = "NCCL all-reduce, lab (CuPy), 1 process driving all GPUs"


def allreduce_sizes() -> list[int]:
    """The curve's sizes: powers of 4 from 1 KiB to 256 MiB, and the gradient's own size."""
    return sorted(set(ALLREDUCE_BYTES) | {4 * Layout(data.VOCAB).size})


def time_allreduce(comm: Nccl, repeats: int, sizes=None, log=print) -> list[dict]:
    """NCCL's all-reduce alone, both GPUs, timed on device 0's stream around
    both calls (device 1's stream forked from and joined to it)."""
    import cupy
    from ...timing import benchmark
    rows = []
    for nbytes in sizes or allreduce_sizes():
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
        if got != [float(len(bufs))] * len(bufs):
            raise CheckFailed(f"NCCL all-reduce of ones over {len(bufs)} GPUs gave {got}, expected {len(bufs)} each")
        for dev, b in zip(comm.devices, bufs):
            with cupy.cuda.Device(dev):
                b.fill(0)            # timed on zeros: repeated sums of ones would overflow to inf
        _synchronize_all(comm.devices)
        with cupy.cuda.Device(comm.devices[0]):
            t = benchmark(run, repeats=repeats, budget_ms=TIMING_BUDGET_MS)
        rows.append(t.row("allreduce", ONE_PROCESS, nbytes, phase="allreduce",
                          bytes=float(nbytes), gpus=len(comm.devices)))
        log(f"all-reduce, one process {nbytes:>11d} B: {t.median_ms * 1e3:9.1f} us", flush=True)
        del bufs
    return rows


def topology() -> list[dict]:
    """How CUDA says the GPUs are linked (peer access, NVLink-or-not is in NCCL's log)."""
    import cupy
    rt = cupy.cuda.runtime
    rows = []
    n = gpu_count()
    for a in range(n):
        for b in range(n):
            if a != b:
                rows.append({"from": a, "to": b, "peer_access": bool(rt.deviceCanAccessPeer(a, b)),
                             "name": rt.getDeviceProperties(a)["name"].decode()})
    return rows


def benchmark_all(repeats: int = 30, quick: bool = False, deadline_s: float | None = None, log=print):
    """Every experiment on all the machine's GPUs (at least two): (rows, side tables)."""
    from .workers import NCCL_SETTINGS, nccl_env, nccl_label, run_workers
    world = require_gpus(GPUS)
    nccl_env()
    start = time.perf_counter()
    batches = QUICK_BATCHES if quick else BATCHES
    corpus = data.sample(max(batches), data.VOCAB, stream=400)
    params = reference.init_params()
    repeats = max(5, min(repeats, 30))
    # One process driving every GPU: measured first, then its communicators destroyed.
    comm = Nccl(tuple(range(world)))
    rows = time_allreduce(comm, repeats, log=log)
    for c in comm.comms:
        c.destroy()
    del comm
    # NCCL's settings are read once per process: each is tried in a fresh pair of processes, at the
    # largest batch, and the run keeps the one with the fastest two-GPU step there.
    checks, swept = [], []
    for env in NCCL_SETTINGS:
        got = run_workers(corpus, params, (max(batches),), (), repeats, world, env=env, sweep_only=True)
        rows += got["rows"]
        checks += got["checks"]
        best = min(r.get("slowest_rank_ms", r["median_ms"]) for r in got["rows"]
                   if r["experiment"] == "nccl settings" and r.get("overlapped", 1))
        swept.append((best, env))
    env = min(swept, key=lambda t: t[0])[1]
    log(f"NCCL settings kept: {nccl_label(env)}", flush=True)
    got = run_workers(corpus, params, batches, allreduce_sizes(), repeats, world,
                      timeline_batches=[b for b in TIMELINE_BATCHES if b in batches], env=env)
    rows += got["rows"]
    checks += got["checks"]
    failed = [c for c in checks if not c["passed"]]
    if failed:
        raise CheckFailed(f"the multi-GPU steps failed their checks: {failed}")
    log(f"{world} workers done in {time.perf_counter() - start:.0f} s ({len(checks)} checks passed)", flush=True)
    problems = []
    if deadline_s is not None and time.perf_counter() - start >= deadline_s:
        problems.append({"experiment": "ddp", "problem": f"left out: the deadline of {deadline_s:g} s was reached"})
    else:
        # The baseline runs in other processes: if it fails, the lab's own measurements are kept
        # and the run says why the baseline is missing (the notebook shows the problems table).
        from .ddp import time_ddp
        try:
            ddp_rows, ddp_checks = time_ddp(corpus, params, batches, repeats=repeats, world=world)
            rows += ddp_rows
            checks += ddp_checks
        except Exception as exc:       # noqa: BLE001 -- recorded, not hidden
            problems.append({"experiment": "ddp", "problem": f"{type(exc).__name__}: {exc}"[:2000]})
            log(f"PyTorch DDP failed: {problems[-1]['problem']}", flush=True)
    # None (one block per document; equal work) as numbers: 0 blocks per SM, and the share itself.
    choices = [{**c, "blocks_per_sm": c["blocks_per_sm"] or 0, "rare_share": c["rare_share"] or 1 / c["buckets"]}
               for c in got["choices"]]
    tables = {"checks": checks, "topology": topology(), "timeline": got["timeline"], "choices": choices}
    if problems:
        tables["problems"] = problems
    return rows, tables
