"""The network of the fcnet chapter, declared once: a 72-64-64-4 fully-connected network's
inference,

    Y = W3 relu(W2 relu(W1 X))

applied to N input vectors at once: the shapes, the two cases, the seeded weights and inputs,
the FLOP and byte counts, the float64 reference, every form a kernel reads the weights in, and
what a case needs of the device's memory; a :class:`Vectors` is one case of a check.

Layout (every step): X is feature-major, ``X[k, v]`` at ``k*N + v`` (72 x N),
so consecutive threads reading consecutive vectors read consecutive
addresses; Y is 4 x N the same way. Weights are row-major as in ``y = W x``
(``W1`` is 64 x 72); some steps take them transposed or in half precision,
and each launch names which form it reads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ... import ladder
from ...check import compare
from ...device import limits as device_limits
from ...roofline import floors_ms as roofline_floors

NAME = "fcnet"
TITLE = "A fully-connected network's inference, from five kernel launches to one kernel at the hardware limit"

IN, HID, OUT = 72, 64, 4          # inputs, hidden units per layer, outputs
#: The two cases of the report: 12,800 vectors ("small") and 5,120,000 ("large").
SIZES = {"small": 12_800, "large": 5_120_000}
#: Correctness sizes: 1000 leaves a partial last tile for the tiled steps (32,
#: 64 or 128 vectors) and takes the float4 paths (a multiple of 4); 4099 is odd,
#: so every step's last block is partial and the scalar paths run.
CHECK_SIZES = (1000, 4099)
MACS_PER_VECTOR = IN * HID + HID * HID + HID * OUT          # 8,960 multiply-adds
FLOPS_PER_VECTOR = 2 * MACS_PER_VECTOR
BYTES_PER_VECTOR = 4 * (IN + OUT)                           # read 72 floats, write 4
WEIGHT_SEED, INPUT_SEED = 2026, 7


def work(n: int) -> dict:
    """FLOPs and the fewest bytes of device memory one inference of n vectors needs."""
    return {"flops": float(FLOPS_PER_VECTOR * n), "bytes": float(BYTES_PER_VECTOR * n)}


def floors_ms(n: int, tflops: float, gbs: float) -> dict:
    """The arithmetic floor and the memory floor of one inference of n vectors,
    in ms, at ``tflops`` (FP32 TFLOP/s) and ``gbs`` (GB/s of device memory):
    pass a run's measured ceilings (:func:`measured_rates`) or the datasheet's."""
    w = work(n)
    floors = roofline_floors(w["flops"], w["bytes"], peak_gflops=tflops * 1e3, peak_gbs=gbs)
    return {"arithmetic_ms": floors["compute_ms"], "memory_ms": floors["memory_ms"]}


def make_weights(seed: int = WEIGHT_SEED) -> dict[str, np.ndarray]:
    """W1 (64x72), W2 (64x64), W3 (4x64), float32, uniform in +-sqrt(6/fan_in)
    (He initialisation: activations keep their scale through the ReLUs, so
    half precision neither overflows nor underflows)."""
    rng = np.random.default_rng(seed)
    shapes = {"W1": (HID, IN), "W2": (HID, HID), "W3": (OUT, HID)}
    return {name: rng.uniform(-1, 1, shape).astype(np.float32) * np.float32(math.sqrt(6 / shape[1]))
            for name, shape in shapes.items()}


def make_inputs(n: int, seed: int = INPUT_SEED) -> np.ndarray:
    """X: 72 x n float32, uniform in [-1, 1), feature-major."""
    if n < 1:
        raise ValueError(f"n must be a positive number of vectors, got {n}")
    return np.random.default_rng(seed).uniform(-1, 1, (IN, n)).astype(np.float32)


#: Vectors the reference computes at once: its float64 intermediates are HID x chunk (134 MB at
#: 262,144), not HID x n (2.6 GB for the large case's 5,120,000, which with the inputs cast to
#: float64 did not fit an 8 GB GPU beside the kernels' own buffers).
REFERENCE_CHUNK = 262_144


def reference(x, weights: dict, dtype=np.float64, xp=np, chunk: int = REFERENCE_CHUNK):
    """Y = W3 relu(W2 relu(W1 X)) computed in ``dtype`` (float64 for checks;
    float32 to measure what half precision costs against single precision), ``chunk``
    vectors (columns of X) at a time: the same numbers, in a fraction of the memory."""
    if chunk < 1:
        raise ValueError(f"chunk must be a positive number of vectors, got {chunk}")
    w = {k: xp.asarray(v, dtype=dtype) for k, v in weights.items()}
    n = x.shape[1]
    y = xp.empty((w["W3"].shape[0], n), dtype=dtype)
    for start in range(0, n, chunk):
        h = xp.maximum(w["W1"] @ xp.asarray(x[:, start:start + chunk], dtype=dtype), 0)
        h = xp.maximum(w["W2"] @ h, 0)
        y[:, start:start + chunk] = w["W3"] @ h
    return y


#: The share of the device's memory one case of the record may use (the rest: PyTorch's cache,
#: cuBLAS's workspaces, the vendor paths' own copies).
MEMORY_FRACTION = 0.75


def footprint_bytes(n: int) -> int:
    """Device memory the record holds at once for a case of ``n`` vectors: the fp32 inputs and
    output, the H1/H2 scratch of the unfused steps, the float64 reference output (and one chunk of
    its intermediates), the fp32 reference, and the largest vendor path's copies (inputs in half
    precision and two fp32 hidden activations)."""
    chunk = min(n, REFERENCE_CHUNK)
    ours = 4 * n * (IN + OUT + 2 * HID)
    ref = 8 * n * OUT + 4 * n * OUT + 8 * chunk * (IN + 2 * HID)
    vendor = 2 * n * IN + 4 * n * 2 * HID + 4 * n * OUT
    return int(ours + ref + vendor)


def plan_sizes(sizes: dict, limits=None) -> tuple[dict, list[dict]]:
    """The cases of ``sizes`` ({case: n}) whose :func:`footprint_bytes` fits
    :data:`MEMORY_FRACTION` of this device's memory (``limits``; default: this device's, or the
    simulated one's), and a ``skipped`` row with the reason for each that does not."""
    here = limits if limits is not None else device_limits()
    chosen, skipped = {}, []
    for case, n in sizes.items():
        why = here.memory_fits(footprint_bytes(n), MEMORY_FRACTION) if here is not None else None
        if why:
            skipped.append({"step": "all", "variant": f"{case} case, every step and vendor path",
                            "library": "", "precision": "", "size": n, "reason": why})
        else:
            chosen[case] = n
    return chosen, skipped


