import numpy as np
import pytest

import gpulab
from gpulab import CheckFailed, check, compare


def test_float32_rounding_passes():
    rng = np.random.default_rng(1)
    ref = rng.standard_normal(1000)
    result = check(ref.astype(np.float32), ref)
    assert result.passed and 0 < result.rel_error < 1e-7


def test_unwritten_elements_fail_and_are_counted():
    ref = np.arange(1, 11, dtype=np.float64)
    out = ref.astype(np.float32)
    out[-3:] = np.nan  # a kernel that skipped its last three elements
    result = compare(out, ref)
    assert not result.passed and result.unwritten == 3
    with pytest.raises(CheckFailed, match="3 NaN elements"):
        check(out, ref)


def test_wrong_values_fail_with_the_worst_index():
    ref = np.ones((4, 5))
    out = ref.copy()
    out[2, 3] = 1.5
    result = compare(out, ref)
    assert not result.passed and result.worst_index == (2, 3)
    assert result.max_abs_error == pytest.approx(0.5)


def test_precision_sets_tolerance():
    ref = np.linspace(1, 2, 100)
    out = ref * (1 + 1e-3)  # half-precision-sized error
    assert not compare(out, ref, "fp32").passed
    assert compare(out, ref, "fp16").passed
    with pytest.raises(ValueError, match="precision must be one of"):
        compare(out, ref, "fp4")


def test_shape_mismatch_is_explained():
    with pytest.raises(ValueError, match=r"shape \(10,\).*\(2, 5\)"):
        compare(np.zeros(10), np.zeros((2, 5)))
    with pytest.raises(ValueError, match="11 elements"):
        compare(np.zeros(11), np.zeros(10))


@pytest.mark.skipif(not gpulab.gpu_available(), reason="needs an NVIDIA GPU")
def test_cupy_arrays_are_compared_on_the_device():
    import cupy

    ref = np.linspace(1, 2, 1000)
    out = cupy.asarray(ref, dtype=cupy.float32)
    assert compare(out, ref).passed
    out[7] = cupy.nan
    result = compare(out, cupy.asarray(ref))
    assert not result.passed and result.unwritten == 1 and result.worst_index == (7,)
