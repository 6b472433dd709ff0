"""The CPU backend's checks of shared memory, printf and crashes, in the student's terms.

Shared arrays, static and dynamic, are bounds-checked as array arguments are:
an access past the end names the array, element, block and thread; a write
before the start is found when the block ends.  Static shared memory over
48 KiB is a compile error, as with the GPU compiler.  A launch's printf output
is capped at 1 MiB, the latest kept, as a GPU's printf buffer.  A worker that
dies, or a kernel that hits an illegal instruction, is worded without guessing.
"""
from __future__ import annotations

import re
import signal
from pathlib import Path

import numpy as np
import pytest

from gpulab import cpu
from gpulab.cpu import crashes
from gpulab.errors import KernelCompileError, KernelLaunchError

KERNELS = Path(__file__).parent / "kernels"
rng = np.random.default_rng(2027)


def compiled(name: str):
    return cpu.compile_module((KERNELS / name).read_text(), filename=f"tests/kernels/{name}")


@pytest.fixture(scope="module")
def shared():
    return compiled("shared_bounds.cu")


def launch_error(fn, *launch, **kwargs) -> str:
    with pytest.raises(KernelLaunchError) as info:
        fn(*launch, **kwargs)
    return str(info.value)


# ------------------------------------------------------------ correct kernels pass

@pytest.mark.parametrize("checks", [{}, {"bounds": False}, {"schedule": "shuffle", "seed": 4}, {"races": True}])
def test_correct_shared_memory_kernels_pass_under_every_check(shared, checks):
    n = 37   # not a multiple of the 16 x 16 tile
    a = rng.standard_normal((n, n)).astype(np.float32)
    out = np.full((n, n), np.nan, np.float32)
    tiles = (n + 15) // 16
    x = rng.standard_normal(1_000).astype(np.float32)     # 8 blocks of 128, the last partial
    sums = np.full(8, np.nan, np.float32)
    chunks = np.arange(300, dtype=np.float32)              # 3 blocks of 128, the last 44 long
    rows = np.full(64, np.nan, np.float32)
    with cpu.checking(**checks):
        shared.get_function("transpose_tiled")((tiles, tiles, 1), (16, 16, 1), (np.int32(n), a, out))
        shared.get_function("block_sum")((8, 1, 1), (128, 1, 1),
                                         (np.int32(x.size), np.int32(-1), np.int32(1), np.int32(1), x, sums))
        shared.get_function("reverse_dynamic")((3, 1, 1), (128, 1, 1),
                                               (np.int32(chunks.size), np.int32(-1), np.int32(1), chunks),
                                               shared_mem=128 * 4)
        shared.get_function("two_arrays")((2, 1, 1), (32, 1, 1), (np.int32(-1), np.int32(8), rows))
    np.testing.assert_array_equal(out, a.T)
    expected = np.add.reduceat(np.pad(x.astype(np.float64), (0, 24)), np.arange(0, 1_024, 128))
    np.testing.assert_allclose(sums, expected, rtol=1e-5, atol=1e-5)
    reversed_chunks = np.concatenate([np.arange(127, -1, -1), np.arange(255, 127, -1), np.arange(299, 255, -1)])
    np.testing.assert_array_equal(chunks, reversed_chunks.astype(np.float32))
    lane = np.arange(32)
    np.testing.assert_array_equal(rows, np.tile(lane + 10.0 * (lane % 4), 2).astype(np.float32))


# ------------------------------------------------------------ static shared arrays

@pytest.mark.parametrize("races", [False, True])
def test_write_past_the_end_of_a_static_shared_array_names_it(shared, races):
    x = rng.standard_normal(1_000).astype(np.float32)
    sums = np.full(8, np.nan, np.float32)
    with cpu.checking(races=races):
        message = launch_error(shared.get_function("block_sum"), (8, 1, 1), (128, 1, 1),
                               (np.int32(x.size), np.int32(5), np.int32(1), np.int32(0), x, sums))
    for part in ("kernel 'block_sum', block (5,0,0), thread (127,0,0)", "out-of-bounds write",
                 "__shared__ array 'partial'", "element partial[128], past the end",
                 "float partial[128]: 128 elements, valid indices 0..127"):
        assert part in message, message


