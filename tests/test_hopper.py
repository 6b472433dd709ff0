"""The hopper chapter: kernels/common/hopper.h's pieces against hand-computed layouts (the CPU
backend's emulation of tensor maps, the copy engine's swizzles, wgmma's descriptors and
accumulator layout, the mbarrier's phases), and every step of the GEMM ladder against a float64
reference at sizes that are not multiples of its tile. On a Hopper GPU the same tests run there."""
import numpy as np
import pytest

from gpulab import ladder, tensormap
from gpulab.errors import KernelArgumentError, KernelLaunchError
from gpulab.kernels import get_backend, load_module
from gpulab.workloads import hopper

UNITS = "tests/kernels/hopper_units.cu"


def _hopper_backend(backend):
    if backend == "gpu":
        import cupy
        major = cupy.cuda.Device().compute_capability[0]
        if major != "9":
            pytest.skip(f"the hopper steps need compute capability 9.x (sm_90a), this GPU has {major}.x")
    return get_backend(backend)


def _units(be):
    return load_module(UNITS, be, options=hopper.launchers.GPU_OPTIONS if be.name == "gpu" else ())


def hand_swizzled_chunk(row: int, chunk: int, swizzle: int) -> int:
    """Where 16-byte chunk `chunk` of box row `row` lands in its row, for box rows exactly as wide
    as the swizzle, as the PTX ISA draws the patterns: 128 bytes: c ^ (r % 8); 64 bytes: rows
    pair up in 128-byte lines, c ^ ((r / 2) % 4); 32 bytes: c ^ ((r / 4) % 2); none: c."""
    return {128: chunk ^ (row % 8), 64: chunk ^ ((row // 2) % 4), 32: chunk ^ ((row // 4) % 2), 0: chunk}[swizzle]


@pytest.mark.parametrize("swizzle, box", [(128, (64, 16)), (64, (32, 16)), (32, (16, 16)), (0, (8, 4))])
def test_tma_box_layout_matches_the_swizzle_by_hand(backend, swizzle, box):
    be = _hopper_backend(backend)
    rows, cols = 40, 72
    a = (np.arange(rows * cols) % 2039).astype(np.float16).reshape(rows, cols)   # distinct, exact halves
    bc, br = box
    x, y = 8, 3
    nbytes = bc * br * 2
    dev = be.to_device(a)
    m = tensormap.encode_2d(dev, box, swizzle)
    out = be.xp.full(nbytes, 0xAB, dtype=np.uint8)
    _units(be).get_function("tma_box_bytes").bind(1, 128, (m, out, np.int32(x), np.int32(y), np.int32(nbytes)),
                                                  shared_mem=nbytes + 1024)()
    be.synchronize()
    got = be.to_host(out)
    want = np.zeros(nbytes, np.uint8)
    row_bytes = bc * 2
    for r in range(br):
        line = a[y + r, x:x + bc].view(np.uint8)
        for c in range(row_bytes // 16):
            at = r * row_bytes + 16 * hand_swizzled_chunk(r, c, swizzle)
            want[at:at + 16] = line[16 * c:16 * c + 16]
    np.testing.assert_array_equal(got, want)


def test_tma_fills_outside_the_array_with_zeros(backend):
    be = _hopper_backend(backend)
    a = np.random.default_rng().uniform(1, 2, (20, 16)).astype(np.float16)
    m = tensormap.encode_2d(be.to_device(a), (16, 8), 0)
    out = be.xp.full(256, 0xAB, dtype=np.uint8)
    # rows 16..23 asked for, rows 20..23 are outside: zeros.
    _units(be).get_function("tma_box_bytes").bind(1, 32, (m, out, np.int32(0), np.int32(16), np.int32(256)),
                                                  shared_mem=256 + 1024)()
    be.synchronize()
    got = be.to_host(out).view(np.float16).reshape(8, 16)
    np.testing.assert_array_equal(got[:4], a[16:20])
    assert not got[4:].any()


@pytest.mark.parametrize("x, y", [(8, 4), (16, 30)])
def test_tma_store_writes_the_swizzled_box_and_clips_to_the_array(backend, x, y):
    be = _hopper_backend(backend)
    rows, cols, bc, br = 40, 72, 64, 16
    box = (np.arange(br * bc) % 1987 + 1).astype(np.float16).reshape(br, bc)   # distinct, exact, nonzero
    img = np.zeros(br * 128, np.uint8)                      # the box as the 128-byte swizzle lays it out
    for r in range(br):
        line = box[r].view(np.uint8)
        for c in range(8):
            at = r * 128 + 16 * hand_swizzled_chunk(r, c, 128)
            img[at:at + 16] = line[16 * c:16 * c + 16]
    poison = np.float16(-7)
    C = be.xp.full((rows, cols), poison, dtype=np.float16)
    m = tensormap.encode_2d(C, (bc, br), 128)
    _units(be).get_function("tma_store_box").bind(1, 128, (m, C, be.to_device(img), np.int32(img.size), np.int32(x),
                                                           np.int32(y)), shared_mem=img.size + 1024)()
    be.synchronize()
    got = be.to_host(C)
    want = np.full((rows, cols), poison, np.float16)
    r0, r1, c0, c1 = max(y, 0), min(y + br, rows), max(x, 0), min(x + bc, cols)
    want[r0:r1, c0:c1] = box[r0 - y:r1 - y, c0 - x:c1 - x]
    np.testing.assert_array_equal(got, want)


def test_tma_store_needs_its_array_passed_as_an_argument_on_the_cpu_backend():
    be = get_backend("cpu")
    C = np.zeros((16, 64), np.float16)
    other = np.zeros((16, 64), np.float16)
    img = np.ones(16 * 128, np.uint8)
    with pytest.raises(KernelLaunchError, match="pointer argument"):
        _units(be).get_function("tma_store_box")(1, 32, (tensormap.encode_2d(C, (64, 16), 128), other, img,
                                                         np.int32(img.size), np.int32(0), np.int32(0)),
                                                 shared_mem=img.size + 1024)
    assert not C.any()


@pytest.mark.parametrize("x, y", [(-8, -3), (0, -1), (-1, 0)])
def test_a_tma_store_at_negative_coordinates_is_refused_on_the_cpu_backend(x, y):
    # On the H100 such a store stopped the kernel with an illegal instruction (and left the context
    # unusable), so the GPU is not asked; the CPU backend refuses it rather than clip it.
    be = get_backend("cpu")
    C = np.zeros((16, 64), np.float16)
    img = np.ones(16 * 128, np.uint8)
    with pytest.raises(KernelLaunchError, match="negative coordinates"):
        _units(be).get_function("tma_store_box")(1, 32, (tensormap.encode_2d(C, (64, 16), 128), C, img,
                                                         np.int32(img.size), np.int32(x), np.int32(y)),
                                                 shared_mem=img.size + 1024)
    assert not C.any()


def test_named_barriers_order_each_warpgroup_on_its_own(backend):
    be = _hopper_backend(backend)
    rounds = 3
    out = be.xp.full(rounds * 256, -1, dtype=np.int32)
    _units(be).get_function("named_barrier_exchange")(1, 256, (np.int32(rounds), np.int32(128), out))
    be.synchronize()
    t = np.arange(256)
    want = np.concatenate([1000 * r + 128 * (t // 128) + (t % 128 + 1) % 128 for r in range(rounds)])
    np.testing.assert_array_equal(be.to_host(out), want)


def test_named_barrier_that_too_few_threads_complete_is_reported():
    # 128 threads of a warpgroup on a barrier of 96: the first 96 pass, the last 32 wait for 64
    # more that never come -- a hang on a GPU, reported on the CPU backend.
    out = np.zeros(256, np.int32)
    with pytest.raises(KernelLaunchError):
        _units(get_backend("cpu")).get_function("named_barrier_exchange")(1, 256, (np.int32(1), np.int32(96), out))


def swizzle128_image(m):
    """The bytes of m (rows of 64 halves) laid out by hand with the 128-byte swizzle."""
    img = np.zeros(m.shape[0] * 128, np.uint8)
    for r in range(m.shape[0]):
        raw = np.ascontiguousarray(m[r]).view(np.uint8)
        for c in range(8):
            at = r * 128 + 16 * hand_swizzled_chunk(r, c, 128)
            img[at:at + 16] = raw[16 * c:16 * c + 16]
    return img


def _wgmma(be, a, b, layout):
    """Run wgmma_tile on A (64 x k) and B (128 x k) laid out by hand as `layout`."""
    k = a.shape[1]
    if layout == "swizzle128":        # rows of 64 halves (128 bytes), chunk c of row r at c ^ (r % 8)
        image = swizzle128_image
        mode, lbo, sbo, steps, step_bytes = 1, 16, 1024, k // 16, 32
    else:                             # no swizzle: 8 x 8 core matrices of 128 bytes, LBO 128 along k, SBO 256
        def image(m):
            img = np.zeros(m.shape[0] * k * 2, np.uint8)
            for r in range(m.shape[0]):
                for kk in range(k):
                    off = (r // 8) * 256 + (kk // 8) * 128 + (r % 8) * 16 + (kk % 8) * 2
                    img[off:off + 2] = np.array([m[r, kk]], np.float16).view(np.uint8)
            return img
        mode, lbo, sbo, steps, step_bytes = 0, 128, 256, 1, 0
    ai, bi = image(a), image(b)
    out = be.xp.full(128 * 64, np.nan, np.float32)
    args = (be.to_device(ai), np.int32(ai.size), be.to_device(bi), np.int32(bi.size), np.int32(mode), np.int32(lbo),
            np.int32(sbo), np.int32(steps), np.int32(step_bytes), out)
    kernel = _units(be).get_function("wgmma_tile")
    kernel.allow_shared_memory(16384 + bi.size + 1024)
    kernel.bind(1, 128, args, shared_mem=16384 + bi.size + 1024)()
    be.synchronize()
    # Thread t (warp w, lane 4 g + q) holds d[4 j + e] = D(16 w + g + 8 (e // 2), 8 j + 2 q + e % 2).
    d = np.full((64, 128), np.nan)
    got = be.to_host(out).reshape(128, 64)
    for t in range(128):
        w, g, q = t // 32, (t % 32) // 4, t % 4
        for i in range(64):
            j, e = divmod(i, 4)
            d[16 * w + g + 8 * (e // 2), 8 * j + 2 * q + e % 2] = got[t, i]
    return d


@pytest.mark.parametrize("layout, k", [("swizzle128", 64), ("interleave", 16)])
def test_wgmma_reads_the_descriptors_layout(backend, layout, k):
    be = _hopper_backend(backend)
    rng = np.random.default_rng()
    a = rng.uniform(-1, 1, (64, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (128, k)).astype(np.float16)
    d = _wgmma(be, a, b, layout)
    np.testing.assert_allclose(d, a.astype(np.float64) @ b.astype(np.float64).T, rtol=1e-5, atol=1e-4)


def test_a_wrong_descriptor_gives_a_wrong_product():
    # The emulation must be able to fail: the 128-byte swizzled image read as if unswizzled.
    be = get_backend("cpu")
    rng = np.random.default_rng()
    a = rng.uniform(-1, 1, (64, 64)).astype(np.float16)
    b = rng.uniform(-1, 1, (128, 64)).astype(np.float16)
    good = _wgmma(be, a, b, "swizzle128")
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    assert np.allclose(good, ref, atol=1e-4)
    # Same image, the descriptor's swizzle mode set to 32 bytes (3) instead of 128 (1).
    k = 64
    ai, bi = swizzle128_image(a), swizzle128_image(b)
    out = np.full(128 * 64, np.nan, np.float32)
    kernel = _units(be).get_function("wgmma_tile")
    kernel.allow_shared_memory(16384 + bi.size + 1024)
    kernel(1, 128, (ai, np.int32(ai.size), bi, np.int32(bi.size), np.int32(3), np.int32(16), np.int32(1024),
                    np.int32(k // 16), np.int32(32), out), shared_mem=16384 + bi.size + 1024)
    assert np.isfinite(out).all()
    assert not np.allclose(np.sort(out), np.sort(good.ravel().astype(np.float32)), atol=1e-3)


@pytest.mark.parametrize("arrivals, parity", [(1, 0), (0, 1), (2, 1), (3, 0)])
def test_mbarrier_wait_returns_once_the_phase_of_its_parity_completed(arrivals, parity):
    # Phase n completes at arrival n + 1 (count 1). wait(p) returns when the current phase's
    # parity is not p: the phase of parity p just before it has completed (a fresh barrier
    # counts the phase before its first as completed, so wait(1) returns at once).
    out = np.zeros(1, np.int32)
    _units(get_backend("cpu")).get_function("mbarrier_parity")(1, 1, (np.int32(arrivals), np.int32(parity), out))
    assert out[0] == 1


@pytest.mark.parametrize("arrivals, parity", [(0, 0), (1, 1), (2, 0)])
def test_mbarrier_wait_on_a_phase_nobody_completes_is_reported(arrivals, parity):
    out = np.zeros(1, np.int32)
    with pytest.raises(KernelLaunchError, match="mbarrier"):
        _units(get_backend("cpu")).get_function("mbarrier_parity")(1, 1, (np.int32(arrivals), np.int32(parity), out))
    assert out[0] == 0


@pytest.mark.parametrize("number", [s.number for s in hopper.CHAPTER.steps])
def test_step_matches_float64_reference(backend, number):
    be = _hopper_backend(backend)
    step = hopper.CHAPTER.step(number)
    mine = [case for case in hopper.CHAPTER.check_cases if step.launcher.accepts(case)]
    for case in mine:
        assert case.M % step.bm or case.N % step.bn or case.K % hopper.steps.BK     # edges of the tile are tested
    table = ladder.assert_ok(hopper.CHAPTER.check(be, steps=[step]))
    assert len(table) == len(mine) == len(hopper.problem.CHECK_SHAPES)
    assert (table["status"] == ladder.OK).all() and (table["unwritten"] == 0).all()


def test_shapes_the_steps_cannot_take_are_refused():
    with pytest.raises(KernelArgumentError, match="multiple of 8"):
        ladder.check_case(hopper.CHAPTER.step("02"), hopper.problem.Gemm(64, 64, 100), backend="cpu")
    with pytest.raises(KernelArgumentError, match="N must be a multiple of 8"):
        ladder.check_case(hopper.CHAPTER.step("07"), hopper.problem.Gemm(64, 68, 64), backend="cpu")
    with pytest.raises(KernelArgumentError, match="16 bytes"):
        tensormap.encode_2d(np.zeros((8, 12), np.float16), (8, 8), 0)
    with pytest.raises(KernelArgumentError, match="at most 128 bytes"):
        tensormap.encode_2d(np.zeros((8, 128), np.float16), (128, 8), 128)
    kernel = _units(get_backend("cpu")).get_function("tma_box_bytes")
    with pytest.raises(KernelArgumentError, match="encode_2d"):
        kernel(1, 32, (np.zeros(16, np.uint8), np.zeros(16, np.uint8), np.int32(0), np.int32(0), np.int32(16)))


@pytest.mark.slow        # NVRTC builds every step for sm_90a and cuobjdump reads it back (~8 CPU-s)
def test_wgmma_steps_compile_to_hopper_instructions():
    # Without a GPU: NVRTC builds each step for sm_90a and its SASS shows the instructions the
    # step is about (HGMMA for wgmma, UTMALDG for the copy engine, no local-memory spills).
    from gpulab import sass
    why = sass.unavailable()
    if why:
        pytest.skip(why)
    from gpulab import paths
    from gpulab.cpu import resources
    import subprocess
    import tempfile
    from pathlib import Path
    expect = {"00": ("HMMA", "LDGSTS"), "01": ("HMMA", "UTMALDG"), "02": ("HGMMA", "UTMALDG"),
              "03": ("HGMMA", "UTMALDG"), "04": ("HGMMA", "UTMALDG", "USETMAXREG"),
              "05": ("HGMMA", "UTMALDG", "USETMAXREG"), "06": ("HGMMA", "UTMALDG", "USETMAXREG"),
              "07": ("HGMMA", "UTMALDG", "UTMASTG", "USETMAXREG"),
              # the multicast copy, the arrival on the peer's barrier, barrier.cluster
              "08": ("HGMMA", "UTMALDG.2D.MULTICAST", "UTMASTG", "USETMAXREG", "SYNCS.ARRIVE.TRANS64.RED",
                     "UCGABAR_ARV", "UCGABAR_WAIT")}
    for step in hopper.CHAPTER.steps:
        real = paths.kernel_path(step.file)
        cubin = resources.compile_cubin(real.read_text(), step.file, "sm_90a", (str(paths.KERNELS), str(real.parent)))
        table = resources.cubin_resources(cubin)
        assert table.loc[step.kernel, "local_bytes"] == 0, f"step {step.number} spills to local memory"
        tool, env = sass._cuobjdump()
        with tempfile.TemporaryDirectory() as tmp:
            file = Path(tmp) / "k.cubin"
            file.write_bytes(cubin)
            text = subprocess.run([tool, "-sass", str(file)], capture_output=True, text=True, env=env).stdout
        for op in expect[step.number]:
            assert op in text, f"step {step.number}: no {op} in its SASS"


@pytest.mark.slow          # the race checker runs each block alone, instrumented (~6 CPU-s)
def test_race_checking_sees_no_race_in_the_mbarrier_ordered_steps():
    # The copy engine's writes and wgmma's reads are ordered by mbarrier phases, which the race
    # checker does not model: it must not report them. Step 7 has no __syncthreads() after its
    # set-up: everything there is ordered by mbarriers (producer, consumers, tiles) and, for the
    # staging of C, by named barriers and the copy engine's reads (its persistent kernel is step
    # 5's and 6's, so this covers theirs too).
    from gpulab import cpu
    with cpu.checking(races=True):
        _, result = ladder.check_case(hopper.CHAPTER.step("07"), hopper.problem.Gemm(72, 136, 136), backend="cpu")
    assert result.passed, result
