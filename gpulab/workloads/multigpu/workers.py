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

Every number a rank records comes from the same timer as the rest of the lab
(:func:`gpulab.timing.graph_benchmark` / :func:`~gpulab.timing.benchmark`)
with a *fixed* number of repeats: a stop rule could stop the ranks after
different numbers of collectives and leave one waiting for the other forever.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

from ...errors import CheckFailed, GpulabError
from ..training import data, reference
from ..training.reference import LEARNING_RATE, PARAMS
from .replicas import Layout, Replica, row_work, split_batch

MODES = ("plain", "bucketed", "compute only")
#: Variant names of the recorded rows, for ``p`` GPUs.
def variant(mode: str, p: int) -> str:
    names = {"plain": "one all-reduce", "bucketed": "bucketed, overlapped", "compute only": "compute only",
             "plain eager": "one all-reduce, eager", "bucketed eager": "bucketed, overlapped, eager"}
    return f"{p} GPUs, {names[mode]}"


STEP_LAUNCHES = 10           # steps per CUDA graph in the step timings
ALLREDUCE_LAUNCHES = 10      # all-reduces per CUDA graph in the all-reduce curve
WAIT_S = 420                  # the parent gives up on the workers after this long


def nccl_env() -> None:
    """NVLink multicast (NVLS) stays off on the lab's machines: set before NCCL loads."""
    os.environ["NCCL_NVLS_ENABLE"] = "0"


