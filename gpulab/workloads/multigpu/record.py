"""The recorded run: what ``python -m gpulab record multigpu`` measures on a machine with several GPUs,
as a :class:`gpulab.recorder.Recording` (:data:`benchmark_all`; its experiments ``one process``, ``nccl
settings``, ``two GPUs`` and ``ddp``, in that order; DDP is left out once the run's budget is spent).

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
* ``overlap``: at every batch, the plain step in every form (``configs.PLAIN_FORMS``:
  through NCCL, or on two GPUs with the all-reduce fused with the update over
  NVLink) and the bucketed step in every launch configuration of
  ``configs.OVERLAPS``, each checked and timed (``slowest_rank_ms``: the slower GPU's median); the
  fastest of each is what the ``step`` rows time again;
* ``nccl settings``: the fastest kinds of step of the sweep (``configs.NCCL_SWEEP``
  and the plain step's forms) at every batch under each of
  ``configs.NCCL_SETTINGS``, each setting in fresh processes; at each batch
  the run keeps the setting with the fastest two-GPU step through NCCL (the
  peer update, which never calls NCCL, does not choose it), and times that
  batch under it (the batches that share a setting in one pair of processes);
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
streams), ``topology`` (peer access, as CUDA says, and the link ``nvidia-smi topo -m`` names). Every variant is
checked before it is timed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...device import gpu_count
from ...errors import CheckFailed, GpulabError
from ...recorder import Experiment, Recording
from ..training import data, reference
from .ddp import time_ddp
from .problem import NAME
from .replicas import Layout
from .configs import NCCL_SETTINGS, nccl_label
from .gpustep import nccl, nccl_env
from .workers import run_workers

BATCHES = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
QUICK_BATCHES = (1024, 65536)
ALLREDUCE_BYTES = tuple(2 ** k for k in range(10, 29, 2))          # 1 KiB .. 256 MiB
TIMING_BUDGET_MS = 1500.0
#: The documents the run samples (more than the training set: B goes to 65,536).
DOCS = max(BATCHES)
#: The fewest GPUs the record needs; it uses every GPU the machine has.
GPUS = 2
#: The batches whose eager steps are traced operation by operation (the timeline side table).
TIMELINE_BATCHES = (1024, 8192, 65536)


class NeedsTwoGpus(GpulabError):
    """The chapter's benchmarks need at least two GPUs."""


def require_gpus(n: int = GPUS) -> int:
    """The machine's GPU count, or a clear error if it has fewer than ``n``."""
    found = gpu_count()
    if found < n:
        raise NeedsTwoGpus(f"the multigpu chapter's run needs {n} GPUs, found {found}. Record it on a machine "
                           f"with two GPUs or more: python -m gpulab record multigpu")
    return found


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


def topo_links(text: str) -> dict:
    """The GPU-to-GPU entries of ``nvidia-smi topo -m``'s matrix: {(a, b): "NV18", "SYS", "PIX", ...}
    (NV<n>: n NVLink links; the others: paths through PCIe and the host)."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    header = next((t for t in lines if t and t[0].startswith("GPU")), None)
    if header is None:
        return {}
    columns = header[:header.index("CPU")] if "CPU" in header else header
    out = {}
    for row in lines:
        if row is header or not re.fullmatch(r"GPU\d+", row[0]):
            continue
        for column, value in zip(columns, row[1:1 + len(columns)]):
            if re.fullmatch(r"GPU\d+", column) and column != row[0]:
                out[(int(row[0][3:]), int(column[3:]))] = value
    return out


def _nvidia_smi_links() -> tuple[dict, str]:
    """``nvidia-smi topo -m``'s GPU-to-GPU links, or ({}, why not)."""
    import subprocess
    try:
        done = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return {}, f"nvidia-smi topo -m failed: {type(exc).__name__}"
    if done.returncode != 0:
        return {}, f"nvidia-smi topo -m exited {done.returncode}"
    return topo_links(done.stdout), "not in nvidia-smi topo -m's matrix"


def topology() -> list[dict]:
    """How the GPUs are linked: peer access (CUDA) and the link ``nvidia-smi topo -m`` names
    ("NV18": 18 NVLink links)."""
    import cupy
    rt = cupy.cuda.runtime
    links, missing = _nvidia_smi_links()
    rows = []
    n = gpu_count()
    for a in range(n):
        for b in range(n):
            if a != b:
                rows.append({"from": a, "to": b, "peer_access": bool(rt.deviceCanAccessPeer(a, b)),
                             "link": links.get((a, b), missing), "name": rt.getDeviceProperties(a)["name"].decode()})
    return rows


@dataclass
class Planned:
    """What :func:`setup` decided: the machine's GPUs, the batches, the corpus and the weights,
    the repeats (at most 30: each is a step of every GPU), the NCCL settings kept (by the
    ``nccl settings`` experiment) and every check the experiments made."""

    world: int
    batches: tuple
    corpus: data.Corpus
    params: dict
    repeats: int
    env: dict = field(default_factory=dict)
    env_by_batch: dict = field(default_factory=dict)
    checks: list = field(default_factory=list)