def weight_forms(weights: dict) -> dict[str, np.ndarray]:
    """Every form a kernel reads the weights in, by the names launches use:
    w1 row-major fp32, w1t transposed, w1h half, w1th transposed half, and the
    tensor-core step's zero-padded half matrices (w1tc: 64 x 80, w3tc: 16 x 64)."""
    forms = {}
    for i in (1, 2, 3):
        w = weights[f"W{i}"]
        forms[f"w{i}"] = np.ascontiguousarray(w)
        forms[f"w{i}t"] = np.ascontiguousarray(w.T)
        forms[f"w{i}h"] = w.astype(np.float16)
        forms[f"w{i}th"] = np.ascontiguousarray(w.T).astype(np.float16)
    pad1 = np.zeros((HID, TC_K1), np.float16)
    pad1[:, :IN] = weights["W1"]
    pad3 = np.zeros((TC_M3, HID), np.float16)
    pad3[:OUT] = weights["W3"]
    forms["w1tc"], forms["w2tc"], forms["w3tc"] = pad1, weights["W2"].astype(np.float16), pad3
    return forms


TC_K1 = 80     # the tensor-core step pads layer 1's 72 inputs to a multiple of 16
TC_M3 = 16     # and layer 3's 4 outputs to one 16-row tile
#: Step 15's dynamic shared memory (SMEM_BYTES in its kernel file).
TC_SHARED_BYTES = 2 * (HID * (TC_K1 + 8) + HID * (HID + 8) + TC_M3 * (HID + 8) + TC_K1 * 136
                       + HID * 136) + 8 * 16 * 16 * 4
#: The ReLUs of the chain: after layers 1 and 2, not after the output layer.
RELU = (True, True, False)


@dataclass(frozen=True)
class Vectors(ladder.Case):
    """One inference of ``n`` input vectors through the seeded network: X (72 x n) from the
    check's seed plus ``offset`` (each check size its own inputs), the weights in every form a
    kernel reads (:func:`weight_forms`), Y (4 x n, float32) the output. A check row also says
    which kernels ran and, for a half-precision step, its error against the float32 result
    (``vs_fp32``)."""

    n: int
    offset: int = 0
    output_name = "y"

    @property
    def columns(self) -> dict:
        return {"n": self.n}

    def inputs(self, seed, precision="fp32") -> dict:
        weights = make_weights()
        x = make_inputs(self.n, None if seed is None else seed + self.offset)
        return {"x": x, **{f"W{i}": weights[f"W{i}"] for i in (1, 2, 3)}, **weight_forms(weights)}

    @staticmethod
    def weights(inputs: dict) -> dict:
        return {k: inputs[k] for k in ("W1", "W2", "W3")}

    def reference(self, inputs, precision="fp32") -> np.ndarray:
        return reference(inputs["x"], self.weights(inputs))

    def output(self, precision="fp32"):
        return (OUT, self.n), np.float32

    def check_columns(self, step, inputs, out) -> dict:
        vs32 = compare(out, reference(inputs["x"], self.weights(inputs), np.float32), step.precision).rel_error
        return {"kernel": ", ".join(step.kernels), "n": self.n, "precision": step.precision, "vs_fp32": vs32}

    def label(self, step) -> str:
        return f"{step.file} n={self.n}"


def cases(sizes=CHECK_SIZES) -> list[Vectors]:
    """The check's cases: ``sizes`` vectors each, every size its own inputs (seed + 100 + its index)."""
    return [Vectors(n, 100 + i) for i, n in enumerate(sizes)]
