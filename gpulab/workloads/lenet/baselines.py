"""The vendor side of the chapter: cuDNN and PyTorch on the same inputs, in the same run.

Per layer, :func:`gpulab.baselines.conv_paths` (cuDNN through PyTorch, NCHW and
channels-last, fp32 without tf32 / tf32 / fp16), once for the convolution
alone and once followed by ReLU and the 2 x 2 max-pool (what a layer of the
ladder computes). For the whole network, :func:`forward_paths`: the same
network in PyTorch (``conv2d``, ``relu``, ``max_pool2d``, ``linear``), eager
and in CUDA graphs, per precision and layout. :func:`gpulab.baselines.fastest`
then picks the baseline of matching precision that each step is judged by.

cuDNN has no kernel built for conv1's one input channel and four filters, nor
tensor-core kernels for conv2's four input channels at full speed, so the
strongest vendor path is the one a practitioner would write: the channels
zero-padded to :data:`PAD_CHANNELS` in fp16 channels-last (:func:`padded_layer_paths`,
:func:`padded_forward_paths`), eager and in CUDA graphs. What each pays per call
is what a pipeline pays per batch: conv1 writes the float32 images into channel 0
of a zeroed fp16 buffer every call (the images are new each batch); the padded
filters are built once; conv1's padded output (its extra channels are zero) is
conv2's padded input as it is, so conv2 pays no padding and nothing is sliced
between the layers; only the check reads the real channels out.
"""
from __future__ import annotations

import numpy as np

from ... import baselines
from .network import CONV1, CONV2, FLAT, Conv

PRECISIONS = ("fp32", "tf32", "fp16")
LAYOUTS = ("NCHW", "NHWC")
#: Channel count the padded paths pad conv1's filters and conv2's input channels to: cuDNN's
#: fp16 tensor-core kernels load channels-last pixels in 16-byte vectors (8 halves).
PAD_CHANNELS = 8
#: Channels the images are padded to in the padded paths' conv1 (4: 8-byte pixels, half the
#: bytes of 8, if cuDNN has a kernel for them; 8: its common 16-byte case).
IMAGE_CHANNELS = (4, 8)


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



# ----------------------------------------------------------------- channels padded for cuDNN
def pad_filters(w: np.ndarray, filters: int, channels: int) -> np.ndarray:
    """``w`` (M x C x K x K) zero-padded to ``filters`` x ``channels`` x K x K: a padded filter
    gives a zero output channel, a padded input channel adds nothing."""
    w = np.asarray(w)
    if w.ndim != 4 or filters < w.shape[0] or channels < w.shape[1]:
        raise ValueError(f"expected filters of shape (M, C, K, K) with M <= {filters} and C <= {channels}, "
                         f"got {w.shape}")
    out = np.zeros((filters, channels) + w.shape[2:], w.dtype)
    out[:w.shape[0], :w.shape[1]] = w
    return out


def _padded_label(image_channels: int | None, ops: str) -> str:
    images = f", images to {image_channels}" if image_channels not in (None, PAD_CHANNELS) else ""
    return f"cuDNN (PyTorch) fp16, NHWC, padded to {PAD_CHANNELS} channels{images}, {ops}"


def _real_channels(M: int):
    """Maps a padded path's output (N x PAD_CHANNELS x ...) to the reference's M channels."""
    def to_reference(out):
        import cupy
        return cupy.ascontiguousarray(out[:, :M])
    return to_reference


def padded_conv1_path(x, w, *, image_channels: int, pooled: bool) -> baselines.VendorPath:
    """conv1 on cuDNN's fp16 tensor-core kernels: each call writes the float32 images ``x``
    (N x 1 x 86 x 86, on the GPU) into channel 0 of a zeroed fp16 channels-last buffer of
    ``image_channels`` channels (the cast and the padding a pipeline pays for every batch), then
    convolves with the filters padded once to PAD_CHANNELS x ``image_channels`` (and ``pooled``:
    ReLU and 2 x 2 max-pool). Its output keeps the padded channels (zero), as the padded conv2
    reads them; the check reads channels 0-3."""
    ops = "conv + ReLU + maxpool 2/2" if pooled else "conv"

    def setup():
        import torch
        import torch.nn.functional as F
        tx = baselines._as_torch(x)
        shape = (tx.shape[0], image_channels) + tuple(tx.shape[2:])
        buf = torch.zeros(shape, dtype=torch.float16, device=tx.device).contiguous(memory_format=torch.channels_last)
        tw = torch.as_tensor(pad_filters(np.asarray(w, np.float32), PAD_CHANNELS, image_channels),
                             device=tx.device).half().contiguous(memory_format=torch.channels_last)
        to_reference = _real_channels(CONV1.M)

        def run():
            buf[:, :1].copy_(tx)
            y = F.conv2d(buf, tw)
            if pooled:
                y = F.max_pool2d(F.relu(y), 2)
            return y, to_reference
        return run
    return baselines.VendorPath(_padded_label(image_channels, ops), "cuDNN (PyTorch)", "fp16", "NHWC", setup,
                                requires=("cupy", "torch"),
                                note=f"per call: images cast to fp16 into a zeroed {image_channels}-channel "
                                     f"channels-last buffer; filters padded to {PAD_CHANNELS} once; "
                                     "output keeps its zero channels (conv2's padded input)")


