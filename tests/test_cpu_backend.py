"""The CPU backend runs the book's CUDA C kernels as written, and catches their bugs.

Every kernel in tests/kernels/ is plain CUDA C: the tests taking ``backend``
also run it through CuPy on a GPU when there is one, against the same float64
NumPy references.  Outputs are poisoned with NaN so unwritten elements fail,
and sizes are never multiples of the block size.
"""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from gpulab import cpu
from gpulab.cpu import compiler
from gpulab.check import check
from gpulab.errors import KernelArgumentError, KernelCompileError, KernelLaunchError
from gpulab.kernels import toolkit_include_options

KERNELS = Path(__file__).parent / "kernels"
rng = np.random.default_rng(12345)


class Kernels:
    """A test kernel file compiled for one backend; launches update the NumPy
    arrays passed in, whichever backend runs them."""

    def __init__(self, backend: str, name: str):
        self.backend = backend
        self.filename = f"tests/kernels/{name}"
        source = (KERNELS / name).read_text()
        if backend == "cpu":
            self.module = cpu.compile_module(source, filename=self.filename, include_dirs=[str(KERNELS)])
        else:
            import cupy
            self.module = cupy.RawModule(code=source, options=("-std=c++17", *toolkit_include()))

    def set_global(self, name: str, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values)
        if self.backend == "cpu":
            self.module.get_global(name)[:] = values.view(np.uint8).ravel()
        else:
            self.module.get_global(name).copy_from_host(values.ctypes.data, values.nbytes)

    def launch(self, kernel: str, grid, block, *args, shared_mem: int = 0) -> None:
        if self.backend == "cpu":
            self.module.get_function(kernel)(grid, block, args, shared_mem=shared_mem)
            return
        import cupy
        device_args = [cupy.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
        self.module.get_function(kernel)(grid, block, tuple(device_args), shared_mem=shared_mem)
        cupy.cuda.runtime.deviceSynchronize()
        for host, device in zip(args, device_args):
            if isinstance(host, np.ndarray):
                host[...] = device.get()


toolkit_include = toolkit_include_options


def blocks(n: int, size: int) -> int:
    return (n + size - 1) // size


def poisoned(shape, dtype=np.float32) -> np.ndarray:
    return np.full(shape, np.nan, dtype=dtype)


def cpu_kernels(name: str) -> Kernels:
    return Kernels("cpu", name)


# ----------------------------------------------------------------- correct kernels

def test_saxpy(backend):
    k = Kernels(backend, "saxpy.cu")
    n = 10_007
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    expected = 2.5 * x.astype(np.float64) + y
    k.launch("saxpy", (blocks(n, 256), 1, 1), (256, 1, 1), np.int32(n), np.float32(2.5), x, y)
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)


def matmul_inputs(m, n, kk):
    a = rng.standard_normal((m, kk)).astype(np.float32)
    b = rng.standard_normal((kk, n)).astype(np.float32)
    return a, b, a.astype(np.float64) @ b


def run_matmul(k: Kernels, kernel: str, a, b) -> np.ndarray:
    (m, kk), n = a.shape, b.shape[1]
    c = poisoned((m, n))
    k.launch(kernel, (blocks(n, 16), blocks(m, 16), 1), (16, 16, 1),
             np.int32(m), np.int32(n), np.int32(kk), a, b, c)
    return c


def test_tiled_matmul(backend):
    k = Kernels(backend, "matmul_tiled.cu")
    a, b, expected = matmul_inputs(70, 45, 83)
    np.testing.assert_allclose(run_matmul(k, "matmul_tiled", a, b), expected, rtol=1e-4, atol=1e-4)


def test_block_reduction_with_warp_shuffles(backend):
    k = Kernels(backend, "reduce_sum.cu")
    n = 100_003
    x = rng.standard_normal(n).astype(np.float32)
    total = np.zeros(1, dtype=np.float32)
    k.launch("reduce_sum", (blocks(n, 256), 1, 1), (256, 1, 1), np.int32(n), x, total)
    assert total[0] == pytest.approx(x.astype(np.float64).sum(), abs=1e-2)


