"""The vendor side of the chapter: cuDNN and PyTorch on the same inputs, in the same run.

Per layer, :func:`gpulab.baselines.conv_paths` (cuDNN through PyTorch, NCHW and
channels-last, fp32 without tf32 / tf32 / fp16), once for the convolution
alone and once followed by ReLU and the 2 x 2 max-pool (what a layer of the
ladder computes). For the whole network, :func:`forward_paths`: the same
network in PyTorch (``conv2d``, ``relu``, ``max_pool2d``, ``linear``), eager
and in CUDA graphs, per precision and layout. :func:`gpulab.baselines.fastest`
then picks the baseline of matching precision that each step is judged by.
"""
from __future__ import annotations

import numpy as np

from ... import baselines
from .network import CONV1, CONV2, FLAT, Conv

PRECISIONS = ("fp32", "tf32", "fp16")
LAYOUTS = ("NCHW", "NHWC")


def layer_paths(layer: Conv, x, w, *, pooled: bool) -> list:
    """Every cuDNN path for one layer: the convolution alone, or with ReLU and max-pool."""
    return baselines.conv_paths(x, w, precisions=PRECISIONS, layouts=LAYOUTS, relu=pooled,
                                pool=(2, 2) if pooled else None)


def forward_path(x, weights: dict, *, precision: str, layout: str) -> baselines.VendorPath:
    """The whole network in PyTorch (cuDNN for the convolutions, cuBLAS for the linear
    layers) on x (N x 1 x 86 x 86, on the GPU); the logits are its output."""
    label = f"PyTorch forward {precision}, {layout}"

    def setup():
        import torch
        import torch.nn.functional as F
        dtype = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16}[precision]
        fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
        t = {k: torch.as_tensor(np.asarray(v), device="cuda").to(dtype)
             for k, v in weights.items() if k in ("conv1", "conv2", "fc1", "fc1_bias", "fc2", "fc2_bias")}
        t["conv1"] = t["conv1"].contiguous(memory_format=fmt)
        t["conv2"] = t["conv2"].contiguous(memory_format=fmt)
        tx = baselines._as_torch(x).to(dtype).contiguous(memory_format=fmt)

        def run():
            a = F.max_pool2d(F.relu(F.conv2d(tx, t["conv1"])), 2)
            a = F.max_pool2d(F.relu(F.conv2d(a, t["conv2"])), 2)
            h = F.relu(F.linear(a.reshape(a.shape[0], FLAT), t["fc1"], t["fc1_bias"]))
            return F.linear(h, t["fc2"], t["fc2_bias"])
        return run
    return baselines.VendorPath(label, "cuDNN + cuBLAS (PyTorch)", precision, layout, setup,
                                requires=("cupy", "torch"), tolerance=1e-4 if precision == "fp32" else None,
                                note="flatten in NCHW order (a copy for channels-last)")


def forward_paths(x, weights: dict, graphs: bool = True) -> list:
    """The PyTorch forward pass per precision and layout, and (``graphs``) each in a CUDA graph."""
    paths = [forward_path(x, weights, precision=p, layout=layout) for p in PRECISIONS for layout in LAYOUTS]
    return paths + (baselines.graph_paths(paths, launches=5) if graphs else [])


__all__ = ["layer_paths", "forward_path", "forward_paths", "CONV1", "CONV2"]
