"""The FP8 types of cuda_fp8.h (the CPU backend's own header; on a GPU, CUDA's): every one of the
256 codes of e4m3 and e5m2 decoded, conversions from float, double, half and bfloat16 against codes
worked out by hand (ties to even, subnormals, saturation, NaN), the types' constructors, pairs, and
gpulab.fp8's host codec (written from the formats, not from CUDA's algorithm) against the header on
random values of every magnitude."""
import math

import numpy as np
import pytest

from gpulab import fp8
from gpulab.kernels import get_backend, load_module
from gpulab.workloads.hopper.launchers import GPU_OPTIONS
from gpulab.workloads.hopper.problem import from_bf16_bits, to_bf16_bits

UNITS = "tests/kernels/fp8_units.cu"
KIND = {"e4m3": 0, "e5m2": 1}


def f32(bits: int) -> float:
    return float(np.array([bits], np.uint32).view(np.float32)[0])


NAN = 0x7FC00000
# (float bits, code with satfinite, code without), each worked out by hand. e4m3: (1 + m/8) 2^(e-7),
# subnormals m 2^-9, 0x7E = 448 the largest, 0x7F NaN (no infinity).
HAND_E4M3 = [
    (0x3F800000, 0x38, 0x38),   # 1.0 = 2^0: e = 7, m = 0
    (0xBF800000, 0xB8, 0xB8),   # -1.0
    (0x3F880000, 0x38, 0x38),   # 1.0625, halfway between 1.0 (m = 0) and 1.125 (m = 1): to the even m = 0
    (0x3F980000, 0x3A, 0x3A),   # 1.1875, halfway between 1.125 (m = 1) and 1.25 (m = 2): to the even m = 2
    (0x3F880001, 0x39, 0x39),   # just past halfway above 1.0: up
    (0x3F87FFFF, 0x38, 0x38),   # just under halfway: down
    (0x40490FDB, 0x45, 0x45),   # pi: between 3.0 (e 8, m 4) and 3.25 (m 5), 0.108 from 3.25: 0x45
    (0x3DCCCCCD, 0x1D, 0x1D),   # 0.1 = 1.6 2^-4: between 0.09375 (m 4) and 0.1015625 (m 5): 0x1D
    (0x43700000, 0x77, 0x77),   # 240 = 1.875 2^7: exact
    (0x43E00000, 0x7E, 0x7E),   # 448, the largest finite
    (0x43E80000, 0x7E, 0x7E),   # 464, halfway between 448 (m = 6) and 480 (would be m = 7, NaN): to the even 448
    (0x43E88000, 0x7E, 0x7F),   # 465: past the halfway -- satfinite keeps 448, without it NaN
    (0x4E6E6B28, 0x7E, 0x7F),   # 1e9
    (0xCE6E6B28, 0xFE, 0xFF),   # -1e9: -448, or NaN with the sign bit
    (0x7F800000, 0x7E, 0x7F),   # +infinity: e4m3 has none
    (0xFF800000, 0xFE, 0xFF),   # -infinity
    (0x3C800000, 0x08, 0x08),   # 2^-6, the smallest normal
    (0x3B000000, 0x01, 0x01),   # 2^-9, the smallest subnormal
    (0x3BC00000, 0x03, 0x03),   # 3 2^-9
    (0x3B400000, 0x02, 0x02),   # 1.5 2^-9, halfway between subnormals 1 and 2: to the even 2
    (0x3BA00000, 0x02, 0x02),   # 2.5 2^-9, halfway between 2 and 3: to the even 2
    (0x3C700000, 0x08, 0x08),   # 7.5 2^-9, halfway between the largest subnormal and 2^-6: to the even 0x08
    (0x3A800000, 0x00, 0x00),   # 2^-10, half the smallest subnormal: to the even zero
    (0xBA800000, 0x80, 0x80),   # -2^-10: a zero of its sign
    (0x3A800001, 0x01, 0x01),   # just past 2^-10: the smallest subnormal
    (0x33800000, 0x00, 0x00),   # 2^-24: far under, zero
    (0x80000000, 0x80, 0x80),   # -0.0 keeps its sign
    (0x00000001, 0x00, 0x00),   # the smallest float subnormal: zero
    (NAN, 0x7F, 0x7F),          # NaN
    (0xFFC00001, 0x7F, 0x7F),   # a negative NaN with payload: the header's canonical positive NaN first
]
# e5m2: (1 + m/4) 2^(e-15), subnormals m 2^-16, 0x7B = 57344 the largest, 0x7C infinity, 0x7D-0x7F NaN.
HAND_E5M2 = [
    (0x3F800000, 0x3C, 0x3C),   # 1.0: e = 15, m = 0
    (0xBF800000, 0xBC, 0xBC),
    (0x3F900000, 0x3C, 0x3C),   # 1.125, halfway between 1.0 (m 0) and 1.25 (m 1): to the even m 0
    (0x3FB00000, 0x3E, 0x3E),   # 1.375, halfway between 1.25 (m 1) and 1.5 (m 2): to the even m 2
    (0x3F900001, 0x3D, 0x3D),   # just past 1.125: up
    (0x40490FDB, 0x42, 0x42),   # pi: between 3.0 (e 16, m 2) and 3.5: 3.0
    (0x3DCCCCCD, 0x2E, 0x2E),   # 0.1 = 1.6 2^-4: between 0.09375 (m 2) and 0.109375: 0x2E
    (0x47600000, 0x7B, 0x7B),   # 57344, the largest finite
    (0x476FFFFF, 0x7B, 0x7B),   # just under 61440, the halfway to 65536: 57344
    (0x47700000, 0x7B, 0x7C),   # 61440, halfway between 57344 (m 3) and 65536 (infinity's code, even): the even
                                # infinity -- satfinite makes it 57344
    (0x4E6E6B28, 0x7B, 0x7C),   # 1e9
    (0xCE6E6B28, 0xFB, 0xFC),   # -1e9: -57344, or -infinity
    (0x7F800000, 0x7B, 0x7C),   # +infinity: satfinite makes it the largest finite
    (0xFF800000, 0xFB, 0xFC),   # -infinity
    (0x38800000, 0x04, 0x04),   # 2^-14, the smallest normal
    (0x37800000, 0x01, 0x01),   # 2^-16, the smallest subnormal
    (0x37C00000, 0x02, 0x02),   # 1.5 2^-16, halfway between subnormals 1 and 2: to the even 2
    (0x38600000, 0x04, 0x04),   # 3.5 2^-16, halfway between the largest subnormal and 2^-14: 0x04
    (0x37000000, 0x00, 0x00),   # 2^-17, half the smallest subnormal: to zero
    (0xB7000000, 0x80, 0x80),   # -2^-17: negative zero
    (0x80000000, 0x80, 0x80),   # -0.0
    (NAN, 0x7F, 0x7F),          # NaN: 0x7E | the canonical NaN's top mantissa bits
]
HAND = {"e4m3": HAND_E4M3, "e5m2": HAND_E5M2}
# What a GPU's cvt.rn.satfinite writes for a NaN is its own NaN code; the tests hold every other
# case to the exact code and a NaN input to "a NaN code".


