"""One process per GPU, as NCCL's users (PyTorch DDP, Megatron, torchrun) run:
the recorded run's multi-GPU steps, all-reduce curves and timeline.

:func:`run_workers` starts one process per GPU (``multiprocessing``, spawn),
each of which binds its GPU, joins an NCCL communicator of ``world`` ranks
(``ncclCommInitRank`` with a unique id made by the parent) and runs
:func:`_worker`. Every rank runs the same sequence of collectives, so the
ranks stay in step; what only rank 0 measures (the one-GPU baselines) runs
while the other ranks wait at a host barrier. The ranks write their rows to
JSON files; the parent merges them.

Each rank's step is a :class:`~.gpustep.GpuStep` (:mod:`.gpustep`: its streams, events, NCCL
calls and, on two GPUs, the peer link that maps the other rank's gradient through CUDA IPC);
what it is launched with is data of :mod:`.configs`. :func:`_sweep` times every launch
configuration of the bucketed step (:data:`~.configs.OVERLAPS`: bucket count, the scatter's
grid, stream and graph-node priorities) and both forms of the plain step at a batch and picks the
fastest the same way on every rank (times max-reduced over NCCL).

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
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ...errors import CheckFailed, GpulabError
from ..training import data, reference
from ..training.reference import PARAMS
from .configs import (MODES, NCCL_SWEEP, ONE_GPU_FORWARD, OVERLAPS, PEER_SPLITS, PLAIN_FORMS, RARE_SHARE, nccl_label,
                      overlaps, plain_forms, variant)
from .gpustep import STEP_LAUNCHES, GpuStep, nccl, nccl_env, time_step
from .replicas import Layout, Replica, row_work, split_batch

ALLREDUCE_LAUNCHES = 10      # all-reduces per CUDA graph in the all-reduce curve
WAIT_S = 540                  # the parent gives up on the workers after this long
#: Steps each mode runs before its copies are compared bit for bit across the GPUs.
CHECK_STEPS = 3


def _work(batch: data.Corpus) -> dict:
    from ..training.record import bytes_per_step, flops_per_step
    from ..training.problem import Dims
    d = Dims(batch.docs, batch.vocab)
    return {"flops": flops_per_step(d, batch.nnz), "bytes": bytes_per_step(d, batch.nnz)}


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