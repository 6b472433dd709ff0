"""Memory-access counters and race checking of the CPU backend (issue #11),
on small kernels whose answers are worked out by hand in their comments."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpulab import cpu
from gpulab.errors import KernelLaunchError

FILE = "tests/kernels/access_patterns.cu"


@pytest.fixture(scope="module")
def patterns():
    return cpu.compile_module((Path(__file__).parent / "kernels" / "access_patterns.cu").read_text(), filename=FILE)


def counted(module, kernel, grid, block, *args):
    with cpu.counting() as c:
        module.get_function(kernel)(grid, block, args)
    assert len(c.launches) == 1
    return c.launches[0]


@pytest.mark.parametrize("kernel, sectors", [("load_coalesced", 4), ("load_strided", 8), ("load_scattered", 32)])
def test_global_load_sectors_per_request(patterns, kernel, sectors):
    x = np.arange(64 * 96, dtype=np.float32)
    y = np.full(96, np.nan, np.float32)
    launch = counted(patterns, kernel, 3, 32, x, y)      # three warps, one load and one store each
    totals = launch.totals
    assert totals["global_load_requests"] == 3 and totals["global_load_sectors"] == 3 * sectors
    assert totals["sectors_per_request"] == sectors
    assert totals["global_store_requests"] == 3 and totals["store_sectors_per_request"] == 4
    stride = {"load_coalesced": 1, "load_strided": 2, "load_scattered": 64}[kernel]
    np.testing.assert_array_equal(y, x[::stride][:96])   # the instrumented build computes the same
    line = launch.by_line[launch.by_line["global_load_requests"] > 0]
    assert list(line.index) == [f"{FILE}:{ {'load_coalesced': 8, 'load_strided': 15, 'load_scattered': 22}[kernel]}"]


@pytest.mark.parametrize("stride, conflicts", [(1, 0), (2, 1), (32, 31), (0, 0)])
def test_shared_bank_conflicts(patterns, stride, conflicts):
    y = np.full(64, np.nan, np.float32)
    totals = counted(patterns, "shared_stride", 1, 64, np.int32(stride), y).totals   # two warps
    assert totals["shared_store_requests"] == 33 and totals["shared_store_bank_conflicts"] == 0
    assert totals["shared_load_requests"] == 2
    assert totals["shared_load_bank_conflicts"] == 2 * conflicts
    assert totals["shared_load_wavefronts"] == 2 * (conflicts + 1)
    np.testing.assert_array_equal(y, ((np.arange(64) * stride) % (32 * 33)).astype(np.float32))


def test_divergent_warp(patterns):
    y = np.full(64, np.nan, np.float32)
    totals = counted(patterns, "diverge", 1, 64, y).totals
    # each warp: the 'if' block (some lanes) and the 'else' block (the others) in warp 0; warp 1 takes one side
    assert totals["divergent_warp_steps"] == 2
    assert totals["global_store_requests"] == 3
    np.testing.assert_array_equal(y, np.where(np.arange(64) < 8, 1.0, 2.0).astype(np.float32))


def test_a_data_race_names_kernel_line_threads_and_address(patterns):
    counter = np.zeros(1, np.uint32)
    patterns.get_function("racy_increment")(2, 64, (counter,))      # without race checking: no error
    with cpu.checking(races=True), pytest.raises(KernelLaunchError) as info:
        patterns.get_function("racy_increment")(2, 64, (counter,))
    message = str(info.value)
    for part in ("kernel 'racy_increment'", "data race on counter[0] (global memory)", f"{FILE}:43",
                 "thread (0,0,0) of block (0,0,0) wrote it", "thread (1,0,0) of block (0,0,0) read it"):
        assert part in message, message


def test_an_atomic_prevents_the_race(patterns):
    counter = np.zeros(1, np.uint32)
    with cpu.checking(races=True), cpu.counting() as c:
        patterns.get_function("atomic_increment")(3, 64, (counter,))
    assert counter[0] == 192
    assert c.launches[0].races == [] and c.launches[0].totals["atomic_requests"] == 6


def test_a_barrier_prevents_the_shared_memory_race(patterns):
    y = np.full(64, np.nan, np.float32)
    with cpu.checking(races=True):
        patterns.get_function("shared_publish")(1, 64, (np.int32(1), y))
    np.testing.assert_array_equal(y, 42.0)
    with cpu.checking(races=True), pytest.raises(KernelLaunchError) as info:
        patterns.get_function("shared_publish")(1, 64, (np.int32(0), y))
    message = str(info.value)
    for part in ("kernel 'shared_publish'", "(shared memory)", f"wrote it at {FILE}:58", f"read it at {FILE}:63",
                 "no __syncthreads() between them"):
        assert part in message, message


def test_counting_leaves_the_ordinary_build_alone(patterns):
    assert not patterns.instrumented
    assert patterns.instrumented_twin().instrumented
    assert patterns.instrumented_twin() is patterns.instrumented_twin()


def test_the_missing_barrier_of_a_tiled_matmul_is_a_race_in_order_too():
    """Without its second __syncthreads() the tiled matmul computes the right
    answer in the in-order schedule, but race checking finds the hazard."""
    module = cpu.compile_module((Path(__file__).parent / "kernels" / "matmul_tiled.cu").read_text(),
                                filename="tests/kernels/matmul_tiled.cu")
    rng = np.random.default_rng(5)
    a = rng.standard_normal((40, 50)).astype(np.float32)
    b = rng.standard_normal((50, 36)).astype(np.float32)
    args = (np.int32(40), np.int32(36), np.int32(50), a, b)
    c = np.full((40, 36), np.nan, np.float32)
    with cpu.checking(races=True):
        module.get_function("matmul_tiled")((3, 3, 1), (16, 16, 1), (*args, c))
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    with cpu.checking(races=True), pytest.raises(KernelLaunchError) as info:
        module.get_function("matmul_missing_barrier")((3, 3, 1), (16, 16, 1), (*args, c))
    message = str(info.value)
    assert "matmul_missing_barrier" in message and "(shared memory)" in message, message
    assert "tests/kernels/matmul_tiled.cu:" in message, message