def _units(be):
    return load_module(UNITS, be, options=GPU_OPTIONS if be.name == "gpu" else ())


def _is_nan_code(codes, kind):
    codes = np.asarray(codes, np.uint8)
    if kind == "e4m3":
        return (codes & 0x7F) == 0x7F
    return (codes & 0x7F) > 0x7C


def _convert(be, name, x, kind, sat=True):
    out = be.xp.zeros(len(x), np.uint8)
    _units(be).get_function(name).bind(-(-len(x) // 256), 256, (be.to_device(x), out, np.int32(len(x)),
                                                               np.int32(sat), np.int32(KIND[kind])))()
    be.synchronize()
    return be.to_host(out)


def _by_definition(code: int, kind: str) -> float:
    """A code's value spelled out from the format, one code at a time (not gpulab.fp8's table)."""
    ebits, mbits, bias = (4, 3, 7) if kind == "e4m3" else (5, 2, 15)
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> mbits) & ((1 << ebits) - 1), code & ((1 << mbits) - 1)
    if kind == "e4m3" and code & 0x7F == 0x7F:
        return math.nan
    if kind == "e5m2" and e == 31:
        return sign * math.inf if m == 0 else math.nan
    if e == 0:
        return sign * math.ldexp(m, 1 - bias - mbits)
    return sign * math.ldexp((1 << mbits) + m, e - bias - mbits)


