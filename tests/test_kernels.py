"""The launch interface both backends share: compiling, argument checks,
launch limits, constants, errors."""
import sys

import numpy as np
import pytest

import gpulab
from gpulab import KernelArgumentError, KernelCompileError, kernels

SAXPY = "measuring/01_saxpy.cu"


@pytest.fixture
def saxpy(backend):
    return gpulab.load_module(SAXPY, backend)


def arrays(module, n=1000, dtype=np.float32):
    be = module.backend
    rng = np.random.default_rng(0)
    return (be.to_device(rng.standard_normal(n).astype(dtype)),
            be.to_device(rng.standard_normal(n).astype(dtype)),
            be.poisoned(n, dtype))


def test_launch_by_name_or_attribute(saxpy):
    x, y, z = arrays(saxpy)
    saxpy.get_function("saxpy")(4, 256, (1000, 2.0, x, y, z))
    expected = 2.0 * saxpy.backend.to_host(x).astype(np.float64) + saxpy.backend.to_host(y)
    gpulab.check(z, expected)
    z2 = saxpy.backend.poisoned(1000)
    saxpy.saxpy((4,), (256, 1, 1), (1000, np.float32(2.0), x, y, z2))
    gpulab.check(z2, expected)


def test_python_float_goes_in_as_float32(saxpy):
    # CuPy alone would pass a Python float as a double and the kernel would read garbage.
    x, y, z = arrays(saxpy)
    args = saxpy.saxpy.convert_args((1000, 2.5, x, y, z))
    assert args[0].dtype == np.int32 and args[1].dtype == np.float32


@pytest.mark.parametrize("args, message", [
    (lambda x, y, z: (1000, 2.0, x, y), "takes 5 arguments"),
    (lambda x, y, z: (1000.0, 2.0, x, y, z), "'n'.*int32 scalar.*got float"),
    (lambda x, y, z: (-1 + 2**40, 2.0, x, y, z), "outside"),
    (lambda x, y, z: (1000, x, x, y, z), "'a'.*got an array"),
    (lambda x, y, z: (1000, 2.0, x.astype(np.float64), y, z), "'x'.*float32 array.*got a float64 array"),
    (lambda x, y, z: (1000, 2.0, 5, y, z), "'x'.*got int"),
    (lambda x, y, z: (1000, 2.0, x[::2], y, z), "non-contiguous"),
])
def test_bad_arguments_name_the_parameter(saxpy, args, message):
    x, y, z = arrays(saxpy)
    with pytest.raises(KernelArgumentError, match=message):
        saxpy.saxpy(4, 256, args(x, y, z))


@pytest.mark.parametrize("grid, block, shared, message", [
    (4, 2048, 0, "2048 threads"),
    (4, (1, 1, 128), 0, "block.z = 128"),
    (0, 256, 0, "at least 1"),
    ((1, 70000), 256, 0, "grid.y = 70000"),
    (4, 256, 64 * 1024, "exceeds the 49152-byte limit"),
    (4, (1, 2, 3, 4), 0, "1 to 3 dimensions"),
    ("four", 256, 0, "int or a tuple"),
])
def test_bad_launch_configurations(saxpy, grid, block, shared, message):
    x, y, z = arrays(saxpy)
    with pytest.raises(KernelArgumentError, match=message):
        saxpy.saxpy(grid, block, (1000, 2.0, x, y, z), shared_mem=shared)


def test_unknown_kernel_lists_the_ones_there(saxpy):
    with pytest.raises(KernelArgumentError, match="no __global__ kernel named 'saxpi'; it defines: saxpy"):
        saxpy.get_function("saxpi")


def test_arrays_of_the_other_backend_are_refused(saxpy):
    n = 10
    if saxpy.backend.name == "gpu":
        host = np.ones(n, np.float32)
        with pytest.raises(KernelArgumentError, match="NumPy array.*CuPy array"):
            saxpy.saxpy(1, 32, (n, 1.0, host, host, host))
    else:
        as_list = [1.0] * n
        with pytest.raises(KernelArgumentError, match="'x'.*got list.*needs a NumPy array"):
            saxpy.saxpy(1, 32, (n, 1.0, as_list, as_list, as_list))


