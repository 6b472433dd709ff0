"""How a step is launched: a GEMM C = A B^T from A, B and C in global memory, whose steps pass A
and B by address (step 0's cp.async ring, :data:`POINTERS`) or as tensor maps (steps 1 on,
:data:`TENSOR_MAPS`: boxes of one 128-byte row of k by the block tile's rows, gpulab.tensormap);
the FP8 steps (:data:`FP8_MAPS`, and :data:`FP8_E5M2_MAPS` for B in e5m2) take FP8 codes and
their per-tensor scales and write C in bfloat16. A step's geometry (tile, threads, ring,
persistence, cluster) is its data."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import ladder, tensormap
from ...errors import KernelArgumentError
from ...kernels import get_backend, load_module
from .problem import Fp8Gemm, Gemm as GemmCase, check_shape, storage_dtype

#: Every kernel of the chapter is built for Hopper's sm_90a target (wgmma and setmaxnreg exist
#: only there; steps 0 and 1 would build for sm_90 too, but the chapter compares like with like).
GPU_OPTIONS = ("-arch=sm_90a",)
#: Step 7's C leaves in boxes of STORE_BOX x STORE_BOX (kernels/hopper/persistent_gemm.cuh), two
#: at a time per consumer warpgroup.
STORE_BOX = 64


def persistent_blocks(backend) -> int:
    """Blocks of a persistent step: one per SM on a GPU; on the CPU backend 1 (a cluster step:
    one cluster), so that the check sizes' few tiles still make a block loop over several."""
    if backend.name == "gpu":
        import cupy
        return int(cupy.cuda.Device().attributes["MultiProcessorCount"])
    return 1


@dataclass(frozen=True)
class Gemm(ladder.Launcher):
    """A step's kernel on A (M x K), B (N x K) and C (M x N) of the step's storage type, with
    ``tensor_maps`` (A and B, and C for a step that stores through the copy engine, as tensor
    maps) or without (their addresses). ``bind(..., blocks=)``: a persistent step's grid
    (default :func:`persistent_blocks`)."""

    tensor_maps: bool

    def accepts(self, case) -> bool:
        return isinstance(case, GemmCase)

    def needs(self, step) -> ladder.Needs:
        return ladder.Needs(shared_bytes=step.shared_bytes if step is not None else 0, capability=90,
                            because="TMA, mbarrier transaction counts, wgmma and setmaxnreg exist only in sm_90a")

    def bind(self, step, case, arrays, backend, blocks: int | None = None):
        be = get_backend(backend)
        A, B, C = arrays["A"], arrays["B"], arrays["C"]
        M, K = (int(n) for n in A.shape)
        N = int(B.shape[0])
        check_shape(M, N, K, step.element_bytes)
        for name, x in (("A", A), ("B", B), ("C", C)):
            if np.dtype(x.dtype) != np.dtype(storage_dtype(step.precision)):
                raise KernelArgumentError(f"step {step.number} in {step.precision} takes {name} as "
                                          f"{np.dtype(storage_dtype(step.precision))}, got {x.dtype}")
        if B.shape != (N, K) or C.shape != (M, N):
            raise KernelArgumentError(f"expected A (M, K), B (N, K), C (M, N); got A {A.shape}, B {B.shape}, "
                                      f"C {C.shape}")
        module = load_module(step.file, be, options=GPU_OPTIONS if be.name == "gpu" else ())
        kernel = module.get_function(step.kernel)
        kernel.allow_shared_memory(step.shared_bytes)
        if step.tma_store and (N * step.element_bytes) % 16:
            raise KernelArgumentError(f"N = {N}: step {step.number} writes C through a tensor map, whose rows "
                                      f"must start 16-byte aligned: N must be a multiple of "
                                      f"{16 // step.element_bytes}")
        if self.tensor_maps:
            element = "bf16" if step.precision == "bf16" else None
            inputs = (tensormap.encode_2d(A, (step.slice_k, step.bm), element=element),
                      tensormap.encode_2d(B, (step.slice_k, step.bn // step.cluster), element=element))
            if step.tma_store:      # boxes of 64 rows x 128 bytes
                inputs += (tensormap.encode_2d(C, (128 // step.element_bytes, STORE_BOX), element=element),)
        else:
            inputs = (A, B)
        blocks = persistent_blocks(be) if blocks is None else blocks
        return kernel.bind(step.grid(M, N, blocks), (step.threads,),
                           (*inputs, C, np.int32(M), np.int32(N), np.int32(K)), shared_mem=step.shared_bytes)


POINTERS = Gemm(tensor_maps=False)
TENSOR_MAPS = Gemm(tensor_maps=True)


@dataclass(frozen=True)
class Fp8(Gemm):
    """An FP8 step (steps 9 and 10): A (M x K) in e4m3 and B (N x K) in ``kind_b`` as uint8 codes,
    C (M x N) bfloat16 bits, tensor maps of all three (slices of 128 one-byte k, C in 64 x 64
    boxes), the scales as the last two arguments; the grid persistent as step 7's. It runs on
    the :class:`~.problem.Fp8Gemm` cases of its B kind."""

    tensor_maps: bool = True
    kind_b: str = "e4m3"

    def accepts(self, case) -> bool:
        return isinstance(case, Fp8Gemm) and case.kind_b == self.kind_b

    def bind(self, step, case, arrays, backend, blocks: int | None = None):
        be = get_backend(backend)
        A, B, C = arrays["A"], arrays["B"], arrays["C"]
        M, K = (int(n) for n in A.shape)
        N = int(B.shape[0])
        for name, x, dtype in (("A", A, np.uint8), ("B", B, np.uint8), ("C", C, np.uint16)):
            if np.dtype(x.dtype) != np.dtype(dtype):
                raise KernelArgumentError(f"step {step.number} takes {name} as {np.dtype(dtype)} ("
                                          f"{'FP8 codes' if dtype is np.uint8 else 'bfloat16 bits'}), got {x.dtype}")
        if B.shape != (N, K) or C.shape != (M, N):
            raise KernelArgumentError(f"expected A (M, K), B (N, K), C (M, N); got A {A.shape}, B {B.shape}, "
                                      f"C {C.shape}")
        if K % 16 or N % 8:
            raise KernelArgumentError(f"K = {K}, N = {N}: tensor maps need rows that start 16-byte aligned: K a "
                                      f"multiple of 16 (bytes of A and B), N of 8 (bfloat16s of C)")
        kernel = load_module(step.file, be, options=GPU_OPTIONS if be.name == "gpu" else ()).get_function(step.kernel)
        kernel.allow_shared_memory(step.shared_bytes)
        maps = (tensormap.encode_2d(A, (step.slice_k, step.bm)), tensormap.encode_2d(B, (step.slice_k, step.bn)),
                tensormap.encode_2d(C, (STORE_BOX, STORE_BOX), element="bf16"))
        blocks = persistent_blocks(be) if blocks is None else blocks
        scales = (np.float32(float(arrays["scale_a"])), np.float32(float(arrays["scale_b"])))
        return kernel.bind(step.grid(M, N, blocks), (step.threads,),
                           (*maps, C, np.int32(M), np.int32(N), np.int32(K), *scales), shared_mem=step.shared_bytes)


FP8_MAPS = Fp8()
FP8_E5M2_MAPS = Fp8(kind_b="e5m2")


def needs_hopper(backend=None) -> str | None:
    """Why ``backend`` cannot run the chapter's kernels (a GPU of compute capability below 9.0),
    or None (Hopper, or the CPU backend, which emulates what the kernels use)."""
    return TENSOR_MAPS.unfit(None, get_backend(backend))
