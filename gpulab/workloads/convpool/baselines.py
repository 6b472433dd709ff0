"""The vendor paths for this layer, through the lab's shared :mod:`gpulab.baselines`: cuDNN's
convolution (with the bias) + ReLU + max-pool through PyTorch, NCHW and channels-last, fp32
(tf32 off), tf32, fp16 and bf16, eager and in CUDA graphs -- and the convolution alone, to show
where cuDNN's time goes."""
from __future__ import annotations

from ... import baselines
from .problem import Shape

POOL = (2, 2)


def layer_paths(x, w, b, graphs: bool = True, precisions=("fp32", "tf32", "fp16", "bf16")):
    """Every cuDNN path for the whole layer on the same x (N x C x Hp x Wp, zero border
    included, so padding 0), w and b."""
    paths = baselines.conv_paths(x, w, padding=0, relu=True, pool=POOL, bias=b, precisions=precisions)
    return paths + (baselines.graph_paths(paths, launches=10) if graphs else [])


def conv_only_paths(x, w, b, precisions=("fp32", "fp16")):
    """cuDNN's convolution alone (with the bias), channels-last: what the layer costs before its
    ReLU and pool."""
    return [baselines.conv_path(x, w, padding=0, precision=p, layout="NHWC", bias=b,
                                tolerance=1e-4 if p == "fp32" else None) for p in precisions]


def moved_bytes(shape: Shape):
    """The compulsory bytes of a path: inputs in its precision, y in it too."""
    def nbytes(path) -> float:
        item = 2 if path.precision in ("fp16", "bf16") else 4
        return float(item * (shape.N * shape.C * shape.Hp * shape.Wp + shape.M * shape.K + shape.M
                             + shape.N * shape.M * shape.PE * shape.PF))
    return nbytes