def test_histogram_atomics_exact(backend):
    k = Kernels(backend, "histogram.cu")
    n = 300_001
    data = rng.integers(0, 256, n, dtype=np.uint8)
    bins = np.zeros(256, dtype=np.uint32)
    k.launch("histogram", (37, 1, 1), (192, 1, 1), np.int32(n), data, bins)
    np.testing.assert_array_equal(bins, np.bincount(data, minlength=256))


def test_conv2d_with_constant_memory(backend):
    k = Kernels(backend, "conv2d_constant.cu")
    h, w = 53, 71
    image = rng.standard_normal((h, w)).astype(np.float32)
    weights = rng.standard_normal((5, 5)).astype(np.float32)
    k.set_global("weights", weights)
    out = poisoned((h, w))
    k.launch("conv2d", (blocks(w, 16), blocks(h, 8), 1), (16, 8, 1), np.int32(h), np.int32(w), image, out)
    padded = np.pad(image.astype(np.float64), 2)
    expected = sum(weights[dy, dx] * padded[dy:dy + h, dx:dx + w] for dy in range(5) for dx in range(5))
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_half2_dot(backend):
    k = Kernels(backend, "half2_dot.cu")
    npairs = 5_001
    a = rng.uniform(-1, 1, 2 * npairs).astype(np.float16)
    b = rng.uniform(-1, 1, 2 * npairs).astype(np.float16)
    result = np.zeros(1, dtype=np.float32)
    k.launch("half2_dot", (7, 1, 1), (128, 1, 1), np.int32(npairs), a, b, result)
    products = (a * b).astype(np.float64)  # each product rounded to fp16, as __hmul2 does
    assert result[0] == pytest.approx(products.sum(), abs=0.05)


def test_half_conversions_are_bit_exact(backend):
    k = Kernels(backend, "half2_dot.cu")
    special = np.array([0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 1e6, -1e6, 6e-8, 2.9802322e-08,
                        2.9802326e-08, 1e-10, np.inf, -np.inf, 1.0009765625, 1.00048828125,
                        1.00146484375, 6.1035156e-05, 6.097555e-05], dtype=np.float32)
    x = np.concatenate([special, rng.standard_normal(3000).astype(np.float32) * 100,
                        rng.standard_normal(1000).astype(np.float32) * 1e-5])
    n = x.size
    rounded = np.zeros(n, dtype=np.float16)
    doubled = np.zeros(n, dtype=np.float16)
    k.launch("half_convert", (blocks(n, 128), 1, 1), (128, 1, 1), np.int32(n), x, rounded, doubled)
    with np.errstate(over="ignore"):  # 1e6 and 65520 overflow to inf on purpose
        expected_rounded = x.astype(np.float16)
        expected_doubled = (expected_rounded.astype(np.float32) * 2).astype(np.float16)
    np.testing.assert_array_equal(rounded.view(np.uint16), expected_rounded.view(np.uint16))
    np.testing.assert_array_equal(doubled.view(np.uint16), expected_doubled.view(np.uint16))


def test_dynamic_shared_memory(backend):
    k = Kernels(backend, "reverse_dynamic_shared.cu")
    n, size = 1_000, 96
    x = rng.standard_normal(n).astype(np.float32)
    expected = np.concatenate([chunk[::-1] for chunk in np.split(x, range(size, n, size))])
    k.launch("reverse_chunks", (blocks(n, size), 1, 1), (size, 1, 1), np.int32(n), x, shared_mem=size * 4)
    np.testing.assert_array_equal(x, expected)


def test_3d_grid_and_block(backend):
    k = Kernels(backend, "grid3d.cu")
    nx, ny, nz = 19, 13, 11
    out = np.full((nz, ny, nx), -1, dtype=np.int32)
    block = (8, 4, 3)
    k.launch("label_voxels", (blocks(nx, 8), blocks(ny, 4), blocks(nz, 3)), block,
             np.int32(nx), np.int32(ny), np.int32(nz), out)
    z, y, x = np.indices((nz, ny, nx))
    np.testing.assert_array_equal(out, x + 1000 * y + 1000000 * z)


