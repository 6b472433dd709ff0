"""8-bit floats on the host: the e4m3 and e5m2 codes as NumPy uint8 arrays, per-tensor scales,
and a model of how Hopper's tensor cores accumulate FP8 products.

NumPy and CuPy have no 8-bit float type, so an FP8 array is its codes (uint8), as a bfloat16 array
is its bit patterns (uint16) in the hopper chapter.

    e4m3  sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinity, 0x7F and 0xFF are NaN;
          largest finite 448, smallest normal 2^-6, smallest subnormal 2^-9
    e5m2  sign, 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like (0x7C infinity, 0x7D-0x7F
          NaN); largest finite 57344, smallest normal 2^-14, smallest subnormal 2^-16

:func:`to_fp8` rounds as CUDA's ``__nv_cvt_float_to_fp8`` does (to nearest, ties to even; with
``satfinite``, what the fp8 types' constructors and the GPU's ``cvt.rn.satfinite`` use, values
past the largest finite one, infinities included, become it); it is written from the formats'
definitions, not from CUDA's algorithm, so that the tests can hold one against the other.

:func:`tensor_core_gemm` is the GEMM as Hopper's FP8 ``wgmma`` computes it, after the model of
Khattak and Mikaitis ("Accurate Models of NVIDIA Tensor Cores", arXiv:2512.07004, 2025; its
H100 parameters in github.com/north-numerical-computing/MATLAB-tensor-core, models/H100TC.m):
each instruction adds its 32 products of a row and a column (k32) and the accumulator it is given
in one multi-term adder that keeps 13 fraction bits below the largest exponent among them,
cutting (not rounding) the bits below, and cuts its sum to 13 fraction bits too. NVIDIA does not
document this; the model is the cited measurement's, validated there bit for bit against an H100
on random inputs. It is the limit DeepSeek-V3's report describes (section 3.3.2: "around 14 bits"),
and what promoting the partial sums to float registers every few instructions repairs
(``promote_every``). The CPU backend's FP8 wgmma computes the same model
(gpulab/cpu/include/gpulab_hopper_cpu.h).
"""
from __future__ import annotations

import functools

import numpy as np

from .errors import KernelArgumentError

#: The formats: exponent bits, mantissa bits, bias, largest finite code.
FORMATS = {"e4m3": (4, 3, 7, 0x7E), "e5m2": (5, 2, 15, 0x7B)}
#: Largest finite value of each kind.
MAX = {"e4m3": 448.0, "e5m2": 57344.0}
#: Fraction bits Hopper's FP8 tensor-core adder keeps (the model's neab = -10 below float's 23).
ACCUMULATOR_FRACTION_BITS = 13
#: Products one FP8 wgmma adds per output: its k (m64nNk32).
K_PER_INSTRUCTION = 32


def _kind(kind: str) -> tuple:
    if kind not in FORMATS:
        raise KernelArgumentError(f"kind must be one of {sorted(FORMATS)}, got {kind!r}")
    return FORMATS[kind]


@functools.lru_cache(maxsize=None)
def decode_table(kind: str) -> np.ndarray:
    """The float64 value of each of the 256 codes (NaN for the NaN codes), from the format's
    definition: exponent field 0 is subnormal (m 2^(1 - bias - mantissa bits))."""
    ebits, mbits, bias, _ = _kind(kind)
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    e = (codes >> mbits) & ((1 << ebits) - 1)
    m = codes & ((1 << mbits) - 1)
    mag = np.where(e == 0, m * 2.0 ** (1 - bias - mbits), (1 + m / 2 ** mbits) * 2.0 ** (e - bias))
    if kind == "e4m3":
        mag = np.where((codes & 0x7F) == 0x7F, np.nan, mag)
    else:
        mag = np.where(e == 31, np.where(m == 0, np.inf, np.nan), mag)
    table = sign * mag
    table.flags.writeable = False
    return table


def from_fp8(codes, kind: str = "e4m3", xp=np):
    """FP8 codes (uint8) -> float32 values, exactly (every FP8 value is a float)."""
    table = xp.asarray(decode_table(kind).astype(np.float32))
    return table[xp.asarray(codes).astype(xp.uint8)]


def to_fp8(x, kind: str = "e4m3", satfinite: bool = True, xp=np):
    """Values (float32 or float64) -> FP8 codes (uint8), to nearest, ties to the even code.

    Past the largest finite value: with ``satfinite`` that value of the sign; without, e4m3 gives
    NaN (0x7F | sign) and e5m2 infinity, where round-to-nearest would leave the finite range (e5m2's
    tie at 61440 goes to the even infinity, e4m3's at 464 to the even 448). A magnitude of at most
    half the smallest subnormal is a zero of its sign. NaN -> 0x7F. ``xp``: the array module of
    ``x`` (CuPy: the codes made on the GPU, by the same rule)."""
    _, _, _, top = _kind(kind)
    x = xp.asarray(x, dtype=xp.float64)
    table = decode_table(kind)
    # The finite magnitudes in code order, and past them the next value the format would have
    # (480 for e4m3, whose code 0x7F is NaN; 65536, infinity's code 0x7C, for e5m2).
    ladder = xp.asarray(np.append(table[:top + 1], 2 * table[top] - table[top - 1] if kind == "e4m3" else 65536.0))
    mag = xp.abs(x)
    hi = xp.clip(xp.searchsorted(ladder, mag, side="left"), 1, top + 1)
    lo = hi - 1
    down, up = mag - ladder[lo], ladder[hi] - mag
    code = xp.where((up < down) | ((up == down) & (hi % 2 == 0)), hi, lo)
    code = xp.where(mag >= ladder[-1], top + 1, code)          # at or past the next value (inf too)
    beyond = code == top + 1
    code = xp.where(beyond & satfinite, top, code)
    if kind == "e4m3":
        code = xp.where(beyond & ~satfinite, 0x7F, code)
    out = code.astype(xp.uint8) | xp.where(xp.signbit(x), 0x80, 0).astype(xp.uint8)
    return xp.where(xp.isnan(x), xp.uint8(0x7F), out).astype(xp.uint8)