def test_read_past_the_end_of_a_static_shared_array_names_it(shared):
    x = rng.standard_normal(1_000).astype(np.float32)
    sums = np.full(8, np.nan, np.float32)
    message = launch_error(shared.get_function("block_sum"), (8, 1, 1), (128, 1, 1),
                           (np.int32(x.size), np.int32(7), np.int32(0), np.int32(1), x, sums))
    for part in ("block (7,0,0), thread (127,0,0)", "out-of-bounds read of __shared__ array 'partial'",
                 "partial[128]"):
        assert part in message, message


def test_write_before_the_start_of_a_static_shared_array_is_found_when_the_block_ends(shared):
    x = rng.standard_normal(1_000).astype(np.float32)
    sums = np.full(8, np.nan, np.float32)
    message = launch_error(shared.get_function("block_sum"), (8, 1, 1), (128, 1, 1),
                           (np.int32(x.size), np.int32(2), np.int32(-1), np.int32(0), x, sums))
    for part in ("kernel 'block_sum', block (2,0,0)", "write before the start of __shared__ array 'partial'",
                 "element partial[-1] was written", "the thread is unknown"):
        assert part in message, message


def test_a_two_dimensional_shared_array_is_indexed_in_its_own_dimensions(shared):
    out = np.full(96, np.nan, np.float32)
    message = launch_error(shared.get_function("two_arrays"), (3, 1, 1), (32, 1, 1),
                           (np.int32(1), np.int32(8), out))
    # Threads 0 to 30 write rows[t][8], which is rows[t + 1][0]: inside the array. Thread 31's is not.
    for part in ("block (1,0,0), thread (31,0,0)", "__shared__ array 'rows'", "element rows[32][0]",
                 "float rows[32][8]: 256 elements, valid flat indices 0..255"):
        assert part in message, message


def test_without_bounds_checking_a_shared_overrun_cannot_harm_python(shared):
    x = rng.standard_normal(1_000).astype(np.float32)
    sums = np.full(8, np.nan, np.float32)
    with cpu.checking(bounds=False):
        try:
            shared.get_function("block_sum")((8, 1, 1), (128, 1, 1),
                                             (np.int32(x.size), np.int32(5), np.int32(1), np.int32(0), x, sums))
        except KernelLaunchError as exc:
            assert "block_sum" in str(exc)
    ok = np.full(8, np.nan, np.float32)
    shared.get_function("block_sum")((8, 1, 1), (128, 1, 1),
                                     (np.int32(x.size), np.int32(-1), np.int32(0), np.int32(0), x, ok))
    assert np.isfinite(ok).all()


TEMPLATE_SHARED = """
// One declaration, two instantiations of different sizes in one kernel: each gets its own array.
template <class T, int N> __device__ T stage_and_sum(const T* x)
{
    __shared__ T staged[N];
    staged[threadIdx.x % N] = x[threadIdx.x % N];
    __syncthreads();
    T total = 0;
    for (int k = 0; k < N; ++k) {
        total += staged[k];
    }
    __syncthreads();
    return total;
}

extern "C" __global__ void sum_twice(const float* x, const double* y, double* out)
{
    out[threadIdx.x] = stage_and_sum<float, 8>(x) + stage_and_sum<double, 64>(y);
}
"""


def test_each_instantiation_of_a_template_s_shared_array_is_its_own():
    module = cpu.compile_module(TEMPLATE_SHARED, filename="kernels/x/template_shared.cu")
    x = rng.standard_normal(8).astype(np.float32)
    y = rng.standard_normal(64)
    out = np.full(64, np.nan)
    module.get_function("sum_twice")((1, 1, 1), (64, 1, 1), (x, y, out))
    np.testing.assert_allclose(out, np.full(64, x.astype(np.float64).sum() + y.sum()), rtol=1e-6)