@pytest.mark.parametrize("kind", ["e4m3", "e5m2"])
def test_every_code_decodes_to_its_value(backend, kind):
    be = get_backend(backend)
    codes = np.arange(256, dtype=np.uint8)
    want = np.array([_by_definition(c, kind) for c in range(256)], np.float32)
    out = be.xp.zeros(256, np.float32)
    _units(be).get_function("fp8_to_float").bind(1, 256, (be.to_device(codes), out, np.int32(256),
                                                          np.int32(KIND[kind])))()
    got = be.to_host(out)
    nan = np.isnan(want)
    assert nan.sum() == (2 if kind == "e4m3" else 6)
    assert np.isnan(got[nan]).all()
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))   # -0.0 too
    # hand-decoded landmarks
    v = dict(zip(range(256), got))
    if kind == "e4m3":
        assert (v[0x7E], v[0x08], v[0x01], v[0x07], v[0x38], v[0xC0]) == (448, 2 ** -6, 2 ** -9, 7 * 2 ** -9, 1, -2)
    else:
        assert (v[0x7B], v[0x7C], v[0xFC], v[0x04], v[0x01], v[0x3C]) == (57344, np.inf, -np.inf, 2 ** -14,
                                                                         2 ** -16, 1)
    # the host table agrees, and through half and bfloat16 the values are the same (exactly)
    np.testing.assert_array_equal(fp8.from_fp8(codes, kind)[~nan].view(np.uint32), want[~nan].view(np.uint32))
    halves, bf16 = be.xp.zeros(256, np.uint16), be.xp.zeros(256, np.uint16)
    for name, buf in (("fp8_to_half_bits", halves), ("fp8_to_bf16_bits", bf16)):
        _units(be).get_function(name).bind(1, 256, (be.to_device(codes), buf, np.int32(256), np.int32(KIND[kind])))()
    h = be.to_host(halves).view(np.float16).astype(np.float32)
    b = from_bf16_bits(be.to_host(bf16))
    assert np.isnan(h[nan]).all() and np.isnan(b[nan]).all()
    np.testing.assert_array_equal(h[~nan].view(np.uint32), want[~nan].view(np.uint32))
    np.testing.assert_array_equal(b[~nan].view(np.uint32), want[~nan].view(np.uint32))


@pytest.mark.parametrize("kind", ["e4m3", "e5m2"])
@pytest.mark.parametrize("sat", [True, False], ids=["satfinite", "nosat"])
def test_float_to_fp8_matches_hand_computed_codes(backend, kind, sat):
    be = get_backend(backend)
    x = np.array([h[0] for h in HAND[kind]], np.uint32).view(np.float32)
    want = np.array([h[1 if sat else 2] for h in HAND[kind]], np.uint8)
    nan_in = np.isnan(x)
    for name, values in (("float_to_fp8", x), ("double_to_fp8", x.astype(np.float64))):
        got = _convert(be, name, values, kind, sat)
        assert _is_nan_code(got[nan_in], kind).all(), (name, [hex(c) for c in got[nan_in]])
        bad = [(hex(int(b)), hex(int(w)), hex(int(g))) for b, w, g, n in zip(x.view(np.uint32), want, got, nan_in)
               if not n and w != g]
        assert not bad, f"{name} ({kind}, satfinite={sat}): (input bits, want, got) {bad}"
    host = fp8.to_fp8(x, kind, satfinite=sat)
    np.testing.assert_array_equal(host[~nan_in], want[~nan_in])
    assert (host[nan_in] == 0x7F).all()


