"""cuDNN convolutions through PyTorch, NCHW and channels-last, in every precision, optionally
followed by ReLU and max-pooling (:func:`conv_paths`)."""
from __future__ import annotations

from .core import VendorPath, _as_torch, _torch_dtype


def conv_path(x, w, *, stride: int = 1, padding: int = 0, precision: str, layout: str = "NCHW",
              relu: bool = False, pool: tuple[int, int] | None = None, tolerance: float | None = None,
              bias=None) -> VendorPath:
    """One cuDNN convolution through ``torch.nn.functional.conv2d`` on
    ``x`` (N x C x H x W) and ``w`` (M x C x R x S), converted in setup to the
    precision and to ``layout`` ("NCHW", or "NHWC": PyTorch's channels_last
    memory format, cuDNN's fastest for tensor cores), optionally followed by
    ReLU and max-pooling (``pool`` = (kernel, stride)); ``bias`` (M values) is added by the
    convolution itself, as ``conv2d`` does. Returns the output in
    NCHW order (a view for NHWC; the check copies it, timed calls do not)."""
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"layout must be 'NCHW' or 'NHWC', got {layout!r}")
    ops = "conv" + (" + ReLU" if relu else "") + (f" + maxpool {pool[0]}/{pool[1]}" if pool else "")
    label = f"cuDNN (PyTorch) {precision}, {layout}, {ops}"

    def setup():
        import torch
        import torch.nn.functional as F
        dtype = _torch_dtype(precision)
        fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
        tx = _as_torch(x).to(dtype).contiguous(memory_format=fmt)
        tw = _as_torch(w).to(dtype).contiguous(memory_format=fmt)
        tb = None if bias is None else _as_torch(bias).to(dtype)

        def run():
            y = F.conv2d(tx, tw, tb, stride=stride, padding=padding)
            if relu:
                y = F.relu(y, inplace=True)
            if pool:
                y = F.max_pool2d(y, pool[0], pool[1])
            return y
        return run
    return VendorPath(label, "cuDNN (PyTorch)", precision, layout, setup, requires=("cupy", "torch"),
                      tolerance=tolerance)


def conv_paths(x, w, *, stride: int = 1, padding: int = 0, precisions=("fp32", "tf32", "fp16", "bf16"),
               layouts=("NCHW", "NHWC"), relu: bool = False, pool=None,
               fp32_tolerance: float | None = 1e-4, bias=None) -> list[VendorPath]:
    """Every cuDNN path for one convolution (add :func:`graph_paths` for graphs).
    cuDNN may compute fp32 with Winograd or FFT, which round differently from a
    direct sum: its fp32 check allows ``fp32_tolerance`` (default 1e-4)."""
    return [conv_path(x, w, stride=stride, padding=padding, precision=p, layout=layout, relu=relu, pool=pool,
                      tolerance=fp32_tolerance if p == "fp32" else None, bias=bias)
            for p in precisions for layout in layouts]
