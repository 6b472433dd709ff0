"""PyTorch on the same data, declared as :class:`gpulab.baselines.VendorPath`\\ s.

What a practitioner would write: the network as two ``addmm`` with a sigmoid
between them, ``cross_entropy``, ``torch.autograd.grad`` and the SGD update --
dense (X as a B x V fp32 matrix, about 0.35% non-zeros), and with the first
layer as PyTorch's sparse path, ``F.embedding_bag`` (mode "sum", the inputs as
``per_sample_weights``: exactly the gather of step 9). Each is measured
eager and captured in a CUDA graph (:func:`gpulab.baselines.in_graph`).

For the checks, a path's step is functional: it reads the initial parameters
and writes the updated ones into other tensors, so every call computes the same
result (the update of W1 and the loss), which is compared with the float64
reference before anything is timed. The work per call is the same as an
in-place update's.
"""
from __future__ import annotations

import numpy as np

from ...baselines import VendorPath
from . import reference


def _torch_step(kind: str, params: dict, batch, x_dense=None, lr: float = reference.LEARNING_RATE):
    """The setup of one path: returns ``run`` (one SGD step; returns the
    update of W1 and the loss, flattened, as a torch tensor)."""
    import torch
    import torch.nn.functional as F

    dev = torch.device("cuda")
    w = {k: torch.as_tensor(np.asarray(v), device=dev).clone().requires_grad_(True) for k, v in params.items()}
    nxt = {k: torch.empty_like(v) for k, v in w.items()}
    labels = torch.as_tensor(batch.labels.astype(np.int64), device=dev)
    if kind == "dense":
        x = torch.from_dlpack(x_dense)

        def first_layer():
            return torch.addmm(w["b1"], x, w["W1"])
    elif kind == "embedding_bag":
        idx = torch.as_tensor(batch.indices.astype(np.int64), device=dev)
        offsets = torch.as_tensor(batch.indptr[:-1].astype(np.int64), device=dev)
        vals = torch.as_tensor(batch.values, device=dev)

        def first_layer():
            return F.embedding_bag(idx, w["W1"], offsets, mode="sum", per_sample_weights=vals) + w["b1"]
    elif kind == "sparse_mm":
        csr = torch.sparse_csr_tensor(torch.as_tensor(batch.indptr.astype(np.int64), device=dev),
                                      torch.as_tensor(batch.indices.astype(np.int64), device=dev),
                                      torch.as_tensor(batch.values, device=dev), size=(batch.docs, batch.vocab))

        def first_layer():
            return torch.sparse.mm(csr, w["W1"]) + w["b1"]
    else:
        raise ValueError(f"kind must be 'dense', 'embedding_bag' or 'sparse_mm', got {kind!r}")
    order = list(reference.PARAMS)
    delta = torch.empty(w["W1"].numel() + 1, device=dev)

    def run():
        h = torch.sigmoid(first_layer())
        z2 = torch.addmm(w["b2"], h, w["W2"])
        loss = F.cross_entropy(z2, labels)
        grads = torch.autograd.grad(loss, [w[k] for k in order])
        with torch.no_grad():
            for k, g in zip(order, grads):
                torch.sub(w[k], g, alpha=lr, out=nxt[k])
            torch.sub(nxt["W1"].view(-1), w["W1"].view(-1), out=delta[1:])
            delta[:1].copy_(loss.detach().view(1))
        return delta
    return run


def reference_output(params: dict, batch, lr: float = reference.LEARNING_RATE) -> np.ndarray:
    """What every path must return, in float64: [loss, (new W1 - W1) flattened]."""
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    acts = reference.forward(batch, p64)
    grads = reference.backward(batch, batch.labels, p64, acts)
    return np.concatenate([[reference.loss(acts["P"], batch.labels)], (-lr * grads["dW1"]).ravel()])


def torch_paths(params: dict, batch, x_dense, lr: float = reference.LEARNING_RATE) -> list[VendorPath]:
    """The eager PyTorch paths (dense, embedding_bag, sparse CSR product)."""
    common = dict(precision="fp32", requires=("cupy", "torch"))
    return [
        VendorPath("PyTorch eager fp32, dense X", "PyTorch (cuBLAS)", layout="X@W",
                   setup=lambda: _torch_step("dense", params, batch, x_dense, lr), **common),
        VendorPath("PyTorch eager fp32, sparse first layer (embedding_bag)", "PyTorch (embedding_bag)",
                   layout="CSR", setup=lambda: _torch_step("embedding_bag", params, batch, lr=lr), **common),
        VendorPath("PyTorch eager fp32, sparse first layer (torch.sparse.mm, CSR)", "PyTorch (cuSPARSE)",
                   layout="CSR", setup=lambda: _torch_step("sparse_mm", params, batch, lr=lr), **common),
    ]
