"""The basics chapter's kernels, on both backends: sizes that are not multiples
of the block, outputs poisoned so unwritten elements show."""
import numpy as np

import gpulab


def test_who_am_i(backend):
    be = gpulab.get_backend(backend)
    n, threads = 201, 96
    fn = gpulab.load_module("basics/01_who_am_i.cu", be).get_function("who_am_i")
    out = [be.poisoned(n + 5, np.int32) for _ in range(5)]          # 5 past the end must stay poisoned
    fn((-(-n // threads),), (threads,), (n, *out))
    block, thread, warp, lane, index = (be.to_host(a) for a in out)
    i = np.arange(n)
    assert (index[:n] == i).all() and (block[:n] == i // threads).all() and (thread[:n] == i % threads).all()
    assert (warp[:n] == (i % threads) // 32).all() and (lane[:n] == (i % threads) % 32).all()
    assert (index[n:] == np.iinfo(np.int32).max).all()


def test_strided_read(backend):
    be = gpulab.get_backend(backend)
    fn = gpulab.load_module("basics/02_strided_read.cu", be).get_function("strided_read")
    for n, stride in ((1, 1), (257, 3), (1000, 32)):
        x = np.random.default_rng(n).uniform(-1, 1, n * stride).astype(np.float32)
        out = be.poisoned(n)
        fn((-(-n // 256),), (256,), (n, stride, be.to_device(x), out))
        assert np.array_equal(be.to_host(out), x[::stride])


def test_both_transposes(backend):
    be = gpulab.get_backend(backend)
    module = gpulab.load_module("basics/03_shared_banks.cu", be)
    tile = np.random.default_rng(3).uniform(-1, 1, (32, 32)).astype(np.float32)
    for name in ("transpose_tile", "transpose_tile_padded"):
        out = be.poisoned((32, 32))
        module.get_function(name)((1,), (32, 32), (be.to_device(tile), out))
        assert np.array_equal(be.to_host(out), tile.T)


def _paths_reference(x, steps):
    """Both paths in float32, the kernels' arithmetic step by step."""
    one, zero = np.zeros_like(x), np.zeros_like(x)
    for _ in range(steps):
        one = one * x + np.float32(1)
        zero = zero * np.float32(0.5) - x
    return one, zero


def test_divergence_kernels_compute_the_same_function(backend):
    be = gpulab.get_backend(backend)
    module = gpulab.load_module("basics/04_divergence.cu", be)
    n = 300
    x = np.random.default_rng(4).uniform(-1, 1, n).astype(np.float32)
    for steps in (0, 1, 7):
        one, zero = _paths_reference(x, steps)
        for name, path_of in (("by_lane", lambda t: t % 2), ("by_warp", lambda t: (t // 32) % 2)):
            y, path = be.poisoned(n), be.poisoned(n, np.int32)
            module.get_function(name)((-(-n // 256),), (256,), (n, steps, be.to_device(x), y, path))
            expected_path = path_of(np.arange(n) % 256)
            assert (be.to_host(path) == expected_path).all()
            np.testing.assert_allclose(be.to_host(y), np.where(expected_path == 1, one, zero), rtol=1e-5, atol=1e-6)
    y = be.poisoned(n)
    module.get_function("short_by_lane")((-(-n // 256),), (256,), (n, be.to_device(x), y))
    lane = np.arange(n) % 256 % 2
    np.testing.assert_allclose(be.to_host(y), np.where(lane == 1, x * x + 1, 2 * x - 1), rtol=1e-6)