def padded_conv2_path(a, w, *, pooled: bool) -> baselines.VendorPath:
    """conv2 on cuDNN's fp16 tensor-core kernels, its input ``a`` (N x 4 x 40 x 40, the pooled
    conv1 output) as the padded conv1 writes it: PAD_CHANNELS channels, fp16 channels-last,
    built in setup (a pipeline pays nothing for it); the filters padded once to 16 x PAD_CHANNELS."""
    ops = "conv + ReLU + maxpool 2/2" if pooled else "conv"

    def setup():
        import torch
        import torch.nn.functional as F
        ta = baselines._as_torch(a)
        padded = torch.zeros((ta.shape[0], PAD_CHANNELS) + tuple(ta.shape[2:]), dtype=torch.float16,
                             device=ta.device)
        padded[:, :ta.shape[1]] = ta
        padded = padded.contiguous(memory_format=torch.channels_last)
        tw = torch.as_tensor(pad_filters(np.asarray(w, np.float32), CONV2.M, PAD_CHANNELS),
                             device=ta.device).half().contiguous(memory_format=torch.channels_last)

        def run():
            y = F.conv2d(padded, tw)
            return F.max_pool2d(F.relu(y), 2) if pooled else y
        return run
    return baselines.VendorPath(_padded_label(None, ops), "cuDNN (PyTorch)", "fp16", "NHWC", setup,
                                requires=("cupy", "torch"),
                                note=f"input as the padded conv1 writes it ({PAD_CHANNELS} channels, fp16, "
                                     "channels-last; nothing paid per call); filters padded once")


def padded_layer_paths(layer: Conv, x, w, *, pooled: bool, graphs: bool = True) -> list:
    """The padded cuDNN paths of one layer (conv1: one per :data:`IMAGE_CHANNELS`), eager and
    (``graphs``) each in a CUDA graph."""
    if layer is CONV1:
        paths = [padded_conv1_path(x, w, image_channels=c, pooled=pooled) for c in IMAGE_CHANNELS]
    elif layer is CONV2:
        paths = [padded_conv2_path(x, w, pooled=pooled)]
    else:
        raise ValueError(f"expected CONV1 or CONV2, got {layer!r}")
    return paths + (baselines.graph_paths(paths, launches=5) if graphs else [])


def padded_forward_path(x, weights: dict, *, image_channels: int) -> baselines.VendorPath:
    """The whole network in PyTorch, fp16 channels-last, with conv1 and conv2 padded as
    :func:`padded_conv1_path` and :func:`padded_conv2_path` (the images padded in each call)."""
    label = f"PyTorch forward fp16, NHWC, padded to {PAD_CHANNELS} channels" + (
        f", images to {image_channels}" if image_channels != PAD_CHANNELS else "")

    def setup():
        import torch
        import torch.nn.functional as F
        tx = baselines._as_torch(x)
        fmt = torch.channels_last
        buf = torch.zeros((tx.shape[0], image_channels) + tuple(tx.shape[2:]), dtype=torch.float16,
                          device=tx.device).contiguous(memory_format=fmt)

        def on_gpu(array):
            return torch.as_tensor(np.asarray(array, np.float32), device=tx.device).half()
        w1 = on_gpu(pad_filters(weights["conv1"], PAD_CHANNELS, image_channels)).contiguous(memory_format=fmt)
        w2 = on_gpu(pad_filters(weights["conv2"], CONV2.M, PAD_CHANNELS)).contiguous(memory_format=fmt)
        fc = {k: on_gpu(weights[k]) for k in ("fc1", "fc1_bias", "fc2", "fc2_bias")}

        def run():
            buf[:, :1].copy_(tx)
            a = F.max_pool2d(F.relu(F.conv2d(buf, w1)), 2)
            a = F.max_pool2d(F.relu(F.conv2d(a, w2)), 2)
            h = F.relu(F.linear(a.reshape(a.shape[0], FLAT), fc["fc1"], fc["fc1_bias"]))
            return F.linear(h, fc["fc2"], fc["fc2_bias"])
        return run
    return baselines.VendorPath(label, "cuDNN + cuBLAS (PyTorch)", "fp16", "NHWC", setup, requires=("cupy", "torch"),
                                note="images padded per call; filters once; flatten in NCHW order (a copy)")


def padded_forward_paths(x, weights: dict, graphs: bool = True) -> list:
    """:func:`padded_forward_path` per :data:`IMAGE_CHANNELS`, eager and (``graphs``) in CUDA graphs."""
    paths = [padded_forward_path(x, weights, image_channels=c) for c in IMAGE_CHANNELS]
    return paths + (baselines.graph_paths(paths, launches=5) if graphs else [])


__all__ = ["layer_paths", "forward_path", "forward_paths", "padded_layer_paths", "padded_forward_paths",
           "pad_filters", "PAD_CHANNELS", "CONV1", "CONV2"]
