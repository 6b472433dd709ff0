"""The problem every step solves, declared once: C (M x N) = A (M x K) times B^T with B stored
N x K (both operands K-major, the layout wgmma reads without a transpose), accumulated in float,
in half precision (step 7 also in bfloat16 and tf32: A, B and C are then bfloat16, held as uint16
bit patterns since NumPy and CuPy have no bfloat16, or float32). A :class:`Gemm` is one case:
its inputs, its float64 reference, its output's shape and type.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import fp8, ladder
from ...errors import KernelArgumentError

NAME = "hopper"
TITLE = "What wins on Hopper: a GEMM from mma.sync to TMA, wgmma and warp specialization"
#: Sizes the CPU backend checks every step at: none a multiple of its tile, so the edges are tested.
CHECK_SHAPES = ((200, 136, 712), (72, 264, 200))
#: The size the ladder is judged at (n^3: M = N = K = n), as the kernel files' predictions are.
MAIN_SIZE = 4096
#: Bytes of an element of A and B in each precision (and of C, but FP8's, which is bfloat16). A
#: slice is one 128-byte row whatever the type: 64 halves or bfloat16s, 32 floats, 128 FP8 codes.
ELEMENT_BYTES = {"fp16": 2, "bf16": 2, "tf32": 4, "fp8": 1}


def to_bf16_bits(x, xp=np):
    """float32 values -> bfloat16 bit patterns (uint16), rounded to nearest, ties to even, as the
    GPU's cvt.rn.bf16.f32 and the CPU backend's cuda_bf16.h do; NaN -> 0x7FFF."""
    u = xp.ascontiguousarray(x, dtype=xp.float32).view(xp.uint32)
    rounded = ((u + xp.uint32(0x7FFF) + ((u >> 16) & xp.uint32(1))) >> 16).astype(xp.uint16)
    return xp.where((u & xp.uint32(0x7FFFFFFF)) > xp.uint32(0x7F800000), xp.uint16(0x7FFF), rounded)


def from_bf16_bits(bits, xp=np):
    """bfloat16 bit patterns (uint16) -> float32, exactly."""
    return (xp.asarray(bits).astype(xp.uint32) << 16).view(xp.float32)


def storage_dtype(precision: str):
    """The array type of A, B and C in ``precision``."""
    return {"fp16": np.float16, "bf16": np.uint16, "tf32": np.float32}[precision]


def as_float(x, precision: str, xp=np):
    """Values of an array held in ``precision``'s storage type, as float32 (bfloat16 decoded)."""
    return from_bf16_bits(x, xp) if precision == "bf16" else xp.asarray(x).astype(xp.float32)


def poisoned(xp, shape, precision: str):
    """An output of ``precision``'s storage type filled with NaN (bfloat16's 0xFFFF)."""
    if precision == "bf16":
        return xp.full(shape, 0xFFFF, dtype=np.uint16)
    return xp.full(shape, np.nan, dtype=storage_dtype(precision))


