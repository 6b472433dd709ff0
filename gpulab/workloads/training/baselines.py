"""PyTorch on the same data, declared as :class:`gpulab.baselines.VendorPath`\\ s.

What a practitioner would write: the network as two ``addmm`` with a sigmoid
between them, ``cross_entropy``, ``torch.autograd.grad`` and the SGD update --
dense (X as a B x V fp32 matrix, about 0.35% non-zeros), and with the first
layer as one of PyTorch's sparse paths:

* ``F.embedding_bag`` (mode "sum", the inputs as ``per_sample_weights``:
  exactly the gather of step 9);
* ``torch.sparse.mm`` on X as a CSR matrix, with autograd through it (what one
  writes first). Its backward converts layouts inside the step (a CPU tensor
  copied to the GPU), which a CUDA graph cannot capture, so it runs eager only;
* ``torch.sparse.mm`` with W1's gradient as a second ``torch.sparse.mm`` by
  X^T, built as CSR on the GPU once, before anything is timed or captured:
  the same arithmetic with every tensor on the device, eager and in a graph.

Each is measured eager and, where it can be captured, in a CUDA graph
(:func:`gpulab.baselines.in_graph`); the dense and ``embedding_bag`` steps also
through ``torch.compile`` (:func:`compiled_paths`).

For the checks, a path's step is functional: it reads the initial parameters
and writes the updated ones into other tensors, so every call computes the same
result (the update of W1 and the loss), which is compared with the float64
reference before anything is timed. The work per call is the same as an
in-place update's.
"""
from __future__ import annotations

import time
import warnings
from contextlib import contextmanager

import numpy as np

from ...baselines import VendorPath
from . import reference

#: The first-layer variants :func:`_torch_step` builds.
KINDS = ("dense", "embedding_bag", "sparse_mm", "sparse_mm_prebuilt")
#: torch.compile modes measured (inductor): "default"; "reduce-overhead" (the compiled
#: graphs replayed through CUDA graphs); "max-autotune-no-cudagraphs" (Triton GEMM
#: templates autotuned against cuBLAS, no CUDA graphs; the longest compile).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")
#: Calls made while compiling and warming a compiled step, before its check and timing
#: (reduce-overhead records its CUDA graphs on the second and third call).
COMPILE_WARMUP = 3


@contextmanager
def _checked_sparse():
    """Build sparse tensors with PyTorch's invariant checks explicitly on: each CSR
    matrix is validated once, when it is built (before anything is timed), and
    PyTorch does not warn that the checks are implicitly disabled. Older PyTorch
    versions also warn, once, that CSR support is in beta: that one message is
    filtered, no other."""
    import torch
    with torch.sparse.check_sparse_tensor_invariants(enable=True), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)
        yield


@contextmanager
def _quiet_inductor():
    """Compile without Inductor's advice on stderr, which a reader would take for a
    fault: these paths are fp32 by design (the lab's kernels are compared in fp32,
    so TensorFloat32 stays off, as :func:`gpulab.baselines.precision_mode` sets it),
    how Inductor lowers the softmax is its own choice, and max-autotune's table of
    every candidate GEMM belongs to its log, not to the chapter; so do the errors it
    logs for candidate Triton GEMMs that need more shared memory than the GPU has
    (it drops them and picks among the rest), and the deprecation it triggers itself
    (TypedStorage). Exactly those messages are silenced, only while compiling; any
    other warning or error of PyTorch's still surfaces."""
    import logging
    autotune_log = logging.getLogger("torch._inductor.select_algorithm")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores for float32 matrix multiplication",
                                category=UserWarning)
        warnings.filterwarnings("ignore", message=r"\s*Online softmax is disabled on the fly", category=UserWarning)
        warnings.filterwarnings("ignore", message="TypedStorage is deprecated", category=UserWarning,
                                module=r"torch\._inductor\.select_algorithm")
        from torch._inductor import config, select_algorithm
        owners = {"PRINT_AUTOTUNE": select_algorithm, "max_autotune_report_choices_stats": config}
        saved = {name: getattr(owner, name) for name, owner in owners.items() if hasattr(owner, name)}
        for name in saved:
            setattr(owners[name], name, False)
        autotune_log.addFilter(_too_large_candidate)
        try:
            yield
        finally:
            autotune_log.removeFilter(_too_large_candidate)
            for name, value in saved.items():
                setattr(owners[name], name, value)


def _too_large_candidate(record) -> bool:
    """False (drop) for Inductor's log of a candidate GEMM it dropped because its tile needs
    more shared memory than the GPU allows ("out of resource: triton_mm Required: ...")."""
    text = record.getMessage()
    if record.exc_info and record.exc_info[1] is not None:
        text += str(record.exc_info[1])
    return not ("No valid triton configs" in text and "out of resource" in text)


