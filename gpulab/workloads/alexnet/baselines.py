"""cuDNN's paths for one AlexNet layer (through PyTorch), and which algorithm cuDNN chose."""
from __future__ import annotations

from ... import baselines
from .problem import MAIN_N, Layer, _subset


#: cuDNN may compute an fp32 convolution with Winograd or FFT algorithms, which round
#: differently from a direct sum: its fp32 check allows 1e-4 instead of 1e-5.
CUDNN_FP32_TOLERANCE = 1e-4


def vendor_paths(layer: Layer, x32, w32, N: int, graphs: bool = True, labels=None):
    """Every cuDNN path for one layer (:func:`gpulab.baselines.conv_paths`: fp32, tf32,
    fp16, bf16, NCHW and channels-last), and in CUDA graphs when ``graphs``; beyond
    N = 128 their output is checked on the same three images as the ladder's."""
    eager = baselines.conv_paths(x32, w32, stride=layer.U, padding=layer.P,
                                 fp32_tolerance=CUDNN_FP32_TOLERANCE)
    if labels is not None:
        eager = [p for p in eager if p.label in labels]
    if N > MAIN_N:
        pick = _subset(N)
        eager = [baselines.with_output(p, lambda out: out[pick], "checked on three images") for p in eager]
    return eager + (baselines.graph_paths(eager, launches=3) if graphs else [])


def _algorithm_rows(layer: Layer, paths) -> list[dict]:
    """Which algorithm cuDNN chose for each eager path on ``layer``: the kernels it
    launched, by name (PyTorch profiler), and the family they name."""
    out = []
    for path in paths:
        if path.graph:
            continue
        names = baselines.path_kernels(path)
        out.append({"layer": layer.index, "variant": path.label, "precision": path.precision,
                    "layout": path.layout, "algorithm": baselines.algorithm_family(names),
                    "kernels": " | ".join(names)})
    return out


def nchw_input_paths(layer: Layer, x32, w32, graphs: bool = True):
    """cuDNN's fp16 channels-last path given the input as the ladder's steps get it (NCHW halves),
    the copy to channels-last inside each timed call, as the lab's channels-last steps make theirs
    (:func:`vendor_paths` makes cuDNN's copy before timing). In CUDA graphs too when ``graphs``."""
    label = "cuDNN (PyTorch) fp16, NHWC, copy of x timed, conv"

    def setup():
        import torch
        import torch.nn.functional as F
        tx = baselines._as_torch(x32).to(torch.float16).contiguous()
        tw = baselines._as_torch(w32).to(torch.float16).contiguous(memory_format=torch.channels_last)

        def run():
            return F.conv2d(tx.contiguous(memory_format=torch.channels_last), tw, None,
                            stride=layer.U, padding=layer.P)
        return run
    eager = [baselines.VendorPath(label, "cuDNN (PyTorch)", "fp16", "NHWC", setup, requires=("cupy", "torch"))]
    return eager + (baselines.graph_paths(eager, launches=3) if graphs else [])
