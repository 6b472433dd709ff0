"""kernels/common/ptx.h: mma.sync, ldmatrix and cp.async with their documented register
layouts, on the CPU backend's emulation and (where there is one) on the GPU."""
from pathlib import Path

import numpy as np

from gpulab.kernels import get_backend, load_module

FILE = "tests/kernels/ptx_fragments.cu"


def test_half_mma_with_ldmatrix_and_cp_async(backend):
    be = get_backend(backend)
    rng = np.random.default_rng()
    a = rng.uniform(-1, 1, (16, 16)).astype(np.float16)
    b = rng.uniform(-1, 1, (16, 16)).astype(np.float16)
    d = be.poisoned((16, 16), np.float32)
    load_module(FILE, be).get_function("mma_half_16x16")(1, 32, (be.to_device(a), be.to_device(b), d))
    be.synchronize()
    a_seen = a.astype(np.float64)
    a_seen[15, 8:] = 0                     # the chunk copied with source size 0 reads as zeros
    np.testing.assert_allclose(be.to_host(d), a_seen @ b.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_tf32_mma_with_ldmatrix(backend):
    be = get_backend(backend)
    rng = np.random.default_rng()

    def tf32(v):     # values the tensor cores take exactly: 10 mantissa bits
        bits = np.asarray(v, np.float32).view(np.uint32) & np.uint32(0xffffe000)
        return bits.view(np.float32)
    a = tf32(rng.uniform(-1, 1, (16, 8)))
    bt = tf32(rng.uniform(-1, 1, (8, 8)))           # n x k
    d = be.poisoned((16, 8), np.float32)
    load_module(FILE, be).get_function("mma_tf32_16x8")(1, 32, (be.to_device(a), be.to_device(bt), d))
    be.synchronize()
    np.testing.assert_allclose(be.to_host(d), a.astype(np.float64) @ bt.T.astype(np.float64),
                               rtol=1e-5, atol=1e-6)


def test_a_wrong_fragment_layout_gives_a_wrong_product(tmp_path):
    # The emulation must be able to fail: A's two k halves swapped in its registers.
    text = Path(FILE).read_text()
    wrong = text.replace("ldmatrix_x4(a, as + (lane % 16) * 16 + 8 * (lane / 16));",
                         "ldmatrix_x4(a, as + (lane % 16) * 16 + 8 * (1 - lane / 16));")
    assert wrong != text
    broken = tmp_path / "ptx_broken.cu"
    broken.write_text(wrong)
    rng = np.random.default_rng()
    a = rng.uniform(-1, 1, (16, 16)).astype(np.float16)
    b = rng.uniform(-1, 1, (16, 16)).astype(np.float16)
    d = np.full((16, 16), np.nan, np.float32)
    load_module(broken, "cpu").get_function("mma_half_16x16")(1, 32, (a, b, d))
    a_seen = a.astype(np.float64)
    a_seen[15, 8:] = 0
    assert np.isfinite(d).all() and not np.allclose(d, a_seen @ b.astype(np.float64), rtol=1e-3, atol=1e-3)