def check_shape(M: int, N: int, K: int, element_bytes: int = 2) -> None:
    """The shapes every step accepts: positive sizes, K a multiple of 8 halves (4 floats): rows
    of 16 bytes."""
    for name, v in (("M", M), ("N", N), ("K", K)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise KernelArgumentError(f"{name} must be a positive int, got {v!r}")
    if (K * element_bytes) % 16:
        raise KernelArgumentError(f"K = {K}: the chapter's GEMMs need K a multiple of {16 // element_bytes} "
                                  f"({element_bytes}-byte elements), so that every row of A and B starts 16-byte "
                                  "aligned (what cp.async's 16-byte copies and a tensor map require)")


def make_inputs(M: int, N: int, K: int, seed: int | None = 0, precision: str = "fp16"):
    """A (M x K) and B (N x K), uniform in [-1, 1), in ``precision``'s storage type (host
    arrays; bf16 as bit patterns)."""
    rng = np.random.default_rng(seed)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    B = rng.uniform(-1, 1, (N, K)).astype(np.float32)
    if precision == "bf16":
        return to_bf16_bits(A), to_bf16_bits(B)
    return A.astype(storage_dtype(precision)), B.astype(storage_dtype(precision))


def reference(A, B, precision: str = "fp16") -> np.ndarray:
    """C = A B^T in float64 (host), of the inputs' values (tf32: of the full floats, so the
    error includes the operands' rounding to tf32, as cuBLAS's tf32 GEMM's is measured)."""
    return as_float(A, precision).astype(np.float64) @ as_float(B, precision).astype(np.float64).T


@dataclass(frozen=True)
class Gemm(ladder.Case):
    """One GEMM: C (M x N) = A (M x K) B^T, inputs A and B in a step's storage type."""

    M: int
    N: int
    K: int
    output_name = "C"

    @property
    def columns(self) -> dict:
        return {"M": self.M, "N": self.N, "K": self.K}

    def inputs(self, seed, precision="fp16") -> dict:
        A, B = make_inputs(self.M, self.N, self.K, seed, precision)
        return {"A": A, "B": B}

    def reference(self, inputs, precision="fp16") -> np.ndarray:
        return reference(inputs["A"], inputs["B"], precision)

    def output(self, precision="fp16"):
        return (self.M, self.N), storage_dtype(precision)

    def values(self, out, precision, xp=np):
        return as_float(out, precision, xp)

    def check_columns(self, step, inputs, out) -> dict:
        return {**({} if step.precision == "fp16" else {"precision": step.precision}), **self.columns}

    def label(self, step) -> str:
        typed = "" if step.precision == "fp16" else " " + step.precision
        return f"step {step.number}{typed} C ({self.M}x{self.N}x{self.K})"


@dataclass(frozen=True)
class Fp8Gemm(ladder.Case):
    """One FP8 GEMM (steps 9 and 10): A (M x K) in e4m3 and B (N x K) in ``kind_b``, each the codes
    (uint8) of a tensor uniform in [``low``, 1) divided by its per-tensor scale
    (:func:`gpulab.fp8.quantize`), and C (M x N) = scale_a scale_b A B^T in bfloat16 (bit
    patterns). The reference is float64 of the FP8 values the kernel reads, so what the check
    measures is the accumulation and C's rounding, not the inputs' rounding into FP8. All-positive
    inputs (``low=0``) are where the tensor cores' FP8 accumulation loses most: the sum grows with k."""

    M: int
    N: int
    K: int
    low: float = -1.0
    kind_b: str = "e4m3"
    output_name = "C"

    @property
    def columns(self) -> dict:
        return {"M": self.M, "N": self.N, "K": self.K, "operands": f"e4m3 x {self.kind_b}"}

    def inputs(self, seed, precision="fp8") -> dict:
        rng = np.random.default_rng(seed)
        A, scale_a = fp8.quantize(rng.uniform(self.low, 1.0, (self.M, self.K)))
        B, scale_b = fp8.quantize(rng.uniform(self.low, 1.0, (self.N, self.K)), self.kind_b)
        # The scales as 0-d float32 arrays: what the kernel is given, and what the reference multiplies by.
        return {"A": A, "B": B, "scale_a": np.array(scale_a, np.float32), "scale_b": np.array(scale_b, np.float32)}

    def reference(self, inputs, precision="fp8") -> np.ndarray:
        scales = float(inputs["scale_a"]) * float(inputs["scale_b"])
        return fp8.reference(inputs["A"], inputs["B"], "e4m3", self.kind_b) * scales

    def output(self, precision="fp8"):
        return (self.M, self.N), np.uint16

    def values(self, out, precision, xp=np):
        return from_bf16_bits(out, xp)

    def label(self, step) -> str:
        return f"step {step.number} C ({self.M}x{self.N}x{self.K}, e4m3 x {self.kind_b})"


#: Sizes the FP8 steps are checked at: none a multiple of the 128 x 256 tile or of a 128-deep slice,
#: K a multiple of 16 (the tensor maps' 16-byte rows of one-byte codes), inputs of both signs.
FP8_CHECK_SHAPES = ((200, 136, 720), (72, 264, 208))
#: Where the FP8 accumulation shows (the chapter's table): tiles partial in M and N, all-positive
#: inputs, K = 2048 (see :class:`Fp8Gemm`).
FP8_POSITIVE_SHAPE = (72, 136, 2048)


def fp8_cases(shapes=FP8_CHECK_SHAPES, low: float = -1.0) -> list[Fp8Gemm]:
    """The FP8 GEMMs of ``shapes``, (M, N, K) each, B in e4m3 and in e5m2."""
    return [Fp8Gemm(*shape, low=low, kind_b=kind) for shape in shapes for kind in ("e4m3", "e5m2")]


def cases(shapes=CHECK_SHAPES, fp8_shapes=FP8_CHECK_SHAPES) -> list:
    """The GEMMs of ``shapes``, (M, N, K) each, and the FP8 GEMMs of ``fp8_shapes`` (each step is
    checked on its own kind: ``Launcher.accepts``)."""
    return [Gemm(*shape) for shape in shapes] + fp8_cases(fp8_shapes)
