"""The problem every step solves, declared once: the network's two convolution layers (their
shapes and work in :mod:`.network`) at a batch of N images, the seeded inputs a check runs on and
their float64 reference. A :class:`LayerBatch` (one layer at a batch size, and which of its
outputs a step writes) is one case.

Steps 1-9 write a layer's convolution ``y`` (N x M x E x E, before ReLU and the pool); from step
10 on, the kernels write only the pooled output (N x M x P x P). A step's family says which
(``launcher.fused``), and :meth:`LayerBatch.for_step` makes the case that step is checked on.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from ... import ladder
from .network import LAYERS, Conv, conv, load_weights, pool2

NAME = "lenet"
TITLE = "A LeNet-style network's two convolution layers, on real handwritten digits"
#: The recorded run's batch sizes, and the one the chapter's numbers are quoted at.
BATCHES = (100, 1_000, 10_000)
MAIN_N = 10_000
#: Sizes of the correctness checks: 1, odd, and a full conv2 block count not a multiple of anything.
CHECK_SIZES = (1, 7, 100)


@functools.lru_cache(maxsize=1)
def trained_filters() -> dict[str, np.ndarray]:
    """The trained convolution filters (float32) by layer name, read once: every check reads them."""
    weights = load_weights()
    return {layer.name: weights[layer.name] for layer in LAYERS}


def storage_dtype(precision: str, layer: Conv):
    """What an fp16 step's layer reads: conv2 reads half-precision activations and filters; conv1
    reads the float32 images and filters in every precision."""
    return np.float16 if precision == "fp16" and layer.name == "conv2" else np.float32


@dataclass(frozen=True)
class LayerBatch(ladder.Case):
    """One layer on a batch of N: x (N x C x H x W) random in [0, 1) (images, or activations after
    a ReLU), the trained filters w, and the output a step writes: the convolution y (N x M x E x E)
    or, where ``pooled``, ReLU and the 2 x 2 max-pool of it (N x M x P x P). The inputs of a check
    of seed s are those of s + N (each size its own) and of the layer's channel count."""

    layer: Conv
    N: int
    pooled: bool = False

    @property
    def columns(self) -> dict:
        return {"layer": self.layer.name, "output": "pooled" if self.pooled else "conv", "N": self.N}

    def for_step(self, step) -> "LayerBatch":
        return dataclasses.replace(self, pooled=step.launcher.fused)

    def inputs(self, seed, precision="fp32") -> dict:
        seq = np.random.SeedSequence(None if seed is None else (seed + self.N, self.layer.C))
        x = np.random.default_rng(seq).random(self.layer.x_shape(self.N), dtype=np.float32)
        dtype = storage_dtype(precision, self.layer)
        # The reference reads what the step reads (x rounded to half for an fp16 conv2), with the
        # float32 filters.
        return {"x": x.astype(dtype), "w": trained_filters()[self.layer.name].astype(dtype)}

    def reference(self, inputs, precision="fp32") -> np.ndarray:
        y = conv(inputs["x"].astype(np.float32), trained_filters()[self.layer.name])
        return pool2(np.maximum(y, 0)) if self.pooled else y

    def output(self, precision="fp32"):
        shape = self.layer.pooled_shape(self.N) if self.pooled else self.layer.y_shape(self.N)
        return shape, np.float16 if precision == "fp16" else np.float32

    def check_columns(self, step, inputs, out) -> dict:
        return {**self.columns, "precision": step.precision}

    def label(self, step) -> str:
        return f"{step.label} {self.layer.name} {self.columns['output']} N={self.N}"


def cases(sizes=CHECK_SIZES) -> list[LayerBatch]:
    """The check's cases: both layers at each of ``sizes``, the batch's images in its order."""
    return [LayerBatch(layer, N) for N in sizes for layer in LAYERS]