def test_warp_votes_and_xor_shuffle(backend):
    k = Kernels(backend, "warp_votes.cu")
    n = 1_000
    x = rng.integers(-3, 4, n).astype(np.int32)
    x[64:96] = 1  # one warp where every lane votes yes
    ballot = np.zeros(n, dtype=np.uint32)
    all_ok = np.full(n, -7, dtype=np.int32)
    warp_sum = np.full(n, -7, dtype=np.int32)
    k.launch("warp_votes", (blocks(n, 64), 1, 1), (64, 1, 1), np.int32(n), x, ballot, all_ok, warp_sum)

    padded = np.zeros(blocks(n, 32) * 32, dtype=np.int64)
    padded[:n] = x
    warps = padded.reshape(-1, 32)
    bits = (warps > 0).astype(np.uint64) << np.arange(32, dtype=np.uint64)
    np.testing.assert_array_equal(ballot, np.repeat(bits.sum(axis=1), 32)[:n].astype(np.uint32))
    np.testing.assert_array_equal(all_ok, np.repeat((warps > -1).all(axis=1), 32)[:n].astype(np.int32))
    np.testing.assert_array_equal(warp_sum, np.repeat(warps.sum(axis=1), 32)[:n])
    assert ballot[64] == 0xFFFFFFFF


