"""Chains of matrix products with ReLUs (fcnet's network) through every vendor path: CuPy's cuBLAS,
cuBLAS directly (cublasGemmEx on a handle of its own), PyTorch with and without cuBLASLt's ReLU
epilogues in both layouts (:func:`matmul_chain_paths`)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .core import VendorPath, _as_torch, _torch_dtype


def torch_chain(x, weights: Sequence[np.ndarray], relu: Sequence[bool], *, precision: str,
                layout: str = "W@X", epilogue: bool = True) -> VendorPath:
    """The chain h <- relu?(W h) through PyTorch, starting from h = x (features
    x vectors, feature-major, as a CuPy array or torch tensor on the GPU).

    ``layout`` "W@X": each layer is ``W @ H`` (outputs x vectors), as the lab's
    data is laid out; "X@W": ``H^T @ W^T`` (vectors x outputs), the layout of
    ``torch.nn.Linear``, reading the same input through a transposed view.
    ``epilogue``: the ReLU is fused into the product by cuBLASLt
    (``torch._addmm_activation`` with a zero bias); otherwise ``matmul`` then
    an in-place ``relu_``. The output is returned in the reference's layout
    (a view; the check copies it, the timed calls do not)."""
    if layout not in ("W@X", "X@W"):
        raise ValueError(f"layout must be 'W@X' or 'X@W', got {layout!r}")
    if len(weights) != len(relu):
        raise ValueError(f"one relu flag per weight matrix: got {len(weights)} weights, {len(relu)} flags")
    how = "ReLU epilogue" if epilogue else "matmul + relu_"
    library = "cuBLASLt (PyTorch)" if epilogue else "cuBLAS (PyTorch)"
    label = f"{library} {precision}, {how}, {layout}"

    def setup():
        import torch
        dtype = _torch_dtype(precision)
        h0 = _as_torch(x).to(dtype)
        ws = [torch.as_tensor(np.asarray(w), device=h0.device).to(dtype) for w in weights]
        if layout == "W@X":
            mats = ws                                    # out (M x n) = W (M x K) @ H (K x n)
            biases = [torch.zeros(h0.shape[1], dtype=dtype, device=h0.device)] * len(ws)
            start = h0
        else:
            mats = [w.t() for w in ws]                   # out (n x M) = H^T (n x K) @ W^T (K x M)
            biases = [torch.zeros(w.shape[0], dtype=dtype, device=h0.device) for w in ws]
            start = h0.t()
        fused = torch._addmm_activation if epilogue else None

        def run():
            h = start
            for w, b, r in zip(mats, biases, relu):
                if layout == "W@X":
                    a, bmat = w, h
                else:
                    a, bmat = h, w
                if r and fused is not None:
                    h = fused(b, a, bmat)
                else:
                    h = torch.matmul(a, bmat)
                    if r:
                        h.relu_()
            return h if layout == "W@X" else h.t()
        return run
    return VendorPath(label, library, precision, layout, setup, requires=("cupy", "torch"),
                      note="zero bias (the epilogue needs one)" if epilogue else "")


def cupy_chain(x, weights: Sequence[np.ndarray], relu: Sequence[bool], *, precision: str) -> VendorPath:
    """The chain through CuPy's ``matmul`` (cuBLAS GEMM, fp32 accumulation) and
    ``maximum``, every buffer allocated up front, W@X layout. fp32 and fp16;
    tf32 through CuPy's compute-type switch."""
    label = f"cuBLAS (CuPy) {precision}, matmul + maximum, W@X"

    def setup():
        import cupy
        dtype = cupy.float16 if precision == "fp16" else cupy.float32
        h0 = cupy.asarray(x, dtype=dtype)
        ws = [cupy.asarray(w, dtype=dtype) for w in weights]
        outs = [cupy.empty((w.shape[0], h0.shape[1]), dtype) for w in ws]

        def run():
            h = h0
            for w, o, r in zip(ws, outs, relu):
                cupy.matmul(w, h, out=o)
                if r:
                    cupy.maximum(o, 0, out=o)
                h = o
            return h
        return run
    if precision not in ("fp32", "tf32", "fp16"):
        raise ValueError(f"the CuPy chain runs fp32, tf32 or fp16, not {precision!r}")
    # CuPy's matmul re-binds its cuBLAS handle to the stream on every call, which
    # stream capture forbids: the graph version is cublas_chain.
    return VendorPath(label, "cuBLAS (CuPy)", precision, "W@X", setup, capture="none")