def scale_for(x, kind: str = "e4m3", xp=np) -> float:
    """The per-tensor scale that maps ``x``'s largest magnitude onto the kind's largest finite
    value (what torch's float8 recipes call amax / fp8_max): store to_fp8(x / scale), multiply
    the product by the two scales."""
    x = xp.asarray(x)
    amax = float(xp.max(xp.abs(x))) if x.size else 0.0
    return amax / MAX[kind] if amax > 0 else 1.0


def quantize(x, kind: str = "e4m3", xp=np):
    """(codes, scale): ``x`` / scale in FP8, with the per-tensor scale of :func:`scale_for` (as a
    float32, the kernels' type); ``xp`` the array module of ``x``."""
    x = xp.asarray(x)
    scale = np.float32(scale_for(x, kind, xp))
    return to_fp8(x.astype(xp.float64) / np.float64(scale), kind, xp=xp), float(scale)


# ------------------------------------------------------------------ the tensor cores' accumulation
def _nominal_exponents(values, kind: str) -> np.ndarray:
    """floor(log2 |v|) of FP8 values, the format's smallest normal exponent for subnormals, and a
    large negative number for zeros (a product's exponent is the sum of its operands')."""
    _, _, bias, _ = _kind(kind)
    mag = np.abs(values)
    e = np.frexp(mag)[1] - 1
    return np.where(mag == 0, -100000, np.maximum(e, 1 - bias))


def _cut(x, quantum):
    """x cut toward zero to a multiple of quantum (a power of two)."""
    return np.trunc(x / quantum) * quantum


def _cut_to_fraction_bits(s, bits: int):
    """s cut toward zero to ``bits`` fraction bits below its own leading bit."""
    e = np.frexp(s)[1]                                   # s = f 2^e, 0.5 <= |f| < 1
    return np.where(s == 0, 0.0, np.trunc(np.ldexp(s, bits + 1 - e)) * np.ldexp(1.0, e - bits - 1))


def wgmma_block(a, b, c, kind_a: str = "e4m3", kind_b: str = "e4m3",
                bits: int = ACCUMULATOR_FRACTION_BITS) -> np.ndarray:
    """One FP8 wgmma's sum for every output: a (M, 32) and b (N, 32) FP8 values (float64), c the
    (M, N) float32 accumulators it adds to. The 32 products (exact) and c are aligned to the largest
    exponent among them -- a product's being the sum of its operands' exponents -- and cut to
    ``bits`` fraction bits below it; their exact sum is cut to ``bits`` fraction bits below its own."""
    a, b, c = np.asarray(a, np.float64), np.asarray(b, np.float64), np.asarray(c, np.float64)
    products = a[:, None, :] * b[None, :, :]
    exps = _nominal_exponents(a, kind_a)[:, None, :] + _nominal_exponents(b, kind_b)[None, :, :]
    exps = np.where(products == 0, -200000, exps)
    c_exp = np.where(c == 0, -200000, np.frexp(c)[1] - 1)
    top = np.maximum(exps.max(axis=-1), c_exp)
    quantum = np.ldexp(1.0, np.maximum(top - bits, -1074))
    s = _cut(products, quantum[..., None]).sum(axis=-1) + _cut(c, quantum)
    return _cut_to_fraction_bits(s, bits).astype(np.float32)


def tensor_core_gemm(A, B, kind_a: str = "e4m3", kind_b: str = "e4m3", promote_every: int | None = None,
                     bits: int = ACCUMULATOR_FRACTION_BITS) -> np.ndarray:
    """A (M x K) times B^T (B N x K), FP8 codes, as a chain of FP8 wgmma instructions computes it
    into float32 accumulators (:func:`wgmma_block` per k32, K padded with zeros as the kernels' copies
    pad it). ``promote_every``: the accumulator restarts from zero every that many instructions and
    each partial sum is added into a float32 total with an ordinary (rounded) float add, as the
    promoting kernel does (kernels/hopper/10_fp8_promotion.cu: 4, one 128-deep slice)."""
    a = decode_table(kind_a)[np.asarray(A, np.uint8)]
    b = decode_table(kind_b)[np.asarray(B, np.uint8)]
    M, K = a.shape
    N = b.shape[0]
    group = K_PER_INSTRUCTION * (promote_every or 1)
    pad = -K % group
    a = np.pad(a, ((0, 0), (0, pad)))
    b = np.pad(b, ((0, 0), (0, pad)))
    total = np.zeros((M, N), np.float32)
    acc = np.zeros((M, N), np.float32)
    for i, k in enumerate(range(0, K + pad, K_PER_INSTRUCTION)):
        if promote_every and i % promote_every == 0:
            acc = np.zeros((M, N), np.float32)
        acc = wgmma_block(a[:, k:k + K_PER_INSTRUCTION], b[:, k:k + K_PER_INSTRUCTION], acc, kind_a, kind_b, bits)
        if promote_every and i % promote_every == promote_every - 1:
            total = total + acc                          # float32 + float32: one rounding
    return total if promote_every else acc


def reference(A, B, kind_a: str = "e4m3", kind_b: str = "e4m3") -> np.ndarray:
    """A B^T in float64 of the decoded FP8 inputs (the exact product of what the kernel reads)."""
    return decode_table(kind_a)[np.asarray(A, np.uint8)] @ decode_table(kind_b)[np.asarray(B, np.uint8)].T