class GpuStep:
    """This rank's data-parallel SGD step on its GPU (the current CuPy device).

    ``mode``: ``"plain"`` (the whole gradient, then one all-reduce and the
    update, all on the compute stream), ``"bucketed"`` (bucket k's all-reduce
    on the communication stream as soon as its gradient is ready, its update
    on the update stream), ``"compute only"`` (no all-reduce: the
    computation alone; the replicas drift apart, so it is a timing, never a
    training step). ``comm``: an NCCL communicator (``None`` only for
    ``"compute only"``)."""

    def __init__(self, part: data.Corpus, params: dict, global_batch: int, comm, mode: str, buckets: list,
                 lr: float = LEARNING_RATE):
        import cupy
        from .record import nccl
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if comm is None and mode != "compute only":
            raise ValueError(f"mode {mode!r} needs an NCCL communicator")
        self.mode, self.comm = mode, comm
        self.lib = nccl() if comm is not None else None
        self.replica = Replica(part, params, global_batch, "gpu", lr, buckets)
        # The all-reduces and the updates run on the device's highest-priority streams: while the
        # scatter-add's thousands of blocks fill every SM, the block scheduler hands each SM that
        # frees up to NCCL's and the update's blocks first instead of queueing them behind the
        # scatter (measured without priorities: a 16 MB all-reduce took 330 us beside the scatter,
        # 75 us alone). A CUDA graph replays every node at its launch stream's priority, so
        # the graph-captured step has no such preference (the eager step does).
        try:
            least, greatest = cupy.cuda.runtime.deviceGetStreamPriorityRange()
        except AttributeError:
            least = greatest = 0
        self.compute, self.small = _stream(least), _stream(least)
        self.side, self.upd = _stream(greatest), _stream(greatest)
        n = len(self.replica.buckets)
        ev = lambda: cupy.cuda.Event(disable_timing=True)     # noqa: E731
        self.fork, self.ready, self.reduced = ev(), [ev() for _ in range(n)], [ev() for _ in range(n)]
        self.forward_done = ev()
        self.joins = [ev() for _ in range(4)]

    def allreduce(self, lo: int, hi: int, stream) -> None:
        ptr = self.replica.grad[lo:hi].data.ptr
        self.comm.allReduce(ptr, ptr, hi - lo, self.lib.NCCL_FLOAT32, self.lib.NCCL_SUM, stream.ptr)

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
        that receives the summed gradient before the updates zero it (checks)."""
        import cupy
        r, main = self.replica, cupy.cuda.get_current_stream()
        self.fork.record(main)
        for s in (self.compute, self.small, self.side, self.upd):
            s.wait_event(self.fork)
        self._on(self.compute, "compute", "forward + backward to dZ1", r.forward_backward, trace)
        save = None if snapshot is None else (lambda lo, hi: snapshot.__setitem__(slice(lo, hi), r.grad[lo:hi]))
        if self.mode == "bucketed":
            # The small parameters' gradient (bucket 0: H blocks that each sum over every
            # document) runs beside W1's buckets on a stream of its own; its all-reduce goes last.
            self.forward_done.record(self.compute)
            self.small.wait_event(self.forward_done)
            order = list(range(1, len(r.buckets))) + [0]
            for k in order:
                bucket, stream = r.buckets[k], (self.small if k == 0 else self.compute)
                self._on(stream, "compute" if k else "compute (small)", f"gradient: {bucket.name}",
                         lambda k=k: r.backward_bucket(k), trace)
                self.ready[k].record(stream)
                self.side.wait_event(self.ready[k])
                self._on(self.side, "communication", f"all-reduce: {bucket.name}",
                         lambda b=bucket: self.allreduce(b.start, b.stop, self.side), trace)
                self.reduced[k].record(self.side)
                self.upd.wait_event(self.reduced[k])
                if save:
                    with self.upd:
                        save(bucket.start, bucket.stop)
                self._on(self.upd, "update", f"update: {bucket.name}", r.update(bucket), trace)
        else:
            whole = r.layout.whole()
            self._on(self.compute, "compute", "gradient: whole", r.backward_plain, trace)
            if self.mode == "plain":
                self._on(self.compute, "communication", "all-reduce: whole",
                         lambda: self.allreduce(whole.start, whole.stop, self.compute), trace)
            if save:
                with self.compute:
                    save(whole.start, whole.stop)
            self._on(self.compute, "update", "update: whole", r.update(whole), trace)
        for s, e in zip((self.compute, self.small, self.side, self.upd), self.joins):
            e.record(s)
            main.wait_event(e)

    __call__ = step


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


def _checks(rank, world, comm, batch, params, buckets, with_reference, barrier) -> tuple[list, list]:
    """Each mode, one step with the summed gradient saved: rank 0 compares it
    with one GPU's gradient on the whole batch (and float64); every rank
    reports digests of its summed gradient and, after CHECK_STEPS steps, of its
    parameters (the parent compares them across ranks)."""
    import cupy
    from ...check import compare
    from .record import CHECK_STEPS, GRADIENT_TOLERANCE
    rows, digests = [], []
    g_one = _one_gpu_gradient(batch, params) if rank == 0 else None
    part = split_batch(batch, world)[rank]
    for mode in ("plain", "bucketed"):
        step = GpuStep(part, params, batch.docs, comm, mode, buckets)
        snap = cupy.empty_like(step.replica.grad)
        snap.fill(np.nan)
        step(snapshot=snap)
        for _ in range(CHECK_STEPS - 1):
            step()
        cupy.cuda.Device().synchronize()
        digests.append({"batch": batch.docs, "variant": mode, "rank": rank, "gradient": _digest(snap),
                        "parameters": _digest(step.replica.flat)})
        if rank == 0:
            summed = cupy.asnumpy(snap).astype(np.float64)
            err = float(np.linalg.norm(summed - g_one) / np.linalg.norm(g_one)) if np.isfinite(summed).all() \
                else float("inf")
            rows.append({"batch": batch.docs, "variant": mode, "quantity": f"summed gradient ({world} GPUs) vs 1-GPU "
                         "gradient", "rel_error": err, "tolerance": GRADIENT_TOLERANCE,
                         "passed": err <= GRADIENT_TOLERANCE})
            if with_reference:
                p64 = {k: v.astype(np.float64) for k, v in params.items()}
                ref = reference.backward(batch, batch.labels, p64, reference.forward(batch, p64))
                views = step.replica.layout.views(summed)
                for k in PARAMS:
                    c = compare(views[k], ref["d" + k], "fp32", name=f"{mode}: gradient of {k}")
                    rows.append({"batch": batch.docs, "variant": mode, "quantity": f"gradient of {k} vs float64",
                                 "rel_error": c.rel_error, "tolerance": c.tolerance, "passed": bool(c.passed)})
        del step, snap
    barrier.wait()
    return rows, digests


def _allreduce_curve(rank, world, comm, sizes, repeats, log) -> list:
    """The lab's all-reduce (eager and in a CUDA graph) and torch.distributed's,
    one process per GPU, each size timed on this rank's stream."""
    import cupy
    import torch
    import torch.distributed as dist
    from ...timing import benchmark, graph_benchmark
    from .record import nccl
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
    from ..training.steps import BoundStep, Config, Dims, buffers, step
    from .record import _work
    rows, b, work = [], batch.docs, _work(batch)
    d = Dims(b, batch.vocab)
    s9 = step(9)
    bound = BoundStep(s9, d, buffers(get_backend("gpu"), s9, d, batch, params), Config(), "gpu")
    t = benchmark(bound, repeats=repeats, rel_ci=None)
    rows.append(t.row("step", "1 GPU, step 9", b, phase="step", gpus=1, **work))
    t = graph_benchmark(bound, launches=STEP_LAUNCHES, repeats=repeats, rel_ci=None)
    rows.append(t.row("step", "1 GPU, step 10 (CUDA graph)", b, phase="step", gpus=1, **work))
    one = GpuStep(batch, params, b, None, "compute only", Layout(batch.vocab).buckets(1))
    t = graph_benchmark(one, launches=STEP_LAUNCHES, repeats=repeats, rel_ci=None)
    rows.append(t.row("step", "1 GPU, gradient then update (CUDA graph)", b, phase="step", gpus=1, **work))
    if pieces:
        r = one.replica
        for name, fn in (("forward + backward to dZ1", r.forward_backward), ("gradient (scatter-add)", r.gradients),
                         ("update and zero", r.update(r.layout.whole())),
                         ("step 9: sparse_forward_backward", bound.launches[0]),
                         ("step 9: sparse_update (scatter into W1)", bound.launches[-1])):
            t = graph_benchmark(fn, launches=STEP_LAUNCHES, repeats=repeats, rel_ci=None)
            rows.append(t.row("pieces", f"1 GPU: {name}", b, phase="kernel", gpus=1))
    del one, bound
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
            timeline_batches) -> None:
    nccl_env()
    out = Path(tmp, f"rank{rank}.json")
    log = (lambda msg: print(msg, flush=True)) if rank == 0 else (lambda msg: None)
    try:
        import cupy
        import torch
        import torch.distributed as dist
        from .record import nccl
        cupy.cuda.Device(rank).use()
        torch.cuda.set_device(rank)
        lib = nccl()
        comm = lib.NcclCommunicator(world, uid, rank)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        z = np.load(Path(tmp, "corpus.npz"))
        corpus = data.Corpus(z["indptr"], z["indices"], z["counts"], z["labels"], int(z["vocab"]))
        params = {k: z[k] for k in PARAMS}
        result = {"rows": [], "checks": [], "digests": [], "timeline": []}
        start = time.perf_counter()
        for b in batches:
            batch = corpus.rows(0, b)
            buckets = Layout(batch.vocab).buckets(BUCKET_COUNT, row_work(batch))
            rows, digests = _checks(rank, world, comm, batch, params, buckets, b == batches[0], barrier)
            result["checks"] += rows
            result["digests"] += digests
        log(f"checks done in {time.perf_counter() - start:.0f} s")
        result["rows"] += _allreduce_curve(rank, world, comm, sizes, repeats, log)
        from ...timing import benchmark, graph_benchmark
        from .record import _work
        for b in batches:
            batch = corpus.rows(0, b)
            if rank == 0:
                result["rows"] += _one_gpu_rows(batch, params, repeats, pieces=b in (max(batches), max(batches) // world))
            barrier.wait()
            buckets = Layout(batch.vocab).buckets(BUCKET_COUNT, row_work(batch))
            part = split_batch(batch, world)[rank]
            for mode in MODES:
                step = GpuStep(part, params, b, comm, mode, buckets)
                t = graph_benchmark(step, launches=STEP_LAUNCHES, repeats=repeats, rel_ci=None)
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
            cupy.get_default_memory_pool().free_all_blocks()
            if rank == 0:
                got = [r for r in result["rows"] if r["size"] == b and r["experiment"] == "step"]
                log(f"B={b:6d} " + ", ".join(f"{r['variant']} {r['median_ms']:.4f}" for r in got))
        dist.destroy_process_group()
        out.write_text(json.dumps(result, default=lambda v: v.item() if hasattr(v, "item") else str(v)))
    except BaseException as exc:     # noqa: BLE001 -- reported to the parent, which raises
        Path(tmp, f"rank{rank}.error").write_text(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        raise


#: W1's buckets, cut at equal non-zeros of the batch: the rare-word half of the work (nearly all
#: of W1's rows and bytes) first, so its all-reduce runs beside the frequent-word half's scatter,
#: then the frequent words' few rows, whose all-reduce is all that is left after the scatter.
BUCKET_COUNT = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_workers(corpus: data.Corpus, params: dict, batches, sizes, repeats: int, world: int,
                timeline_batches=()) -> dict:
    """Start ``world`` processes, one per GPU, run :func:`_worker` in each and
    return {"rows": rank 0's rows, "checks", "digests" (every rank's),
    "timeline" (every rank's)}."""
    import multiprocessing as mp
    from .record import nccl
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
                                                   barrier, tuple(timeline_batches))) for r in range(world)]
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
    merged = {"rows": results[0]["rows"], "checks": results[0]["checks"],
              "digests": [d for r in results for d in r["digests"]],
              "timeline": [t for r in results for t in r["timeline"]]}
    # The ranks' copies after the all-reduce and after CHECK_STEPS steps: bit for bit the same.
    from .record import CHECK_STEPS
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