def test_compile_error_names_file_line_and_source(backend, tmp_path):
    bad = tmp_path / "broken.cu"
    bad.write_text('extern "C" __global__ void k(float* x)\n{\n    x[0] = not_declared * 2.0f;\n}\n')
    with pytest.raises(KernelCompileError) as info:
        gpulab.load_module(bad, backend)
    err = info.value
    assert err.line == 3
    assert "broken.cu line 3" in str(err) and "not_declared" in str(err)
    assert "x[0] = not_declared * 2.0f;" in str(err)
    assert err.log


def test_a_compile_error_in_a_notebook_is_its_message_not_a_traceback(tmp_path):
    """In IPython (a notebook cell) the error shows as the file, the line and the compiler's
    message, as the exercise checks' errors do, not under a traceback through the lab."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output
    bad = tmp_path / "broken.cu"
    bad.write_text('extern "C" __global__ void k(float* x)\n{\n    x[0] = not_declared * 2.0f;\n}\n')
    shell = InteractiveShell.instance()
    with capture_output() as shown:
        shell.run_cell(f"import gpulab\ngpulab.load_module({str(bad)!r}, 'cpu')")
    text = shown.stdout + shown.stderr
    assert text.startswith("KernelCompileError: ") and "broken.cu line 3" in text and "not_declared" in text
    assert len(text.strip().splitlines()) <= 4 and "Traceback" not in text and "compiler.py" not in text, text
    assert isinstance(sys.last_value, KernelCompileError) and sys.last_value.log     # kept for %debug
    for error in (gpulab.errors.KernelLaunchError("k: out of bounds"), gpulab.errors.CheckFailed("3 rows")):
        assert error._render_traceback_() == [f"{type(error).__name__}: {error}"]


def test_missing_kernel_file():
    with pytest.raises(FileNotFoundError, match="kernel file 'nowhere/none.cu' not found"):
        gpulab.load_module("nowhere/none.cu", "cpu")


def test_constant_memory_is_filled_and_size_checked(backend, tmp_path):
    src = tmp_path / "const.cu"
    src.write_text('__constant__ float weights[4];\n'
                   'extern "C" __global__ void dot4(const float* x, float* out, int n)\n{\n'
                   '    int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
                   '    if (i < n) { float s = 0.0f;\n'
                   '        for (int k = 0; k < 4; ++k) s += weights[k] * x[4 * i + k];\n'
                   '        out[i] = s; }\n}\n')
    module = gpulab.load_module(src, backend)
    w = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    module.set_constant("weights", w)
    x = np.random.default_rng(0).standard_normal(4 * 37).astype(np.float32)
    out = module.backend.poisoned(37)
    module.dot4(2, 32, (module.backend.to_device(x), out, 37))
    gpulab.check(out, x.reshape(37, 4).astype(np.float64) @ w)
    with pytest.raises(KernelArgumentError, match="holds 16 bytes; got 12 bytes"):
        module.set_constant("weights", w[:3])
    with pytest.raises(KernelArgumentError, match="no __constant__ or __device__ symbol 'bias'"):
        module.set_constant("bias", w)


def test_resource_table(saxpy):
    table = gpulab.resource_table(saxpy)
    assert list(table.index) == ["saxpy"]
    if saxpy.backend.name == "gpu":
        assert table.loc["saxpy", "registers"] > 0
        assert table.loc["saxpy", "max_threads_per_block"] >= 256
        occ = kernels.occupancy(saxpy.saxpy, 256)
        assert 0 < occ["occupancy"] <= 1
    elif "unavailable" in table.attrs:      # no NVRTC here: no invented figures
        assert table["registers"].isna().all()
    else:                                   # NVRTC's figures for an H100, without a GPU
        assert table.loc["saxpy", "registers"] > 0 and "NVRTC" in table.attrs["source"]


def test_show_source_renders_the_file_or_one_kernel():
    shown = gpulab.show_source(SAXPY)
    assert shown.path == "kernels/measuring/01_saxpy.cu"
    assert shown._repr_markdown_().startswith("**`kernels/measuring/01_saxpy.cu`**")
    assert "```cuda" in shown._repr_markdown_()
    one = gpulab.show_source(SAXPY, kernel="saxpy")
    # One kernel: its comment block, its signature and its body, nothing after.
    assert one.text.lstrip().startswith("//") and one.text.rstrip().endswith("}")
    assert "__global__ void saxpy" in one.text


SHOWN = """// A header the tests show parts of.
#define N 4

