import numpy as np
import pytest

from gpulab.signature import parse_kernels, strip_comments

SOURCE = r'''
// __global__ void commented_out(int n) {}
/* a block comment
   __global__ void also_commented(float* x) {} */
extern "C" __global__ void __launch_bounds__(256)
scale(int n, float a, const float* __restrict__ x, float* y)
{
    const char* s = "__global__ void in_a_string()";
}

extern "C" __global__ void vec(const float4* __restrict__ in, __half* out, unsigned int count,
                               long long big) {}
extern "C" __global__ void no_args() {}
'''


def test_finds_kernels_and_ignores_comments_and_strings():
    kernels = parse_kernels(SOURCE)
    assert list(kernels) == ["scale", "vec", "no_args"]
    assert kernels["no_args"].params == ()


def test_parameters_types_and_lines():
    k = parse_kernels(SOURCE)["scale"]
    assert [p.name for p in k.params] == ["n", "a", "x", "y"]
    assert [p.dtype for p in k.params] == [np.int32, np.float32, np.float32, np.float32]
    assert [p.is_pointer for p in k.params] == [False, False, True, True]
    assert k.params[2].is_const and not k.params[3].is_const
    assert k.line == SOURCE.splitlines().index("scale(int n, float a, const float* __restrict__ x, float* y)") + 1


def test_vector_and_half_types():
    k = parse_kernels(SOURCE)["vec"]
    assert (k.params[0].ctype, k.params[0].dtype, k.params[0].lanes) == ("float4", np.float32, 4)
    assert k.params[1].dtype == np.float16
    assert k.params[2].dtype == np.uint32
    assert k.params[3].dtype == np.int64


def test_unknown_type_is_a_clear_error():
    with pytest.raises(ValueError, match="parameter 'p' has type 'mystruct'"):
        parse_kernels('extern "C" __global__ void k(mystruct* p) {}')


def test_pointer_to_pointer_rejected():
    with pytest.raises(ValueError, match="pointer to a pointer"):
        parse_kernels('extern "C" __global__ void k(float** p) {}')


def test_strip_comments_keeps_line_numbers():
    text = "a // x\n/* y\n z */ b\n"
    stripped = strip_comments(text)
    assert stripped.count("\n") == text.count("\n")
    assert "x" not in stripped and "y" not in stripped and "b" in stripped
