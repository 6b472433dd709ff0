"""Thread-block clusters (kernels/hopper/cluster.cuh, the hopper chapter's step 8): the CPU
backend's emulation against hand-computed layouts -- a multicast copy lands, swizzled, in exactly
the blocks of its mask and counts its bytes on each one's barrier; a remote arrival completes the
peer's barrier phase; each block of a cluster keeps its own shared memory and barriers -- and
step 8 under the race checker. On a Hopper GPU the layout tests run there too."""
import gc
import re

import numpy as np
import pytest

from gpulab import cpu, ladder, tensormap
from gpulab.errors import KernelArgumentError, KernelLaunchError
from gpulab.kernels import get_backend, load_module
from gpulab.signature import parse_kernels
from gpulab.workloads import hopper

from test_hopper import _hopper_backend, hand_swizzled_chunk

UNITS = "tests/kernels/hopper_cluster_units.cu"


def _units(be):
    return load_module(UNITS, be, options=hopper.launchers.GPU_OPTIONS if be.name == "gpu" else ())


@pytest.mark.parametrize("mask", [0b11, 0b01, 0b10])
def test_multicast_lands_swizzled_in_every_block_of_its_mask(backend, mask):
    be = _hopper_backend(backend)
    rows, cols = 40, 72
    a = (np.arange(rows * cols) % 2039).astype(np.float16).reshape(rows, cols)   # distinct, exact halves
    bc, br, x, y = 64, 8, 8, 3                      # 128-byte rows: the 128-byte swizzle
    nbytes = bc * br * 2
    m = tensormap.encode_2d(be.to_device(a), (bc, br), 128)
    blocks = 4                                      # two clusters: rank 0 of each multicasts
    out = be.xp.zeros(blocks * nbytes, dtype=np.uint8)
    ranks = be.xp.full(blocks, -1, dtype=np.int32)
    _units(be).get_function("multicast_box").bind(
        blocks, 64, (m, out, ranks, np.int32(x), np.int32(y), np.int32(nbytes), np.int32(mask)),
        shared_mem=nbytes + 1024 + 8)()
    be.synchronize()
    box = np.zeros(nbytes, np.uint8)
    for r in range(br):
        line = a[y + r, x:x + bc].view(np.uint8)
        for c in range(8):
            at = r * 128 + 16 * hand_swizzled_chunk(r, c, 128)
            box[at:at + 16] = line[16 * c:16 * c + 16]
    got = be.to_host(out).reshape(blocks, nbytes)
    for b in range(blocks):
        want = box if mask >> (b % 2) & 1 else np.full(nbytes, 0xAB, np.uint8)
        np.testing.assert_array_equal(got[b], want, err_msg=f"block {b} (rank {b % 2}), mask {mask:#04b}")
    np.testing.assert_array_equal(be.to_host(ranks), [0, 1, 0, 1])    # %cluster_ctarank = blockIdx.x % 2


def test_a_remote_arrival_completes_the_peer_s_phase(backend):
    be = _hopper_backend(backend)
    order = be.xp.zeros(3, dtype=np.int32)
    _units(be).get_function("remote_arrive").bind(6, 64, (order, np.int32(0)), shared_mem=16)()
    be.synchronize()
    np.testing.assert_array_equal(be.to_host(order), [1, 1, 1])


def test_a_missing_remote_arrival_is_reported_where_the_peer_waits():
    be = get_backend("cpu")
    order = np.zeros(1, dtype=np.int32)
    with pytest.raises(KernelLaunchError) as info:
        _units(be).get_function("remote_arrive")(2, 64, (order, np.int32(1)), shared_mem=16)
    assert order[0] == 0
    # rank 0 waits for the arrival that never comes, rank 1 for rank 0 at the closing barrier.cluster
    assert re.search(r"block \(0,0,0\):\s+64 threads .* mbarrier .*hopper_cluster_units.cu:\d+", str(info.value))
    assert re.search(r"block \(1,0,0\):\s+64 threads .* barrier.cluster", str(info.value))