@pytest.mark.parametrize("kind", ["e4m3", "e5m2"])
def test_constructors_saturate_and_pairs_pack_low_first(backend, kind):
    be = get_backend(backend)
    x = np.array([h[0] for h in HAND[kind]], np.uint32).view(np.float32)
    want = np.array([h[1] for h in HAND[kind]], np.uint8)
    keep = ~np.isnan(x)
    out = be.xp.zeros(len(x), np.uint8)
    _units(be).get_function("construct").bind(1, 64, (be.to_device(x), out, np.int32(len(x)), np.int32(KIND[kind])))()
    np.testing.assert_array_equal(be.to_host(out)[keep], want[keep])
    pairs = x[keep][: 2 * (keep.sum() // 2)]
    packed = be.xp.zeros(len(pairs) // 2, np.uint16)
    _units(be).get_function("float2_to_fp8x2").bind(1, 64, (be.to_device(pairs), packed, np.int32(len(pairs) // 2),
                                                            np.int32(KIND[kind])))()
    codes = want[keep][: len(pairs)]
    low, high = codes[0::2].astype(np.uint16), codes[1::2].astype(np.uint16)
    np.testing.assert_array_equal(be.to_host(packed), low | high << 8)


@pytest.mark.parametrize("kind", ["e4m3", "e5m2"])
def test_every_finite_code_converts_back_to_itself(backend, kind):
    be = get_backend(backend)
    codes = np.arange(256, dtype=np.uint8)
    values = fp8.from_fp8(codes, kind)
    finite = np.isfinite(values)
    for sat in (True, False):
        got = _convert(be, "float_to_fp8", values[finite], kind, sat)
        np.testing.assert_array_equal(got, codes[finite])
        np.testing.assert_array_equal(fp8.to_fp8(values[finite], kind, sat), codes[finite])


def _random_values(n, seed):
    """Values of every magnitude an FP8 conversion treats differently: below half the smallest
    subnormal, subnormal, normal, past the largest finite value; halfway points; both signs."""
    rng = np.random.default_rng(seed)
    mags = np.exp2(rng.uniform(-20, 18, n))
    exact = np.concatenate([fp8.decode_table(k)[np.isfinite(fp8.decode_table(k))] for k in fp8.FORMATS])
    mids = (exact[:-1] + exact[1:]) / 2
    x = np.concatenate([mags, rng.choice(mids, n // 4), rng.choice(exact, n // 8)])
    return (x * rng.choice([-1.0, 1.0], len(x))).astype(np.float32)


@pytest.mark.parametrize("kind", ["e4m3", "e5m2"])
def test_header_and_host_codec_agree_on_random_values(backend, kind):
    """gpulab.fp8.to_fp8 (nearest value by search, ties to the even code) and the header (CUDA's
    bit manipulation) agree on every value, from float and double; half and bfloat16 inputs go
    through float exactly, so they round as their float values do."""
    be = get_backend(backend)
    x = _random_values(20000, seed=7)
    for sat in (True, False):
        want = fp8.to_fp8(x, kind, sat)
        np.testing.assert_array_equal(_convert(be, "float_to_fp8", x, kind, sat), want)
        np.testing.assert_array_equal(_convert(be, "double_to_fp8", x.astype(np.float64), kind, sat), want)
        with np.errstate(over="ignore"):
            h = x.astype(np.float16)
        finite = np.isfinite(h)
        np.testing.assert_array_equal(_convert(be, "half_to_fp8", h[finite], kind, sat),
                                      fp8.to_fp8(h[finite].astype(np.float32), kind, sat))
        b = to_bf16_bits(x)
        np.testing.assert_array_equal(_convert(be, "bf16_to_fp8", b, kind, sat),
                                      fp8.to_fp8(from_bf16_bits(b), kind, sat))


def test_quantize_fills_the_range_and_scale_for_refuses_unknown_kinds():
    x = np.array([[-3.0, 0.5], [1.5, 0.0]])
    codes, scale = fp8.quantize(x, "e4m3")
    assert scale == pytest.approx(3.0 / 448)
    assert codes[0, 0] == 0xFE                   # -3 / scale = -448, the largest magnitude
    np.testing.assert_allclose(fp8.from_fp8(codes) * scale, x, rtol=2 ** -4)
    assert fp8.scale_for(np.zeros(3)) == 1.0
    with pytest.raises(Exception, match="kind"):
        fp8.to_fp8(x, "e3m4")


def test_the_e4m3_exercise_answer_is_the_conversion_of_gpulab_fp8():
    # Exercise hopper.4's answer (its solution cell, written from the format's spacing) is graded
    # against itself; it must be to_fp8's rounding, which CUDA's conversion is tested against.
    from gpulab import exercises, paths
    exercise = exercises.get("hopper.4")
    solve = exercises.define(exercise, exercises.notebook_cell(paths.REPO / exercise.file, exercise.cell))
    hidden = exercises.hidden_cases(exercise)
    assert any(case.get("ties") for case in hidden) and any(case.get("zeros") for case in hidden)
    for case in [*exercise.public, *hidden]:
        x = exercise.inputs(case)["x"]
        answer = solve(x)
        scale = fp8.scale_for(x)
        assert answer["scale"] == scale
        np.testing.assert_array_equal(answer["values"], fp8.from_fp8(fp8.to_fp8(x / scale)).astype(np.float64))
