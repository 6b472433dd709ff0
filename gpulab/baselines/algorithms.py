"""Which kernels a vendor path ran (PyTorch's profiler: :func:`cudnn_kernels`, :func:`path_kernels`)
and the algorithm family their names say (:func:`algorithm_family`)."""
from __future__ import annotations

import sys
import warnings
from typing import Any, Callable, Sequence

from .core import VendorPath, precision_mode


def cudnn_kernels(run: Callable[[], Any], warmup: int = 3) -> list[str]:
    """The GPU kernels one call of ``run`` launches, by name, from the PyTorch
    profiler: cuDNN's names say which algorithm it chose (``winograd``,
    ``fft``, ``implicit_gemm``/``xmma``, ...). Empty where the profiler fails."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
        for _ in range(warmup):
            run()
        torch.cuda.synchronize()
        # One profiling cycle, read whole: PyTorch's notice that it clears events between
        # cycles (there is no second one here) would only alarm the reader, so it is ignored.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Warning: Profiler clears events at the end of each cycle",
                                    category=UserWarning)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                run()
                torch.cuda.synchronize()
        names = [e.name for e in prof.events() if _on_gpu(e)]
        return list(dict.fromkeys(names))
    except Exception as exc:
        print(f"could not read cuDNN's kernels: {type(exc).__name__}: {exc}", file=sys.stderr)
        return []


def path_kernels(path: VendorPath) -> list[str]:
    """The GPU kernels one call of ``path`` launches (set up under its own
    precision settings), by name; ``["not read: ..."]`` where that fails."""
    try:
        with precision_mode(path.precision):
            return cudnn_kernels(path.setup())
    except Exception as exc:
        return [f"not read: {type(exc).__name__}"]


def _on_gpu(event) -> bool:
    kind = str(getattr(event, "device_type", "")).lower()
    return "cuda" in kind


def algorithm_family(kernel_names: Sequence[str]) -> str:
    """A one-word reading of cuDNN's kernel names: winograd, fft, implicit GEMM, ..."""
    text = " ".join(kernel_names).lower()
    for key, family in (("winograd", "Winograd"), ("fft", "FFT"),
                        ("sm90_xmma_fprop_implicit_gemm", "implicit GEMM, tensor cores (Hopper kernel)"),
                        ("implicit_gemm", "implicit GEMM, tensor cores"),
                        ("precomputed_convolve_sgemm", "implicit GEMM, CUDA cores (precomputed indices)"),
                        ("convolve_common_engine", "direct convolution, CUDA cores"),
                        ("nvjet", "GEMM, tensor cores"), ("xmma_gemm", "GEMM (xmma)"), ("gemm", "GEMM"),
                        ("direct", "direct")):
        if key in text:
            return family
    return "unknown" if text else "not read"