# ------------------------------------------------------------ dynamic shared memory

def test_write_past_the_end_of_dynamic_shared_memory_names_it(shared):
    x = np.arange(300, dtype=np.float32)
    message = launch_error(shared.get_function("reverse_dynamic"), (3, 1, 1), (128, 1, 1),
                           (np.int32(x.size), np.int32(1), np.int32(1), x), shared_mem=128 * 4)
    for part in ("kernel 'reverse_dynamic', block (1,0,0), thread (127,0,0)", "out-of-bounds write",
                 "dynamic shared memory 'chunk'", "element chunk[128], past the end",
                 "extern __shared__ float chunk[]: the launch gave 512 bytes", "valid indices 0..127"):
        assert part in message, message


def test_forgetting_the_launch_s_shared_mem_is_named(shared):
    x = np.arange(300, dtype=np.float32)
    message = launch_error(shared.get_function("reverse_dynamic"), (3, 1, 1), (128, 1, 1),
                           (np.int32(x.size), np.int32(-1), np.int32(0), x))
    for part in ("dynamic shared memory 'chunk'", "element chunk[0]", "the launch gave 0 bytes", "no elements"):
        assert part in message, message
    np.testing.assert_array_equal(x, np.arange(300, dtype=np.float32))   # nothing came back changed


def test_write_before_the_start_of_dynamic_shared_memory_is_found(shared):
    x = np.arange(300, dtype=np.float32)
    message = launch_error(shared.get_function("reverse_dynamic"), (3, 1, 1), (128, 1, 1),
                           (np.int32(x.size), np.int32(2), np.int32(-3), x), shared_mem=128 * 4)
    # Threads 0 to 2 wrote chunk[-3] to chunk[-1]: the message names the one nearest the start.
    for part in ("block (2,0,0)", "write before the start of dynamic shared memory 'chunk'",
                 "element chunk[-1] was written"):
        assert part in message, message


# ------------------------------------------------------------ the 48 KiB static limit

BIG_SHARED = """
#define N {n}
extern "C" __global__ void big_tiles(float* out)
{{
    __shared__ float a[N], b[N];
    a[threadIdx.x] = 1.0f;
    b[threadIdx.x] = 2.0f;
    __syncthreads();
    out[threadIdx.x] = a[threadIdx.x] + b[threadIdx.x];
}}
"""


def test_static_shared_memory_over_48_kib_is_a_compile_error():
    source = BIG_SHARED.format(n=6_145)   # two arrays of 6,145 floats: 49,160 bytes
    with pytest.raises(KernelCompileError) as info:
        cpu.compile_module(source, filename="kernels/x/03_big_tiles.cu")
    message = str(info.value)
    for part in ("kernels/x/03_big_tiles.cu line 5", "'big_tiles' declares 49,160 bytes of static __shared__ memory",
                 "48 KiB (49,152 bytes)", "extern __shared__", "Kernel.allow_shared_memory",
                 "__shared__ float a[N], b[N];"):
        assert part in message, message


def test_static_shared_memory_of_exactly_48_kib_compiles_and_runs():
    module = cpu.compile_module(BIG_SHARED.format(n=6_144), filename="kernels/x/03_big_tiles.cu")
    out = np.full(100, np.nan, np.float32)
    module.get_function("big_tiles")((1, 1, 1), (100, 1, 1), (out,))
    np.testing.assert_array_equal(out, np.full(100, 3.0, np.float32))


# ------------------------------------------------------------ printf

LINE = 30   # "block 0000 thread 000 line 00\n"


def printed_lines(blocks: int, threads: int, lines: int) -> set[str]:
    return {f"block {b:04d} thread {t:03d} line {k:02d}"
            for b in range(blocks) for t in range(threads) for k in range(lines)}


