"""The basics chapter's kernels, on both backends: sizes that are not multiples
of the block, outputs poisoned so unwritten elements show; the counts the chapter's
tables show, from the CPU backend's counters; and the notebook's glued prose."""
import ast
import dataclasses
import json
import re

import numpy as np
import pytest

import gpulab
from gpulab import cpu, datasheet, paths


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


def test_a_2d_block_is_cut_into_warps_along_x_first(backend):
    be = gpulab.get_backend(backend)
    fn = gpulab.load_module("basics/05_warps_2d.cu", be).get_function("warp_leader")
    for block in ((8, 8), (32, 2), (4, 8, 2), (96, 1)):
        size = int(np.prod(block))
        linear, leader = be.poisoned(size, np.int32), be.poisoned(size, np.int32)
        fn((1,), block, (linear, leader))
        ids = np.arange(size)
        assert (be.to_host(linear) == ids).all()
        assert (be.to_host(leader) == ids // 32 * 32).all(), block      # lane 0 of each thread's warp


def test_2d_scales_with_x_along_rows_or_down_columns(backend):
    be = gpulab.get_backend(backend)
    module = gpulab.load_module("basics/05_warps_2d.cu", be)
    for H, W in ((1, 1), (9, 70), (40, 33)):
        a = np.random.default_rng(H * W).uniform(-1, 1, (H, W)).astype(np.float32)
        for name, grid in (("scale_x_along_rows", (-(-W // 32), -(-H // 8))),
                           ("scale_x_down_columns", (-(-H // 32), -(-W // 8)))):
            out = be.poisoned((H, W))
            module.get_function(name)(grid, (32, 8), (H, W, be.to_device(a), out))
            assert np.array_equal(be.to_host(out), 2 * a), (name, H, W)


def test_2d_scales_are_counted_as_4_and_32_sectors():
    module = gpulab.load_module("basics/05_warps_2d.cu", "cpu")
    H, W = 64, 96
    a = np.ones((H, W), np.float32)
    sectors = {}
    for name, grid in (("scale_x_along_rows", (W // 32, H // 8)), ("scale_x_down_columns", (H // 32, W // 8))):
        with cpu.counting() as counted:
            module.get_function(name)(grid, (32, 8), (H, W, a, np.empty_like(a)))
        sectors[name] = counted.launches[0].totals["sectors_per_request"]
    assert sectors == {"scale_x_along_rows": 4, "scale_x_down_columns": 32}


def _constant_module(backend, C):
    module = gpulab.load_module("basics/06_constant_scale.cu", backend)
    factors = np.random.default_rng(C).uniform(0.5, 2, C).astype(np.float32)
    table = np.zeros(1024, np.float32)
    table[:C] = factors
    module.set_constant("scale", table)
    return module, factors


def test_constant_scale_in_both_layouts(backend):
    be = gpulab.get_backend(backend)
    for C, HW, N in ((3, 5, 2), (64, 32, 1), (100, 7, 3)):
        module, factors = _constant_module(be, C)
        n = N * C * HW
        x = np.random.default_rng(n).uniform(-1, 1, n).astype(np.float32)
        for name, sizes, channel in (("scale_channels_first", (n, C, HW), np.arange(n) // HW % C),
                                     ("scale_channels_last", (n, C), np.arange(n) % C)):
            y = be.poisoned(n + 3)                           # 3 past the end must stay NaN
            module.get_function(name)((-(-n // 256),), (256,), (*sizes, be.to_device(x), y))
            y = be.to_host(y)
            assert np.array_equal(y[:n], x * factors[channel]) and np.isnan(y[n:]).all(), (name, C, HW)


def test_constant_reads_are_counted_by_distinct_addresses():
    # One channel per warp: one address per request; 32 consecutive channels: 32; 4 channels: 4.
    for C, HW, first, last in ((64, 256, 1, 32), (4, 64, 1, 4)):
        module, _ = _constant_module("cpu", C)
        n = C * HW
        x = np.ones(n, np.float32)
        passes = {}
        for name, sizes in (("scale_channels_first", (n, C, HW)), ("scale_channels_last", (n, C))):
            with cpu.counting() as counted:
                module.get_function(name)((n // 256,), (256,), (*sizes, x, np.empty_like(x)))
            totals = counted.launches[0].totals
            assert totals["constant_load_requests"] == n // 32
            passes[name] = totals["constant_passes_per_request"]
        assert passes == {"scale_channels_first": first, "scale_channels_last": last}


def test_atomic_sums(backend):
    be = gpulab.get_backend(backend)
    module = gpulab.load_module("basics/07_atomic_sum.cu", be)
    for n in (1, 255, 1000, 20_001):
        x = np.random.default_rng(n).uniform(-1, 1, n).astype(np.float32)
        for name in ("sum_atomic_each", "sum_block_then_atomic"):
            total = be.to_device(np.zeros(1, np.float32))
            module.get_function(name)((-(-n // 256),), (256,), (n, be.to_device(x), total))
            assert abs(be.to_host(total)[0] - x.astype(np.float64).sum()) <= 1e-5 * np.abs(x).sum() + 1e-6, (name, n)


def test_atomics_are_counted_per_update_and_per_busiest_address():
    module = gpulab.load_module("basics/07_atomic_sum.cu", "cpu")
    n = 1000                                     # 31 full warps and one of 8 lanes, in 4 blocks
    x = np.ones(n, np.float32)
    totals = {}
    for name in ("sum_atomic_each", "sum_block_then_atomic"):
        total = np.zeros(1, np.float32)
        with cpu.counting() as counted:
            module.get_function(name)((4,), (256,), (n, x, total))
        totals[name] = counted.launches[0].totals
    each, block = totals["sum_atomic_each"], totals["sum_block_then_atomic"]
    # A float atomicAdd is a compare-and-swap loop on the CPU: only updates that took effect count.
    assert (each["atomic_updates"], each["atomic_update_requests"], each["atomic_busiest_address_updates"]) == (n, 32, n)
    assert (block["atomic_updates"], block["atomic_update_requests"], block["atomic_busiest_address_per_request"]) == (4, 4, 1)


def test_an_atomic_request_to_several_addresses_counts_its_busiest(tmp_path):
    # Lane l adds to bin l % 4 (8 updates of each bin per warp), or, skewed, to bin 0 when
    # l < 20 and to bins 1-3 otherwise (20 of a warp's 32 updates on bin 0).
    source = tmp_path / "bins.cu"
    source.write_text('extern "C" __global__ void bins(unsigned int* counts, int skewed) {\n'
                      '    const int l = threadIdx.x % 32;\n'
                      '    atomicAdd(&counts[skewed ? (l < 20 ? 0 : 1 + l % 3) : l % 4], 1u);\n}\n')
    fn = gpulab.load_module(source, "cpu").get_function("bins")
    for skewed, busiest in ((0, 8), (1, 20)):
        counts = np.zeros(4, np.uint32)
        with cpu.counting() as counted:
            fn((1,), (64,), (counts, skewed))
        totals = counted.launches[0].totals
        assert totals["atomic_busiest_address_per_request"] == busiest and counts.sum() == 64
        assert (totals["atomic_updates"], totals["atomic_update_requests"]) == (64, 2)


# ----------------------------------------------------------------- the notebook's prose
NOTEBOOK = paths.REPO / "book" / "basics" / "basics.ipynb"


def _cells(kind):
    return ["".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == kind]


def test_every_glue_key_the_prose_reads_is_glued():
    """The site build fails on a {glue} key no cell glues; nbmake runs the notebook without
    noticing. Keys glued by name are read from the code; glue(**mapping) is resolved in the
    names the first cell defines (the H100's datasheet facts)."""
    used = {m for text in _cells("markdown") for m in re.findall(r"\{glue(?::\w+)?\}`([A-Za-z_]\w*)", text)}
    glued, namespace = set(), {"h100": datasheet.h100()}
    for source in _cells("code"):
        tree = ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "glue":
                for keyword in node.keywords:
                    glued |= {keyword.arg} if keyword.arg else set(eval(ast.unparse(keyword.value), namespace))  # noqa: S307
    assert used, "the prose reads no glued number"
    assert not used - glued, f"glue keys the prose reads and no cell glues: {sorted(used - glued)}"


def test_the_glossary_names_columns_the_profiles_have():
    from gpulab import profiler
    known = {"sectors_per_request", *profiler.SHORT_NAMES.values()}
    glossary = next(text for text in _cells("markdown") if "(basics-profiler-glossary)=" in text)
    named = set(re.findall(r"^\| `(\w+)`(?:, `(\w+)`)?", glossary, re.M))
    columns = {c for pair in named for c in pair if c}
    assert len(columns) >= 10 and columns <= known, columns - known


@pytest.mark.solutions
def test_the_puzzles_are_a_chapter_checked_in_the_ladder_schema():
    from gpulab import puzzles
    checks = puzzles.CHAPTER.check("cpu", races=True)
    assert list(checks["step"].unique()) == ["E1", "E2", "E3"] and (checks["status"] == "ok").all()
    # each puzzle on its own kind's cases only: a map's four sizes, the broadcast's three, the histogram's two
    assert checks.groupby("step").size().to_dict() == {"E1": 4, "E2": 3, "E3": 2}
    assert (checks[checks.step == "E3"]["tolerance"] == 0).all()        # counts are compared exactly
    assert puzzles.CHAPTER.step("E2") is puzzles.TWO_D


@pytest.mark.solutions
def test_a_puzzle_that_writes_nothing_or_races_fails_its_check(tmp_path):
    from gpulab import puzzles
    source = (paths.KERNELS / puzzles.HISTOGRAM.file).read_text()
    racy = tmp_path / "racy.cu"          # the histogram without its atomic: lost updates, a race
    racy.write_text(source.replace("atomicAdd(&counts[values[i]], 1u);", "counts[values[i]] += 1u;"))
    assert racy.read_text() != source
    step = dataclasses.replace(puzzles.HISTOGRAM, file=str(racy))
    with pytest.raises(Exception, match="race"):
        puzzles.CHAPTER.check("cpu", steps=[step], sizes=[(700, 5)], races=True)
    lazy = tmp_path / "lazy.cu"          # a map that writes only the first block's elements
    relu = (paths.KERNELS / puzzles.GUARDED_MAP.file).read_text()
    lazy.write_text(relu.replace("if (i < n)", "if (i < n && i < 256)"))
    assert lazy.read_text() != relu
    checks = puzzles.CHAPTER.check("cpu", steps=[dataclasses.replace(puzzles.GUARDED_MAP, file=str(lazy))],
                                   sizes=[300])
    assert checks["status"].tolist() == ["FAILED"] and checks["unwritten"].tolist() == [44]


def test_a_puzzle_size_of_no_kind_or_a_step_with_no_case_is_refused():
    from gpulab import puzzles
    with pytest.raises(ValueError, match=r"an int\) or a pair"):
        puzzles.cases([(1, 2, 3)])
    with pytest.raises(ValueError, match="accepts none of the cases"):
        puzzles.CHAPTER.check("cpu", steps=[puzzles.GUARDED_MAP], sizes=[(4, 4)])


def test_basics_has_exercises_but_no_workload():
    from gpulab import chapters, exercises
    assert "basics" not in chapters.names(with_workload=True)     # `gpulab record` has nothing to record
    chapter, step = exercises.workload_step(exercises.get("basics.2"), paths.REPO / "kernels/basics/x.cu", {})
    from gpulab import puzzles
    assert chapter is puzzles.CHAPTER and step.kernel == "broadcast_add" and step.file.endswith("x.cu")
