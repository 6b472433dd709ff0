"""The network, its trained weights and its float64 reference.

    x: N x 1 x 86 x 86
    conv1: 4 filters 1 x 7 x 7   -> N x 4 x 80 x 80, ReLU, 2 x 2 max-pool -> N x 4 x 40 x 40
    conv2: 16 filters 4 x 7 x 7  -> N x 16 x 34 x 34, ReLU, 2 x 2 max-pool -> N x 16 x 17 x 17
    fc1: 4624 -> 64 (+ bias), ReLU
    fc2: 64 -> 10 (+ bias): the logits; the prediction is their argmax.

The convolutions have no bias (as in the report), stride 1 and no padding;
every array is NCHW, row-major, and the flattening before fc1 takes the
pooled conv2 output in (channel, row, column) order. The weights were trained
on the CPU by ``tools/lenet_train.py`` and live in ``labdata/lenet/weights.npz``
with the predictions they give on the test batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .data import CLASSES, DATA_DIR, IMAGE, TEST_BATCH, load_npz

WEIGHTS_FILE = DATA_DIR / "weights.npz"
HIDDEN = 64
RETRAIN = ("retrain with `python tools/lenet_train.py` (about two minutes on two cores; it rewrites "
           "labdata/lenet/weights.npz)")


@dataclass(frozen=True)
class Conv:
    """One convolution layer: C x H x W in, M filters C x K x K, out M x E x E (stride 1, no pad),
    then ReLU and a 2 x 2 max-pool to M x E/2 x E/2."""

    name: str
    C: int
    H: int
    M: int
    K: int = 7

    @property
    def W(self) -> int:
        return self.H

    @property
    def E(self) -> int:
        return self.H - self.K + 1

    @property
    def P(self) -> int:
        """The pooled side."""
        return self.E // 2

    @property
    def taps(self) -> int:
        """Multiply-adds per output: C*K*K."""
        return self.C * self.K * self.K

    def x_shape(self, N: int) -> tuple:
        return (N, self.C, self.H, self.W)

    @property
    def w_shape(self) -> tuple:
        return (self.M, self.C, self.K, self.K)

    def y_shape(self, N: int) -> tuple:
        return (N, self.M, self.E, self.E)

    def pooled_shape(self, N: int) -> tuple:
        return (N, self.M, self.P, self.P)

    def flops(self, N: int) -> float:
        return 2.0 * N * self.M * self.E * self.E * self.taps

    def bytes(self, N: int, itemsize: int = 4, fused: bool = False, x_itemsize: int | None = None) -> float:
        """Fewest bytes: read x and w once, write y once (the pooled y when ``fused``);
        ``x_itemsize``: x's bytes per element where they differ from the rest's (the fp16
        steps' conv1 reads the float32 images)."""
        out = self.pooled_shape(N) if fused else self.y_shape(N)
        x_bytes = (itemsize if x_itemsize is None else x_itemsize) * np.prod(self.x_shape(N))
        return float(x_bytes + itemsize * (np.prod(self.w_shape) + np.prod(out)))


CONV1 = Conv("conv1", C=1, H=IMAGE, M=4)           # 86 -> 80, pool -> 40
CONV2 = Conv("conv2", C=4, H=CONV1.P, M=16)        # 40 -> 34, pool -> 17
LAYERS = (CONV1, CONV2)
FLAT = CONV2.M * CONV2.P * CONV2.P                 # 4624

WEIGHT_ARRAYS = {
    "conv1": ("float32", CONV1.w_shape), "conv2": ("float32", CONV2.w_shape),
    "fc1": ("float32", (HIDDEN, FLAT)), "fc1_bias": ("float32", (HIDDEN,)),
    "fc2": ("float32", (CLASSES, HIDDEN)), "fc2_bias": ("float32", (CLASSES,)),
    "test_predictions": ("uint8", (TEST_BATCH,)),
    "test_accuracy": ("float64", ()), "train_accuracy": ("float64", ()),
}


def load_weights(path: Path = WEIGHTS_FILE) -> dict[str, np.ndarray]:
    """The trained weights (float32) and the reference predictions on the test batch."""
    w = load_npz(path, WEIGHT_ARRAYS, "the trained weights", RETRAIN)
    for name in ("conv1", "conv2", "fc1", "fc2"):
        if not np.isfinite(w[name]).all():
            raise ValueError(f"{path}: '{name}' holds NaN or infinity; {RETRAIN}")
    return w


def pool2(y, xp=np):
    """2 x 2 max-pool with stride 2 (an odd last row or column is dropped)."""
    n, m, e, f = y.shape
    y = y[:, :, :e // 2 * 2, :f // 2 * 2].reshape(n, m, e // 2, 2, f // 2, 2)
    return y.max(axis=(3, 5))


def conv(x, w, xp=np, dtype=np.float64):
    """Valid convolution (cross-correlation, stride 1) of x (N, C, H, W) with w (M, C, K, K)
    in ``dtype``: im2col through a strided view, then one matrix product."""
    x = xp.ascontiguousarray(xp.asarray(x, dtype=dtype))
    w = xp.asarray(w, dtype=dtype)
    n, c, h, wd = x.shape
    m, _, k, _ = w.shape
    e, f = h - k + 1, wd - k + 1
    sn, sc, sh, sw = x.strides
    windows = xp.lib.stride_tricks.as_strided(x, shape=(n, e, f, c, k, k), strides=(sn, sh, sw, sc, sh, sw))
    cols = windows.reshape(n * e * f, c * k * k)
    y = cols @ w.reshape(m, c * k * k).T
    return xp.ascontiguousarray(y.reshape(n, e, f, m).transpose(0, 3, 1, 2))


def conv_layer(x, w, xp=np, dtype=np.float64, chunk: int = 64):
    """conv, ReLU and 2 x 2 max-pool, ``chunk`` images at a time (bounded memory)."""
    outs = [pool2(xp.maximum(conv(x[i:i + chunk], w, xp, dtype), 0), xp) for i in range(0, len(x), chunk)]
    return xp.concatenate(outs)


def forward(x, weights: dict, xp=np, dtype=np.float64, chunk: int = 64) -> dict:
    """Every intermediate of the forward pass in ``dtype``: conv1 (pre-activation),
    pool1, conv2 (pre-activation), pool2, hidden, logits. The convolutions' pre-pool
    outputs are kept only for inputs of at most ``chunk`` images."""
    out = {}
    x = xp.asarray(x)
    if x.ndim != 4 or x.shape[1:] != CONV1.x_shape(1)[1:]:
        raise ValueError(f"the network takes N x 1 x {IMAGE} x {IMAGE} inputs, got {x.shape}")
    if len(x) <= chunk:
        out["conv1"] = conv(x, weights["conv1"], xp, dtype)
        out["pool1"] = pool2(xp.maximum(out["conv1"], 0), xp)
        out["conv2"] = conv(out["pool1"], weights["conv2"], xp, dtype)
        out["pool2"] = pool2(xp.maximum(out["conv2"], 0), xp)
    else:
        out["pool1"] = conv_layer(x, weights["conv1"], xp, dtype, chunk)
        out["pool2"] = conv_layer(out["pool1"], weights["conv2"], xp, dtype, chunk)
    flat = out["pool2"].reshape(len(x), FLAT)
    fc = {k: xp.asarray(weights[k], dtype=dtype) for k in ("fc1", "fc1_bias", "fc2", "fc2_bias")}
    out["hidden"] = xp.maximum(flat @ fc["fc1"].T + fc["fc1_bias"], 0)
    out["logits"] = out["hidden"] @ fc["fc2"].T + fc["fc2_bias"]
    return out


def predict(x, weights: dict, xp=np, dtype=np.float64) -> np.ndarray:
    """The predicted class of each image (argmax of the logits)."""
    return xp.argmax(forward(x, weights, xp, dtype)["logits"], axis=1)


def accuracy(predictions, labels) -> float:
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    if predictions.shape != labels.shape:
        raise ValueError(f"{predictions.shape[0] if predictions.ndim else 0} predictions for "
                         f"{labels.shape[0] if labels.ndim else 0} labels")
    return float((predictions == labels).mean())


def flops(N: int) -> dict:
    """FLOPs per part of the forward pass for N images (multiply-add = 2)."""
    return {"conv1": CONV1.flops(N), "conv2": CONV2.flops(N), "fc1": 2.0 * N * FLAT * HIDDEN,
            "fc2": 2.0 * N * HIDDEN * CLASSES}