def test_printf_output_under_the_cap_is_all_there(capfd):
    module = compiled("printf_flood.cu")
    module.get_function("flood")((5, 1, 1), (100, 1, 1), (np.int32(3),))
    out = capfd.readouterr().out.splitlines()
    assert sorted(out) == sorted(printed_lines(5, 100, 3))


def test_printf_output_over_1_mib_keeps_the_latest_after_a_truncated_line(capfd):
    module = compiled("printf_flood.cu")
    blocks, threads, lines = 40, 256, 4      # 40,960 lines of 30 bytes: 1,228,800 bytes
    module.get_function("flood")((blocks, 1, 1), (threads, 1, 1), (np.int32(lines),))
    out = capfd.readouterr().out
    head, _, rest = out.partition("\n")
    total = blocks * threads * lines * LINE
    shown = rest.splitlines()
    assert head.startswith("[gpulab: printf output truncated: kernel 'flood'"), head
    assert f"printed {total:,} bytes" in head and "cudaLimitPrintfFifoSize" in head, head
    dropped = int(re.search(r"the first ([\d,]+) are dropped", head).group(1).replace(",", ""))
    assert dropped == total - len(rest.encode())
    assert cpu.PRINTF_BYTES - LINE < len(rest.encode()) <= cpu.PRINTF_BYTES
    assert set(shown) <= printed_lines(blocks, threads, lines) and len(shown) == len(set(shown))
    assert rest.endswith("\n")


def test_printf_output_of_a_failed_launch_still_shows(capfd):
    module = compiled("printf_flood.cu")
    message = launch_error(module.get_function("print_then_trap"), (2, 1, 1), (40, 1, 1), (np.int32(17),))
    assert "__trap()" in message and "thread (17,0,0)" in message, message
    out = capfd.readouterr().out.splitlines()
    assert {f"before the trap: block 0 thread {t}" for t in range(40)} <= set(out), out


# ------------------------------------------------------------ crashes, worded neutrally

def test_an_illegal_instruction_names_the_block_and_thread_and_its_likely_causes():
    module = compiled("illegal_instruction.cu")
    x = np.arange(1, 301, dtype=np.int32)
    message = launch_error(module.get_function("divide_by_visible_zero"), (3, 1, 1), (128, 1, 1),
                           (np.int32(x.size), x))
    assert re.search(r"kernel 'divide_by_visible_zero', block \(\d,0,0\), thread \(0,0,0\)", message), message
    for part in ("illegal instruction (SIGILL)", "integer division by a zero it can see at compile time",
                 "corrupted pointer"):
        assert part in message, message


@pytest.mark.parametrize("signum, words", [
    (signal.SIGABRT, ("SIGABRT", "heap corrupted", "free()", "abort()")),
    (signal.SIGILL, ("SIGILL", "illegal instruction", "division by a zero")),
    (signal.SIGKILL, ("SIGKILL", "memory runs out")),
    (signal.SIGSEGV, ("SIGSEGV", "outside the kernel's threads")),
])
def test_a_worker_s_death_names_the_signal_and_its_causes_without_blaming_one(signum, words):
    status = signum   # a wait status for "killed by signum", no core dump
    message = crashes.worker_died("k", status, "still running: block (1,0,0)", bounds_checked=True)
    assert message.startswith("kernel 'k': the CPU backend's worker process running it died ("), message
    for part in (*words, "still running: block (1,0,0)", "unharmed"):
        assert part in message, message
    assert "most likely" not in message
    unchecked = crashes.worker_died("k", status, "where", bounds_checked=False)
    assert "bounds checking on" in unchecked, unchecked
    assert crashes.death_cause(signum) == signal.Signals(signum).name
    assert crashes.death_cause(-1) == "how is unknown"
    assert crashes.death_cause(3 << 8) == "exit status 3"