def test_each_block_of_a_cluster_has_its_own_shared_memory_and_barrier(backend):
    be = get_backend(backend)
    x = np.random.default_rng().integers(-8, 8, 6 * 64).astype(np.float32)
    out = be.xp.full(6, np.nan, dtype=np.float32)
    _units(be).get_function("block_sums")(6, 64, (be.to_device(x), out))
    np.testing.assert_array_equal(be.to_host(out), x.reshape(6, 64).sum(axis=1))


def test_race_checker_tells_the_blocks_shared_memory_apart_and_still_finds_a_race():
    be = get_backend("cpu")
    kernel = _units(be).get_function("shared_writes")
    out = np.zeros(4 * 128, np.int32)
    with cpu.checking(races=True):
        kernel(4, 128, (out, np.int32(0)))          # the same offsets in each block's own copy
    np.testing.assert_array_equal(out, np.tile(np.arange(128) % 4, 4))
    with cpu.checking(races=True), pytest.raises(KernelLaunchError, match="race"):
        kernel(4, 128, (out, np.int32(1)))


@pytest.mark.slow          # the race checker runs each block alone, instrumented (~20 CPU-s)
def test_race_checking_sees_no_race_in_the_cluster_step():
    # Step 8's multicast copies, remote arrivals and cluster barriers are ordered by mbarrier
    # phases and barrier.cluster, which the race checker does not model: no race may be reported.
    with cpu.checking(races=True):
        _, result = ladder.check_case(hopper.CHAPTER.step("08"), hopper.problem.Gemm(72, 136, 136), backend="cpu")
    assert result.passed, result


def test_a_grid_that_is_not_whole_clusters_is_refused():
    kernel = _units(get_backend("cpu")).get_function("block_sums")
    with pytest.raises(KernelArgumentError, match="multiple of"):
        kernel(3, 64, (np.zeros(3 * 64, np.float32), np.zeros(3, np.float32)))


def test_cluster_dims_are_read_from_the_kernel_s_declaration():
    source = """
    extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1) a(int* x) {}
    extern "C" __global__ void __launch_bounds__(128) __cluster_dims__(4) b(int* x) {}
    extern "C" __global__ void c(int* x) {}
    """
    kernels = parse_kernels(source)
    assert [kernels[k].cluster for k in "abc"] == [(2, 1, 1), (4, 1, 1), (1, 1, 1)]
    assert kernels["a"].params[0].name == "x"
    kernels["a"].check_clusters((132, 1, 1))
    with pytest.raises(KernelArgumentError, match="multiple of"):
        kernels["b"].check_clusters((6, 1, 1))
    with pytest.raises(KernelArgumentError, match="at most 8"):
        parse_kernels('extern "C" __global__ void __cluster_dims__(4, 4) e(int* x) {}')["e"].check_clusters((16, 4, 1))
    with pytest.raises(ValueError, match="integer"):
        parse_kernels('extern "C" __global__ void __cluster_dims__(N, 1, 1) d(int* x) {}')


def test_the_cluster_step_over_several_clusters_matches_float64(backend):
    # Three clusters share the pairs of tiles (the check's default is one cluster on the CPU
    # backend), under a schedule that starts the clusters in another order; C starts as NaN. A and
    # B are temporaries: the launch must keep the arrays its tensor maps point into alive.
    from gpulab.check import compare
    from gpulab.workloads.hopper.problem import Gemm, make_inputs, poisoned, reference
    be = _hopper_backend(backend)
    step = hopper.CHAPTER.step("08")
    M, N, K = 300, 520, 136                         # 3 tile-rows (a pair and a lone tile), 3 tile-columns
    A, B = make_inputs(M, N, K, seed=5)
    C = poisoned(be.xp, (M, N), "fp16")
    with cpu.checking(schedule="reverse"):
        launch = step.launcher.bind(step, Gemm(M, N, K), {"A": be.to_device(A), "B": be.to_device(B), "C": C}, be,
                                    blocks=6)
        gc.collect()
        launch()
    be.synchronize()
    result = compare(be.to_host(C).astype(np.float32), reference(A, B), precision="fp16", name="step 08")
    assert result.passed and result.unwritten == 0, result