def _csr(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, shape: tuple[int, int], dev):
    """A CSR matrix whose three arrays are copied to the GPU before it is built."""
    import torch
    with _checked_sparse():
        return torch.sparse_csr_tensor(torch.as_tensor(indptr.astype(np.int64), device=dev),
                                       torch.as_tensor(indices.astype(np.int64), device=dev),
                                       torch.as_tensor(np.asarray(values, np.float32), device=dev),
                                       size=shape, check_invariants=True)


def transpose_csr(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, cols: int):
    """X^T in CSR (that is, X in CSC) from X in CSR, on the host: (indptr, indices, values)."""
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    order = np.argsort(indices, kind="stable")        # by column, rows ascending within each
    t_indptr = np.zeros(cols + 1, np.int64)
    np.cumsum(np.bincount(indices, minlength=cols), out=t_indptr[1:])
    return t_indptr, rows[order], np.asarray(values)[order]


def _torch_step(kind: str, params: dict, batch, x_dense=None, lr: float = reference.LEARNING_RATE,
                compile_mode: str | None = None, compile_info: dict | None = None):
    """The setup of one path: returns ``run`` (one SGD step; returns the
    update of W1 and the loss, flattened, as a torch tensor). With
    ``compile_mode``, the forward pass and the loss go through ``torch.compile``
    (AOTAutograd compiles the backward with them) and ``run`` is called
    :data:`COMPILE_WARMUP` times here; the first call's time, the compilation,
    goes into ``compile_info["compile_s"]``."""
    import torch
    import torch.nn.functional as F

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    dev = torch.device("cuda")
    w = {k: torch.as_tensor(np.asarray(v), device=dev).clone().requires_grad_(True) for k, v in params.items()}
    nxt = {k: torch.empty_like(v) for k, v in w.items()}
    labels = torch.as_tensor(batch.labels.astype(np.int64), device=dev)
    order = list(reference.PARAMS)
    manual_w1 = kind == "sparse_mm_prebuilt"     # W1's gradient computed by hand, not by autograd
    if kind == "dense":
        x = torch.from_dlpack(x_dense)

        def first_layer(w1, b1):
            return torch.addmm(b1, x, w1)
    elif kind == "embedding_bag":
        idx = torch.as_tensor(batch.indices.astype(np.int64), device=dev)
        offsets = torch.as_tensor(batch.indptr[:-1].astype(np.int64), device=dev)
        vals = torch.as_tensor(batch.values, device=dev)

        def first_layer(w1, b1):
            return F.embedding_bag(idx, w1, offsets, mode="sum", per_sample_weights=vals) + b1
    else:
        csr = _csr(batch.indptr, batch.indices, batch.values, (batch.docs, batch.vocab), dev)
        if manual_w1:
            csr_t = _csr(*transpose_csr(batch.indptr, batch.indices, batch.values, batch.vocab),
                         (batch.vocab, batch.docs), dev)

        def first_layer(w1, b1):
            return torch.sparse.mm(csr, w1) + b1

    def loss_of(w1, b1, w2, b2):
        h = torch.sigmoid(first_layer(w1, b1))
        return F.cross_entropy(torch.addmm(b2, h, w2), labels)

    if compile_mode is not None:
        if kind not in ("dense", "embedding_bag"):
            raise ValueError(f"torch.compile does not take sparse tensors: no compiled path for {kind!r}")
        if compile_mode == "reduce-overhead":
            # As nn.Parameters are: fixed addresses, so the CUDA graphs read these tensors
            # in place instead of copying every input into the graph's own memory per call.
            fixed = [*w.values(), labels] + ([x] if kind == "dense" else [idx, offsets, vals])
            for t in fixed:
                torch._dynamo.mark_static_address(t)
        loss_of = torch.compile(loss_of, mode=compile_mode, dynamic=False, fullgraph=True)
    delta = torch.empty(w["W1"].numel() + 1, device=dev)

    def run():
        if manual_w1:
            # Z1 = X W1 + b1 with Z1 a leaf of autograd; dW1 = X^T dZ1, X^T prebuilt on the device.
            with torch.no_grad():
                z1 = torch.sparse.mm(csr, w["W1"])
            z1.requires_grad_(True)
            h = torch.sigmoid(z1 + w["b1"])
            loss = F.cross_entropy(torch.addmm(w["b2"], h, w["W2"]), labels)
            dz1, db1, dw2, db2 = torch.autograd.grad(loss, [z1, w["b1"], w["W2"], w["b2"]])
            grads = (torch.sparse.mm(csr_t, dz1), db1, dw2, db2)
        else:
            loss = loss_of(*(w[k] for k in order))
            grads = torch.autograd.grad(loss, [w[k] for k in order])
        with torch.no_grad():
            for k, g in zip(order, grads):
                torch.sub(w[k], g, alpha=lr, out=nxt[k])
            torch.sub(nxt["W1"].view(-1), w["W1"].view(-1), out=delta[1:])
            delta[:1].copy_(loss.detach().view(1))
        return delta
    if compile_mode is not None:
        with _quiet_inductor():      # every compile (forward, backward, CUDA graphs) happens here
            torch.cuda.synchronize()
            start = time.perf_counter()
            run()
            torch.cuda.synchronize()
            if compile_info is not None:
                compile_info["compile_s"] = time.perf_counter() - start
            for _ in range(COMPILE_WARMUP - 1):
                run()
            torch.cuda.synchronize()
    return run