def cublas_chain(x, weights: Sequence[np.ndarray], relu: Sequence[bool], *, precision: str) -> VendorPath:
    """The chain of :func:`cupy_chain` with the GEMMs called on cuBLAS directly
    (``cublasGemmEx`` through ctypes, on its own handle bound once to its own
    stream, with a fixed workspace), so that it can be captured in a CUDA graph
    (:func:`in_graph`). fp32 (no tf32) or fp16 data, fp32 accumulation."""
    if precision not in ("fp32", "fp16"):
        raise ValueError(f"the direct cuBLAS chain runs fp32 or fp16, not {precision!r}")
    label = f"cuBLAS (cublasGemmEx) {precision}, GEMM + maximum, W@X"

    def setup():
        import ctypes
        import cupy

        lib = _libcublas()
        stream = cupy.cuda.Stream(non_blocking=True)
        handle = ctypes.c_void_p()
        workspace = cupy.empty(32 * 2**20, cupy.uint8)
        for status in (lib.cublasCreate_v2(ctypes.byref(handle)),
                       lib.cublasSetStream_v2(handle, ctypes.c_void_p(stream.ptr)),
                       lib.cublasSetWorkspace_v2(handle, ctypes.c_void_p(workspace.data.ptr), workspace.nbytes)):
            if status != 0:
                raise RuntimeError(f"cuBLAS setup failed with status {status}")
        dtype = cupy.float16 if precision == "fp16" else cupy.float32
        h0 = cupy.asarray(x, dtype=dtype)
        ws = [cupy.asarray(w, dtype=dtype) for w in weights]
        n = h0.shape[1]
        outs = [cupy.empty((w.shape[0], n), dtype) for w in ws]
        one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)   # host scalars, kept alive
        cuda_type = 2 if precision == "fp16" else 0                    # CUDA_R_16F / CUDA_R_32F
        compute_32f, default_algo = 68, -1                             # CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT
        keep = (workspace, one, zero, handle)

        def gemm(a, b, c):    # c[M, n] = a[M, K] @ b[K, n], all row-major: column-major c^T = b^T a^T
            m_rows, k = a.shape
            status = lib.cublasGemmEx(handle, 0, 0, n, m_rows, k, one.ctypes.data, b.data.ptr, cuda_type, n,
                                      a.data.ptr, cuda_type, k, zero.ctypes.data, c.data.ptr, cuda_type, n,
                                      compute_32f, default_algo)
            if status != 0:
                raise RuntimeError(f"cublasGemmEx failed with status {status}")

        current = cupy.cuda.get_current_stream()
        state = {"capturing": False}        # set by _cupy_graph while it captures

        def run():
            assert keep
            if not state["capturing"]:      # order the chain between the current stream's events
                stream.wait_event(current.record())
            with stream:
                h = h0
                for w, o, r in zip(ws, outs, relu):
                    gemm(w, h, o)
                    if r:
                        cupy.maximum(o, 0, out=o)
                    h = o
            if not state["capturing"]:
                current.wait_event(stream.record())
            return h
        run.stream, run.state = stream, state
        return run
    return VendorPath(label, "cuBLAS (CuPy)", precision, "W@X", setup, capture="cupy",
                      note="cublasGemmEx on its own handle and stream, so that it can be captured")


def _libcublas():
    """The libcublas that CuPy loaded, through ctypes, with the entry points
    :func:`cublas_chain` needs."""
    import ctypes
    import cupy
    cupy.cuda.device.get_cublas_handle()          # makes sure CuPy has loaded libcublas
    with open("/proc/self/maps") as maps:
        found = {line.split()[-1] for line in maps if "/libcublas.so" in line}
    if not found:
        raise RuntimeError("libcublas is not loaded in this process")
    lib = ctypes.CDLL(sorted(found)[0])
    p, i = ctypes.c_void_p, ctypes.c_int
    lib.cublasCreate_v2.argtypes = [ctypes.POINTER(p)]
    lib.cublasSetStream_v2.argtypes = [p, p]
    lib.cublasSetWorkspace_v2.argtypes = [p, p, ctypes.c_size_t]
    lib.cublasGemmEx.argtypes = [p, i, i, i, i, i, p, p, i, i, p, i, i, p, p, i, i, i, i]
    for name in ("cublasCreate_v2", "cublasSetStream_v2", "cublasSetWorkspace_v2", "cublasGemmEx"):
        getattr(lib, name).restype = i
    return lib


def matmul_chain_paths(x, weights: Sequence[np.ndarray], relu: Sequence[bool], *,
                       precisions=("fp32", "tf32", "fp16", "bf16"), layouts=("W@X", "X@W"),
                       epilogues=(True, False), cupy_paths: bool = True) -> list[VendorPath]:
    """Every reasonable eager vendor path for a chain of matrix products with
    ReLUs (add :func:`graph_paths` for the captured ones): CuPy's cuBLAS chain
    and the direct cuBLAS chain (fp32, fp16), and PyTorch with and without
    cuBLASLt ReLU epilogues in both layouts, per precision."""
    paths = []
    if cupy_paths:
        paths += [cupy_chain(x, weights, relu, precision=p) for p in ("fp32", "fp16") if p in precisions]
        paths += [cublas_chain(x, weights, relu, precision=p) for p in ("fp32", "fp16") if p in precisions]
    for precision in precisions:
        for layout in layouts:
            for epilogue in epilogues:
                paths.append(torch_chain(x, weights, relu, precision=precision, layout=layout,
                                         epilogue=epilogue))
    return paths
