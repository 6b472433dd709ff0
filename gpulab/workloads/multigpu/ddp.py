"""The baseline: PyTorch DistributedDataParallel on the same model, same batches.

What a practitioner would write: the network as a module (the first layer as
``nn.EmbeddingBag`` in "sum" mode with the inputs as ``per_sample_weights``,
exactly step 9's gather; a sigmoid; ``nn.Linear`` to the 4 classes), wrapped in
``DistributedDataParallel``, one process per GPU started with
``torch.multiprocessing``, NCCL as the backend, plain SGD. W1's gradient is
dense (16.8 MB, the size the lab's replicas all-reduce); DDP buckets the
gradients (its default 25 MB cap) and overlaps their all-reduce with the
backward pass through autograd hooks.

Each process times its own steps with :func:`gpulab.timing.benchmark` on its
GPU's default stream, a fixed number of repeats (the two processes must run
the same number of steps, or one would wait for the other's all-reduce
forever); rank 0's times are recorded. Before timing, W1's gradient (averaged over the two processes by DDP) after
one step from the chapter's initial weights is checked against the float64 reference.
NCCL_NVLS_ENABLE=0 is set before the processes start (NVLink multicast off).
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
from pathlib import Path

import numpy as np

from ...check import compare
from ..training import reference
from ..training.reference import LEARNING_RATE
from .replicas import split_batch

WARMUP = 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model(params: dict, device):
    import torch
    from torch import nn

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            V, H = params["W1"].shape
            self.embed = nn.EmbeddingBag(V, H, mode="sum")
            self.b1 = nn.Parameter(torch.as_tensor(params["b1"]).clone())
            self.out = nn.Linear(H, params["W2"].shape[1])
            with torch.no_grad():
                self.embed.weight.copy_(torch.as_tensor(params["W1"]))
                self.out.weight.copy_(torch.as_tensor(params["W2"]).T)
                self.out.bias.copy_(torch.as_tensor(params["b2"]))

        def forward(self, idx, offsets, weights):
            return self.out(torch.sigmoid(self.embed(idx, offsets, per_sample_weights=weights) + self.b1))
    return Classifier().to(device)


def _worker(rank: int, world: int, port: int, corpus_file: str, batches, repeats: int, out_dir: str):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    import cupy
    from ...timing import benchmark
    from ..training.data import Corpus

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "NCCL_NVLS_ENABLE": "0"})
    torch.cuda.set_device(rank)
    cupy.cuda.Device(rank).use()
    dist.init_process_group("nccl", rank=rank, world_size=world)
    z = np.load(corpus_file)
    corpus = Corpus(z["indptr"], z["indices"], z["counts"], z["labels"], int(z["vocab"]))
    params = {k: z[k] for k in reference.PARAMS}
    dev = torch.device("cuda", rank)
    rows, checks = [], []
    for b in batches:
        part = split_batch(corpus.rows(0, b), world)[rank]
        model = torch.nn.parallel.DistributedDataParallel(_model(params, dev), device_ids=[rank])
        opt = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
        idx = torch.as_tensor(part.indices.astype(np.int64), device=dev)
        offsets = torch.as_tensor(part.indptr[:-1].astype(np.int64), device=dev)
        vals = torch.as_tensor(part.values, device=dev)
        labels = torch.as_tensor(part.labels.astype(np.int64), device=dev)

        def step():
            opt.zero_grad(set_to_none=False)
            F.cross_entropy(model(idx, offsets, vals), labels).backward()
            opt.step()
        if b == batches[0]:
            step()
            torch.cuda.synchronize()
            g = model.module.embed.weight.grad.detach().cpu().numpy().astype(np.float64)
            whole = corpus.rows(0, b)
            p64 = {k: v.astype(np.float64) for k, v in params.items()}
            ref = reference.backward(whole, whole.labels, p64, reference.forward(whole, p64))["dW1"]
            r = compare(g, ref, "fp32", name="PyTorch DDP: gradient of W1")
            checks.append({"batch": b, "variant": "PyTorch DDP", "quantity": "gradient of W1 vs float64",
                           "rel_error": r.rel_error, "tolerance": r.tolerance, "passed": r.passed})
        t = benchmark(step, warmup=WARMUP, repeats=repeats, rel_ci=None)
        rows.append(t.row("ddp", f"PyTorch DDP (EmbeddingBag, {world} processes)", b, phase="step", gpus=world,
                          rank=rank))
        del model, opt
    dist.destroy_process_group()
    if rank == 0:
        # NumPy scalars (np.bool_, np.float32) as plain Python values.
        Path(out_dir, "ddp.json").write_text(json.dumps({"rows": rows, "checks": checks},
                                                        default=lambda v: v.item() if hasattr(v, "item") else str(v)))


def time_ddp(corpus, params: dict, batches, repeats: int = 30, world: int = 2):
    """DDP's time per step for each global batch in ``batches``: (rows, checks)."""
    import torch.multiprocessing as mp

    os.environ["NCCL_NVLS_ENABLE"] = "0"
    with tempfile.TemporaryDirectory() as tmp:
        part = corpus.rows(0, max(batches))
        np.savez(Path(tmp, "corpus.npz"), indptr=part.indptr, indices=part.indices, counts=part.counts,
                 labels=part.labels, vocab=part.vocab, **params)
        mp.spawn(_worker, args=(world, _free_port(), str(Path(tmp, "corpus.npz")), tuple(batches), repeats, tmp),
                 nprocs=world, join=True)
        got = json.loads(Path(tmp, "ddp.json").read_text())
    failed = [c for c in got["checks"] if not c["passed"]]
    if failed:
        from ...errors import CheckFailed
        raise CheckFailed(f"PyTorch DDP's step does not match the reference: {failed}")
    return got["rows"], got["checks"]