def test_float4_loads_by_cast(backend):
    k = Kernels(backend, "float4_scale.cu")
    n = 4_003
    x = rng.standard_normal(n).astype(np.float32)
    y = poisoned(n)
    k.launch("scale_float4", (blocks(n // 4, 128), 1, 1), (128, 1, 1), np.int32(n), np.float32(-3.0), x, y)
    np.testing.assert_allclose(y, -3.0 * x.astype(np.float64), rtol=1e-6)


def test_printf(backend, capfd):
    k = Kernels(backend, "printf.cu")
    k.launch("hello", (3, 1, 1), (64, 1, 1), np.int32(42))
    out = capfd.readouterr().out
    assert sorted(line for line in out.splitlines() if line.startswith("hello")) == [
        f"hello from block {b}, tag 42" for b in range(3)]


def test_correct_kernels_agree_under_every_schedule():
    k = cpu_kernels("matmul_tiled.cu")
    a, b, expected = matmul_inputs(40, 36, 50)
    for schedule, seed in [("in_order", 0), ("reverse", 0), ("shuffle", 1), ("shuffle", 2), ("shuffle", 3)]:
        with cpu.checking(schedule=schedule, seed=seed, bounds=True):
            np.testing.assert_allclose(run_matmul(k, "matmul_tiled", a, b), expected, rtol=1e-4, atol=1e-4)
    reduce = cpu_kernels("reduce_sum.cu")
    x = rng.standard_normal(3_001).astype(np.float32)
    for seed in range(3):
        total = np.zeros(1, dtype=np.float32)
        with cpu.checking(schedule="shuffle", seed=seed):
            reduce.module.get_function("reduce_sum")((12, 1, 1), (256, 1, 1), (np.int32(x.size), x, total))
        assert total[0] == pytest.approx(x.astype(np.float64).sum(), abs=1e-3)


def test_in_place_argument_passed_twice_stays_one_buffer():
    k = cpu_kernels("saxpy.cu")
    x = rng.standard_normal(1_001).astype(np.float32)
    expected = 3.0 * x.astype(np.float64)
    with cpu.checking(bounds=True):
        k.launch("saxpy", (4, 1, 1), (256, 1, 1), np.int32(x.size), np.float32(2.0), x, x)
    np.testing.assert_allclose(x, expected, rtol=1e-6)


# -------------------------------------------------------------------------- traps

def launch_with_timeout(k: Kernels, *launch_args, timeout: float = 30.0, **kwargs) -> BaseException | None:
    """Launch in a daemon thread so a hang fails the test instead of freezing it."""
    outcome: list[BaseException | None] = []

    def target():
        try:
            k.launch(*launch_args, **kwargs)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(timeout)
    assert outcome, f"the launch did not finish within {timeout} s"
    return outcome[0]


def test_failed_assert_is_an_exception():
    k = cpu_kernels("printf_assert.cu")
    x = np.ones(300, dtype=np.float32)
    x[217] = -1.0
    with pytest.raises(KernelLaunchError) as info:
        k.launch("check_non_negative", (3, 1, 1), (128, 1, 1), np.int32(x.size), x)
    message = str(info.value)
    for part in ("check_non_negative", "block (1,0,0)", "thread (89,0,0)", "x[i] >= 0.0f",
                 "tests/kernels/printf_assert.cu:9"):
        assert part in message, message
    k.launch("check_non_negative", (3, 1, 1), (128, 1, 1), np.int32(x.size), np.abs(x))


def test_divergent_barrier_after_early_return():
    k = cpu_kernels("traps.cu")
    x = np.zeros(64, dtype=np.float32)
    error = launch_with_timeout(k, "early_return_barrier", (2, 1, 1), (64, 1, 1), x)
    assert isinstance(error, KernelLaunchError), error
    message = str(error)
    assert "early_return_barrier" in message and "block (" in message
    assert "48 threads (threadIdx (16,0,0) to (63,0,0)) wait at __syncthreads() at tests/kernels/traps.cu:10" in message
    assert "16 threads (threadIdx (0,0,0) to (15,0,0)) have exited" in message


def test_threads_at_different_barriers():
    k = cpu_kernels("traps.cu")
    error = launch_with_timeout(k, "split_barrier", (1, 1, 1), (32, 1, 1), np.zeros(32, np.float32))
    assert isinstance(error, KernelLaunchError), error
    assert "different __syncthreads()" in str(error)
    assert "traps.cu:18" in str(error) and "traps.cu:20" in str(error)


def test_out_of_bounds_write_past_the_end():
    k = cpu_kernels("traps.cu")
    n = 1_000
    y = np.zeros(n, dtype=np.float32)
    with cpu.checking(bounds=True), pytest.raises(KernelLaunchError) as info:
        k.launch("write_past_end", (blocks(n + 1, 128), 1, 1), (128, 1, 1), np.int32(n), y)
    message = str(info.value)
    for part in ("write_past_end", "block (7,0,0)", "thread (104,0,0)", "write", "'y'", "y[1000]",
                 "past the end"):
        assert part in message, message


def test_out_of_bounds_read_past_the_end():
    k = cpu_kernels("traps.cu")
    n = 2_000
    x = rng.standard_normal(n).astype(np.float32)
    y = np.zeros(n, dtype=np.float32)
    with cpu.checking(bounds=False):   # the opt-out: silently reads junk
        k.launch("read_past_end", (blocks(n, 256), 1, 1), (256, 1, 1), np.int32(n), x, y)
    with pytest.raises(KernelLaunchError) as info:   # bounds checking is on by default
        k.launch("read_past_end", (blocks(n, 256), 1, 1), (256, 1, 1), np.int32(n), x, y)
    message = str(info.value)
    for part in ("read_past_end", "block (7,0,0)", "thread (207,0,0)", "read", "x[2000]", "past the end"):
        assert part in message, message


def test_out_of_bounds_write_before_the_start():
    k = cpu_kernels("traps.cu")
    y = np.zeros(500, dtype=np.float32)
    with cpu.checking(bounds=True), pytest.raises(KernelLaunchError) as info:
        k.launch("write_before_start", (4, 1, 1), (128, 1, 1), np.int32(y.size), y)
    message = str(info.value)
    assert "write_before_start" in message and "before the start" in message and "y[-1]" in message, message


def test_missing_barrier_is_caught_by_other_schedules():
    k = cpu_kernels("matmul_tiled.cu")
    a, b, expected = matmul_inputs(48, 40, 64)
    for schedule, seed in [("reverse", 0), ("shuffle", 1), ("shuffle", 7)]:
        with cpu.checking(schedule=schedule, seed=seed):
            racy = run_matmul(k, "matmul_missing_barrier", a, b)
            correct = run_matmul(k, "matmul_tiled", a, b)
        assert not np.allclose(racy, expected, rtol=1e-4, atol=1e-4), (schedule, seed)
        np.testing.assert_allclose(correct, expected, rtol=1e-4, atol=1e-4)


def test_wild_pointer_is_an_exception_not_a_crash():
    source = """
    extern "C" __global__ void wild(float* y) {
        float* p = (float*)(0x10 + 0 * threadIdx.x);
        y[threadIdx.x] = *p;
    }
    """
    k = cpu.compile_module(source, filename="wild.cu")
    with pytest.raises(KernelLaunchError, match=r"kernel 'wild', block \(0,0,0\), thread \(0,0,0\): invalid memory"):
        k.get_function("wild")((1, 1, 1), (32, 1, 1), (np.zeros(32, np.float32),))


# ------------------------------------------------------------ errors before launch

def test_compile_error_names_file_line_and_source():
    source = (KERNELS / "saxpy.cu").read_text().replace("y[i] = a * x[i] + y[i];", "y[i] = a * xs[i] + y[i];")
    with pytest.raises(KernelCompileError) as info:
        cpu.compile_module(source, filename="kernels/measuring/01_saxpy.cu")
    error = info.value
    assert error.path == "kernels/measuring/01_saxpy.cu" and error.line == 5
    assert str(error).startswith("kernels/measuring/01_saxpy.cu line 5: error: ")
    assert "'xs' was not declared" in str(error).replace("‘", "'").replace("’", "'")
    assert "    5 |         y[i] = a * xs[i] + y[i];" in str(error)
    assert "error" in error.log


def test_unknown_kernel_lists_the_kernels():
    k = cpu_kernels("matmul_tiled.cu")
    with pytest.raises(KernelArgumentError, match="matmul_tiled, matmul_missing_barrier"):
        k.module.get_function("matmul")


def test_wrong_arguments():
    fn = cpu_kernels("saxpy.cu").module.get_function("saxpy")
    x = np.zeros(10, np.float32)
    with pytest.raises(KernelArgumentError, match="takes 4 arguments"):
        fn((1, 1, 1), (32, 1, 1), (np.int32(10), np.float32(1), x))
    with pytest.raises(KernelArgumentError, match="float64 array"):
        fn((1, 1, 1), (32, 1, 1), (np.int32(10), np.float32(1), x.astype(np.float64), x))
    with pytest.raises(KernelArgumentError, match="np.float32"):
        fn((1, 1, 1), (32, 1, 1), (np.int32(10), 1.0, x, x))
    with pytest.raises(KernelArgumentError, match="C-contiguous"):
        fn((1, 1, 1), (32, 1, 1), (np.int32(5), np.float32(1), x[::2], x[:5]))


@pytest.mark.parametrize("grid, block, shared, match", [
    ((1, 1, 1), (1025, 1, 1), 0, "exceeds the limit of 1024"),
    ((1, 1, 1), (64, 32, 1), 0, "2048 threads"),
    ((1, 1, 1), (1, 1, 65), 0, "blockDim.z"),
    ((0, 1, 1), (32, 1, 1), 0, "zero"),
    ((1, 1, 1), (32, 1, 1), 300 * 1024, "shared_mem"),
])
def test_bad_launch_configuration(grid, block, shared, match):
    fn = cpu_kernels("saxpy.cu").module.get_function("saxpy")
    x = np.zeros(10, np.float32)
    with pytest.raises(KernelArgumentError, match=match):
        fn(grid, block, (np.int32(10), np.float32(1), x, x), shared_mem=shared)


def test_compiled_modules_are_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("GPULAB_CACHE", str(tmp_path))
    source = (KERNELS / "saxpy.cu").read_text() + "\n// cache test\n"
    first = cpu.compile_module(source, filename="cache_test.cu")
    # (beside the control module its load was compared with: compiler.load_time_code)
    assert set((tmp_path / "cpu").glob("*.so")) - {compiler.control_library(False)} == {first.path}
    assert cpu.compile_module(source, filename="cache_test.cu") is first


# ------------------------------------------------------------ tensor cores (wmma)

WMMA_SHAPES = {"m16n16k16": (16, 16, 16), "m32n8k16": (32, 8, 16), "m8n32k16": (8, 32, 16)}


def padded(n: int, tile: int) -> int:
    return blocks(n, tile) * tile


def wmma_source_line(text: str, after: str = "") -> int:
    """The 1-based line of tests/kernels/wmma_gemm.cu that first holds ``text``
    after the first line that holds ``after``."""
    lines = (KERNELS / "wmma_gemm.cu").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line)
    return next(i + 1 for i, line in enumerate(lines) if i >= start and text in line)


def run_wmma_gemm(k: Kernels, kernel: str, a, bt, tile, out_dtype=np.float32, lda=None) -> np.ndarray:
    """C = A B^T for fp16 A (M x K) and bt (N x K: B column-major), M, N and K
    multiples of the tile; 4 warps per block, one warp per tile of C."""
    (m, kk), n = a.shape, bt.shape[0]
    m_tiles, n_tiles = m // tile[0], n // tile[1]
    c = poisoned((m, n), out_dtype)
    k.launch(kernel, (blocks(m_tiles * n_tiles, 4), 1, 1), (128, 1, 1), np.int32(m_tiles), np.int32(n_tiles),
             np.int32(kk), a, bt, c, np.int32(kk if lda is None else lda), np.int32(kk), np.int32(n))
    return c


@pytest.mark.parametrize("kernel, shape, out_dtype", [
    ("wmma_gemm_m16n16k16", "m16n16k16", np.float32),
    ("wmma_gemm_m32n8k16", "m32n8k16", np.float32),
    ("wmma_gemm_m8n32k16", "m8n32k16", np.float32),
    ("wmma_gemm_m16n16k16_half", "m16n16k16", np.float16),
])
def test_wmma_fp16_gemm(backend, kernel, shape, out_dtype):
    k = Kernels(backend, "wmma_gemm.cu")
    tile = WMMA_SHAPES[shape]
    m, n, kk = 70, 45, 64  # M and N padded up to the tile, with random values in the padding
    mp, np_ = padded(m, tile[0]), padded(n, tile[1])
    a = rng.standard_normal((mp, kk)).astype(np.float16)
    bt = rng.standard_normal((np_, kk)).astype(np.float16)
    c = run_wmma_gemm(k, kernel, a, bt, tile, out_dtype)
    expected = a.astype(np.float64) @ bt.astype(np.float64).T
    check(c[:m, :n], expected[:m, :n], "fp16", name=kernel)
    check(c, expected, "fp16", name=f"{kernel} with padding")  # every tile written
    if out_dtype == np.float32:  # exact fp16 products added in fp32: far better than fp16
        check(c, expected, "fp32", name=kernel)


def test_wmma_accumulator_load_and_elementwise_relu(backend):
    k = Kernels(backend, "wmma_gemm.cu")
    m, n, kk = 50, 30, 32
    mp, np_ = padded(m, 16), padded(n, 16)
    a_cm = rng.standard_normal((kk, mp)).astype(np.float16)   # A column-major: a_cm[k, m] = A[m, k]
    b = rng.standard_normal((kk, np_)).astype(np.float16)     # B row-major
    e_cm = rng.standard_normal((np_, mp)).astype(np.float32)  # E column-major
    d = poisoned((mp, np_))
    tiles = (mp // 16) * (np_ // 16)
    k.launch("wmma_bias_relu", (blocks(tiles, 4), 1, 1), (128, 1, 1), np.int32(mp // 16), np.int32(np_ // 16),
             np.int32(kk), a_cm, b, e_cm, d, np.int32(mp), np.int32(np_), np.int32(mp), np.int32(np_))
    pre = a_cm.astype(np.float64).T @ b.astype(np.float64) + e_cm.astype(np.float64).T
    check(d[:m, :n], np.maximum(pre, 0)[:m, :n], "fp16")
    check(d, np.maximum(pre, 0), "fp16")
    assert (d[pre < -1e-3] == 0).all() and (d[pre > 1e-3] > 0).all()
    assert 0.3 < (d == 0).mean() < 0.7


def run_wmma_tf32(k: Kernels, a, bt, convert: bool) -> np.ndarray:
    """C = A B^T (A: M x K, bt: N x K, B column-major) by wmma_gemm_tf32; C is
    returned M x N (the kernel stores it column-major)."""
    (m, kk), n = a.shape, bt.shape[0]
    c_cm = poisoned((n, m))
    tiles = (m // 16) * (n // 16)
    k.launch("wmma_gemm_tf32", (blocks(tiles, 4), 1, 1), (128, 1, 1), np.int32(m // 16), np.int32(n // 16),
             np.int32(kk), a, bt, c_cm, np.int32(kk), np.int32(kk), np.int32(m), np.int32(convert))
    return c_cm.T


def test_wmma_tf32_gemm(backend):
    k = Kernels(backend, "wmma_gemm.cu")
    m, n, kk = 40, 50, 40
    mp, np_ = padded(m, 16), padded(n, 16)
    a = rng.standard_normal((mp, kk)).astype(np.float32)
    bt = rng.standard_normal((np_, kk)).astype(np.float32)
    c = run_wmma_tf32(k, a, bt, convert=True)
    expected = a.astype(np.float64) @ bt.astype(np.float64).T
    check(c[:m, :n], expected[:m, :n], "tf32")
    result = check(c, expected, "tf32")
    assert result.rel_error > 2e-5, "the inputs were not rounded to tf32"  # fp32 would give ~1e-7


def test_wmma_tf32_uses_the_top_19_bits_of_unconverted_inputs(backend):
    """A times the identity passes A's elements through the tensor cores exactly:
    rounded to nearest where the kernel converts them with __float_to_tf32,
    truncated to tf32 where it does not, as an H100 does."""
    k = Kernels(backend, "wmma_gemm.cu")
    a = rng.standard_normal((16, 8)).astype(np.float32)
    identity = np.zeros((16, 8), dtype=np.float32)  # B column-major: B[k, n] = 1 where n == k
    identity[np.arange(8), np.arange(8)] = 1
    bits = a.view(np.uint32)
    truncated = run_wmma_tf32(k, a, identity, convert=False)[:, :8]
    rounded = run_wmma_tf32(k, a, identity, convert=True)[:, :8]
    np.testing.assert_array_equal(truncated.view(np.uint32), bits & np.uint32(0xFFFFE000))
    np.testing.assert_array_equal(rounded.view(np.uint32), (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000))


def test_float_to_tf32_rounds_to_nearest_ties_away(backend):
    k = Kernels(backend, "wmma_gemm.cu")
    one = np.float32(1.0)
    special = np.array([0.0, -0.0, 1.0, one + 2.0**-11, -(one + 2.0**-11), one + 3 * 2.0**-11,
                        one + 2.0**-11 + 2.0**-23, one + 2.0**-11 - 2.0**-23, 3.4028235e38, -3.4028235e38,
                        1e-40, -3e-39, 1.17549435e-38, np.inf, -np.inf], dtype=np.float32)
    x = np.concatenate([special, rng.standard_normal(2000).astype(np.float32) * 1e3,
                        rng.standard_normal(1000).astype(np.float32) * 1e-30])
    y = poisoned(x.size)
    k.launch("tf32_round", (blocks(x.size, 128), 1, 1), (128, 1, 1), np.int32(x.size), x, y)
    bits = x.view(np.uint32)
    finite = (bits & 0x7F800000) != 0x7F800000
    expected = np.where(finite, (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000), bits).astype(np.uint32)
    np.testing.assert_array_equal(y.view(np.uint32), expected)


def test_wmma_fragments_from_shared_memory(backend):
    k = Kernels(backend, "wmma_gemm.cu")
    m, n, kk = 40, 100, 48
    mp, np_ = padded(m, 16), padded(n, 64)
    a = rng.standard_normal((mp, kk)).astype(np.float16)
    b = rng.standard_normal((kk, np_)).astype(np.float16)
    c = poisoned((mp, np_))
    k.launch("wmma_gemm_shared", (np_ // 64, mp // 16, 1), (128, 1, 1), np.int32(kk), a, b, c,
             np.int32(kk), np.int32(np_), np.int32(np_))
    expected = a.astype(np.float64) @ b.astype(np.float64)
    check(c[:m, :n], expected[:m, :n], "fp16")
    check(c, expected, "fp16")


def test_wmma_timed_with_clock64(backend):
    k = Kernels(backend, "wmma_gemm.cu")
    a = rng.standard_normal((16, 16)).astype(np.float16)
    bt = rng.standard_normal((16, 16)).astype(np.float16)
    c = poisoned((16, 16))
    cycles = np.full(2, -1, dtype=np.int64)
    k.launch("wmma_mma_cycles", (1, 1, 1), (32, 1, 1), a, bt, c, cycles)
    check(c, 8 * (a.astype(np.float64) @ bt.astype(np.float64).T), "fp16")
    assert cycles[0] > 0
    if backend == "cpu":
        assert cycles[1] >= 0  # clock() is the process's CPU time: it never goes back


def test_wmma_agrees_under_every_schedule_with_bounds():
    k = cpu_kernels("wmma_gemm.cu")
    a = rng.standard_normal((48, 32)).astype(np.float16)
    bt = rng.standard_normal((64, 32)).astype(np.float16)
    b = np.ascontiguousarray(bt.T)
    reference_gemm = run_wmma_gemm(k, "wmma_gemm_m16n16k16", a, bt, (16, 16, 16))
    reference_shared = poisoned((48, 64))
    k.launch("wmma_gemm_shared", (1, 3, 1), (128, 1, 1), np.int32(32), a, b, reference_shared,
             np.int32(32), np.int32(64), np.int32(64))
    check(reference_shared, a.astype(np.float64) @ b.astype(np.float64), "fp16")
    for schedule, seed in [("reverse", 0), ("shuffle", 1), ("shuffle", 2)]:
        with cpu.checking(schedule=schedule, seed=seed, bounds=True):
            gemm = run_wmma_gemm(k, "wmma_gemm_m16n16k16", a, bt, (16, 16, 16))
            shared = poisoned((48, 64))
            k.launch("wmma_gemm_shared", (1, 3, 1), (128, 1, 1), np.int32(32), a, b, shared,
                     np.int32(32), np.int32(64), np.int32(64))
        np.testing.assert_array_equal(gemm, reference_gemm)
        np.testing.assert_array_equal(shared, reference_shared)


def test_wmma_ldm_must_be_a_multiple_of_16_bytes():
    k = cpu_kernels("wmma_gemm.cu")
    a = rng.standard_normal((16, 64)).astype(np.float16)
    bt = rng.standard_normal((16, 64)).astype(np.float16)
    with pytest.raises(KernelLaunchError) as info:
        run_wmma_gemm(k, "wmma_gemm_m16n16k16", a, bt, (16, 16, 16), lda=60)
    line = wmma_source_line("wmma::load_matrix_sync(a, A + tile_m * TM * lda + k, lda);")
    message = str(info.value)
    for part in ("wmma_gemm_m16n16k16", "block (0,0,0)", "load_matrix_sync: ldm = 60 is not a multiple of 8",
                 f"tests/kernels/wmma_gemm.cu:{line}"):
        assert part in message, message


def test_wmma_divergent_warp_is_reported():
    k = cpu_kernels("wmma_gemm.cu")
    a = rng.standard_normal(512).astype(np.float16)
    error = launch_with_timeout(k, "wmma_divergent", (1, 1, 1), (32, 1, 1), a, poisoned((16, 16)))
    assert isinstance(error, KernelLaunchError), error
    first = wmma_source_line("wmma::load_matrix_sync(a, A, 16);", after="void wmma_divergent")
    second = wmma_source_line("wmma::load_matrix_sync(a, A + 256, 16);", after="void wmma_divergent")
    message = str(error)
    for part in ("wmma_divergent", "can never all meet",
                 f"16 threads (threadIdx (0,0,0) to (15,0,0)) wait at nvcuda::wmma::load_matrix_sync() "
                 f"at tests/kernels/wmma_gemm.cu:{first}",
                 f"16 threads (threadIdx (16,0,0) to (31,0,0)) wait at nvcuda::wmma::load_matrix_sync() "
                 f"at tests/kernels/wmma_gemm.cu:{second}"):
        assert part in message, message


def test_wmma_unsupported_fragment_is_a_compile_error_on_your_line():
    source = """#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void k(const float* x) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, float, wmma::row_major> a;  // float A: not in CUDA
}
"""
    with pytest.raises(KernelCompileError) as info:
        cpu.compile_module(source, filename="kernels/x/bad_fragment.cu")
    error = info.value
    assert error.path == "kernels/x/bad_fragment.cu" and error.line == 4, str(error)
    assert "nvcuda::wmma::fragment" in str(error) and "wmma::matrix_a, 16, 16, 16, float" in str(error)