def reference_output(params: dict, batch, lr: float = reference.LEARNING_RATE) -> np.ndarray:
    """What every path must return, in float64: [loss, (new W1 - W1) flattened]."""
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    acts = reference.forward(batch, p64)
    grads = reference.backward(batch, batch.labels, p64, acts)
    return np.concatenate([[reference.loss(acts["P"], batch.labels)], (-lr * grads["dW1"]).ravel()])


def torch_paths(params: dict, batch, x_dense, lr: float = reference.LEARNING_RATE) -> list[VendorPath]:
    """The eager PyTorch paths (dense, embedding_bag, sparse CSR products); those
    that can be captured have ``capture="torch"`` (:func:`gpulab.baselines.graph_paths`)."""
    common = dict(precision="fp32", requires=("cupy", "torch"))
    return [
        VendorPath("PyTorch eager fp32, dense X", "PyTorch (cuBLAS)", layout="X@W",
                   setup=lambda: _torch_step("dense", params, batch, x_dense, lr), **common),
        VendorPath("PyTorch eager fp32, sparse first layer (embedding_bag)", "PyTorch (embedding_bag)",
                   layout="CSR", setup=lambda: _torch_step("embedding_bag", params, batch, lr=lr), **common),
        VendorPath("PyTorch eager fp32, sparse first layer (torch.sparse.mm, CSR)", "PyTorch (cuSPARSE)",
                   layout="CSR", setup=lambda: _torch_step("sparse_mm", params, batch, lr=lr), capture="none",
                   note="autograd through the CSR product; its backward copies a CPU tensor to the GPU, "
                        "which CUDA graph capture refuses: eager only", **common),
        VendorPath("PyTorch eager fp32, sparse first layer (torch.sparse.mm, CSR; X^T prebuilt as CSR)",
                   "PyTorch (cuSPARSE)", layout="CSR",
                   setup=lambda: _torch_step("sparse_mm_prebuilt", params, batch, lr=lr),
                   note="dW1 = torch.sparse.mm(X^T, dZ1) with X^T built on the GPU before timing or capture",
                   **common),
    ]


def compiled_paths(params: dict, batch, x_dense, lr: float = reference.LEARNING_RATE,
                   modes=COMPILE_MODES, compile_times: dict | None = None) -> list[VendorPath]:
    """The dense and ``embedding_bag`` steps with the forward pass and loss through
    ``torch.compile`` (inductor; AOTAutograd compiles the backward; the SGD update
    stays eager, one kernel per parameter as in the eager paths), one path per
    mode. Each is compiled and warmed in its setup; the compilation's seconds go
    into ``compile_times[label]``. Paths need Triton (inductor's code generator):
    without it they come back as skipped, with the reason. ``mode="reduce-overhead"``
    replays the compiled graphs through CUDA graphs, so its rows are graph rows."""
    out = []
    for kind, library, layout, what, x in (
            ("dense", "PyTorch (torch.compile)", "X@W", "dense X", x_dense),
            ("embedding_bag", "PyTorch (torch.compile, embedding_bag)", "CSR",
             "sparse first layer (embedding_bag)", None)):
        if kind == "embedding_bag":
            modes_here = tuple(m for m in modes if m != "max-autotune-no-cudagraphs")   # no GEMM to tune
        else:
            modes_here = tuple(modes)
        for mode in modes_here:
            label = f"PyTorch torch.compile fp32 (inductor, mode={mode}), {what}"

            def setup(kind=kind, x=x, mode=mode, label=label):
                info = {}
                run = _torch_step(kind, params, batch, x, lr, compile_mode=mode, compile_info=info)
                if compile_times is not None:
                    compile_times[label] = info.get("compile_s", float("nan"))
                return run
            out.append(VendorPath(label, library, "fp32", layout, setup, graph=mode == "reduce-overhead",
                                  requires=("cupy", "torch", "triton"), capture="none",
                                  note="forward and loss compiled (fullgraph), backward by AOTAutograd, "
                                       "SGD update eager; compiled and warmed before timing"))
    return out


#: What the record lists instead of a compiled torch.sparse.mm path.
NOT_COMPILED = [{"variant": "PyTorch torch.compile fp32, sparse first layer (torch.sparse.mm, CSR)",
                 "library": "PyTorch (torch.compile)", "precision": "fp32",
                 "reason": "not attempted: torch.compile does not take sparse tensors (its Dynamo refuses them)"}]