def setup(rec) -> Planned:
    """Every GPU of the machine (at least two, else a clear error), NVLink multicast off."""
    world = require_gpus(GPUS)
    nccl_env()
    batches = QUICK_BATCHES if rec.quick else BATCHES
    planned = Planned(world, batches, data.sample(max(batches), data.VOCAB, stream=400), reference.init_params(),
                      max(5, min(rec.repeats, 30)))
    rec.table("checks", planned.checks)          # filled by the experiments, DDP's last
    return planned


def one_process(rec, ctx: Planned) -> None:
    """The all-reduce curve of one process driving every GPU, measured first; its communicators
    are destroyed before the workers start theirs."""
    comm = Nccl(tuple(range(ctx.world)))
    rec.add(time_allreduce(comm, ctx.repeats, log=rec.progress))
    for c in comm.comms:
        c.destroy()


def nccl_settings(rec, ctx: Planned) -> None:
    """NCCL's settings are read once per process: each is tried in a fresh pair of processes, at
    every batch, and the run keeps at each batch the one with the fastest two-GPU step through
    NCCL there (a setting that speeds up the largest batch's 16.8 MB all-reduce beside the scatter
    may slow down the small batches' steps, where the all-reduce is most of the step)."""
    swept = {}
    for env in NCCL_SETTINGS:
        got = run_workers(ctx.corpus, ctx.params, ctx.batches, (), ctx.repeats, ctx.world, env=env, sweep_only=True)
        rec.add(got["rows"])
        ctx.checks += got["checks"]
        for b in ctx.batches:
            # chosen by the steps that use NCCL (the peer update's never calls it)
            best = min(r.get("slowest_rank_ms", r["median_ms"]) for r in got["rows"]
                       if r["experiment"] == "nccl settings" and r["size"] == b and r.get("overlapped", 1)
                       and not r.get("peer", 0))
            swept.setdefault(b, []).append((best, env))
    ctx.env_by_batch = {b: min(v, key=lambda t: t[0])[1] for b, v in swept.items()}
    ctx.env = ctx.env_by_batch[max(ctx.batches)]
    rec.progress("NCCL settings kept: " + "; ".join(f"B={b}: {nccl_label(e)}" for b, e in ctx.env_by_batch.items()))


def two_gpus(rec, ctx: Planned) -> None:
    """The workers' run under the settings kept: the sweep, the steps, the pieces, the timeline and
    the all-reduce curves (see :mod:`.workers`). A run whose checks failed is refused whole."""
    groups = {}                 # the batches under each setting kept, each group in one pair of processes
    for b in ctx.batches:
        env = ctx.env_by_batch.get(b, ctx.env)
        groups.setdefault(nccl_label(env), (env, []))[1].append(b)
    got = {"rows": [], "checks": [], "timeline": [], "choices": []}
    for env, batches in groups.values():
        # the all-reduce curves under the largest batch's setting (the one earlier runs used for every batch)
        part = run_workers(ctx.corpus, ctx.params, tuple(batches),
                           allreduce_sizes() if max(ctx.batches) in batches else (), ctx.repeats, ctx.world,
                           timeline_batches=[b for b in TIMELINE_BATCHES if b in batches], env=env,
                           every_batch=ctx.batches)
        for k in got:
            got[k] += part[k]
    got["choices"].sort(key=lambda c: c["batch"])
    rec.add(got["rows"])
    ctx.checks += got["checks"]
    failed = [c for c in ctx.checks if not c["passed"]]
    if failed:
        raise CheckFailed(f"the multi-GPU steps failed their checks: {failed}")
    rec.progress(f"{ctx.world} workers done ({len(ctx.checks)} checks passed)")
    rec.table("topology", topology())
    rec.table("timeline", got["timeline"])
    # None (one block per document; equal work) as numbers: 0 blocks per SM, and the share itself.
    rec.table("choices", [{**c, "blocks_per_sm": c["blocks_per_sm"] or 0,
                           "rare_share": c["rare_share"] or 1 / c["buckets"]} for c in got["choices"]])


def pytorch_ddp(rec, ctx: Planned) -> None:
    """The baseline, in processes of its own: if it fails, the lab's own measurements are kept
    and the run's problems table says why the baseline is missing (the notebook shows it)."""
    try:
        rows, checks = time_ddp(ctx.corpus, ctx.params, ctx.batches, repeats=ctx.repeats, world=ctx.world)
    except Exception as exc:       # noqa: BLE001 -- recorded, not hidden
        rec.problem("ddp", f"{type(exc).__name__}: {exc}"[:2000])
        rec.progress(f"PyTorch DDP failed: {type(exc).__name__}: {exc}"[:2000])
        return
    rec.add(rows)
    ctx.checks += checks


#: Every experiment of the chapter on all the machine's GPUs (at least two), in order; PyTorch DDP
#: is left out (a row of the problems table) once the run's budget is spent.
benchmark_all = Recording(NAME, [
    Experiment("one process", one_process),
    Experiment("nccl settings", nccl_settings),
    Experiment("two GPUs", two_gpus),
    Experiment("ddp", pytorch_ddp, optional=True),
], setup=setup)