// Doubles x: the comment above the function is shown with it.
template <typename T>
__device__ __forceinline__ T twice(T x) { return x + x; }   // not "{" in a comment: }

__device__ int
on_two_lines(int a)
{
    // region: inner
    if (a > 0) {
        const char* s = "} not a brace";
#pragma unroll
        for (int i = 0; i < N; ++i) a += twice(i);
    }
    // endregion
    return a;
}

int declared_only(int a);
__device__ int caller(int a) { return on_two_lines(declared_only(a)); }
"""


def test_show_source_shows_a_named_function_with_its_comments_and_template(tmp_path):
    f = tmp_path / "parts.cuh"
    f.write_text(SHOWN)
    twice = gpulab.show_source(f, function="twice")
    assert twice.text.splitlines() == SHOWN.splitlines()[3:6]
    assert twice.part == "`twice` (lines 4-6)" and "`twice` (lines 4-6)" in twice._repr_markdown_()
    # The return type on its own line; the call in caller() and the declaration are not definitions;
    # a brace inside a string does not end the body; the region markers are not shown.
    two = gpulab.show_source(f, function="on_two_lines").text
    assert two.startswith("__device__ int\non_two_lines(int a)") and two.rstrip().endswith("return a;\n}")
    assert "region" not in two and "#pragma unroll" in two
    with pytest.raises(KernelArgumentError, match="defines no function 'declared_only'"):
        gpulab.show_source(f, function="declared_only")
    with pytest.raises(KernelArgumentError, match="name one of them"):
        gpulab.show_source(f, function="twice", region="inner")


def test_show_source_shows_a_marked_region_dedented_without_its_markers(tmp_path):
    f = tmp_path / "parts.cuh"
    f.write_text(SHOWN)
    inner = gpulab.show_source(f, region="inner")
    lines = inner.text.splitlines()
    assert lines[0] == "if (a > 0) {" and lines[-1] == "}" and "#pragma unroll" in lines
    assert lines[3] == "    for (int i = 0; i < N; ++i) a += twice(i);"
    assert inner.part == "lines 12-16"
    assert "region" not in gpulab.show_source(f).text          # the whole file hides the markers too
    with pytest.raises(KernelArgumentError, match="no region 'outer'.*its regions: inner"):
        gpulab.show_source(f, region="outer")
    f.write_text(SHOWN.replace("    // endregion\n", ""))
    with pytest.raises(KernelArgumentError, match="has no '// endregion'"):
        gpulab.show_source(f, region="inner")


def test_the_hopper_chapter_shows_the_loops_of_persistent_gemm():
    """The regions the chapter shows: the producer issues the copies, the consumer multiplies and
    releases, the epilogue stores C; each is a balanced block."""
    shown = {r: gpulab.show_source("hopper/persistent_gemm.cuh", region=r).text
             for r in ("producer", "consumer", "epilogue")}
    assert "mbar_arrive_expect_tx" in shown["producer"] and "tma_load_2d" in shown["producer"]
    assert "wgmma_commit" in shown["consumer"] and "mbar_arrive(&empty" in shown["consumer"]
    assert "tma_store_2d" in shown["epilogue"] and "store_accumulators" in shown["epilogue"]
    for text in shown.values():
        assert text.count("{") == text.count("}") and not text.startswith(" ")
    for name in ("mbar_wait", "tma_load_2d", "smem_desc", "fence_proxy_async"):
        assert f"{name}(" in gpulab.show_source("common/hopper.h", function=name).text


def test_nvrtc_log_attribution(tmp_path):
    # Parsing of NVRTC logs (the GPU path), checked without a GPU.
    src = tmp_path / "k.cu"
    src.write_text("int a;\nint b = y;\n")
    own = kernels._compile_error(src, src.read_text(),
                                 '/tmp/x/0123abcd.cubin.cu(2): error: identifier "y" is undefined\n')
    assert own.line == 2 and "k.cu line 2: error: identifier" in str(own) and "2 | int b = y;" in str(own)
    system = kernels._compile_error(src, src.read_text(),
                                    '/usr/local/cuda/include/mma.h(55): catastrophic error: cannot '
                                    'open source file "crt/mma.h"\n')
    assert str(system).startswith("/usr/local/cuda/include/mma.h line 55")
    assert "int b" not in str(system)  # the kernel's own line 55 does not exist; nothing quoted
