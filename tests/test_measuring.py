"""Chapter 1's kernels, through the same checks the book runs."""
import pytest

import gpulab
from gpulab.workloads import measuring as saxpy


@pytest.mark.parametrize("step", saxpy.STEPS, ids=lambda s: s.kernel)   # the exercise: test_exercises.py
def test_every_step_matches_the_reference(backend, step):
    result = saxpy.CHAPTER.check(backend, steps=[step])
    assert (result["status"] == "ok").all(), result
    assert set(result["n"]) == set(saxpy.CHECK_SIZES)


def test_a_kernel_that_skips_an_element_is_caught(backend, tmp_path):
    # The check must be able to fail: drop the last element's write.
    source = gpulab.show_source(saxpy.STEPS[0].file).text.replace("if (i < n)", "if (i < n - 1)")
    broken = tmp_path / "01_saxpy_off_by_one.cu"
    broken.write_text(source)
    x, y = saxpy.make_inputs(1000)
    be = gpulab.get_backend(backend)
    z = be.poisoned(1000)
    gpulab.load_module(broken, be).saxpy(4, 256, (1000, saxpy.A, be.to_device(x), be.to_device(y), z))
    result = gpulab.compare(z, saxpy.reference(saxpy.A, x, y))
    assert not result.passed and result.unwritten == 1


def test_launch_shapes_cover_the_array():
    assert saxpy.STEPS[0].grid(257) == 2
    assert saxpy.STEPS[1].grid(4 * 256 + 1) == 2   # the leftover element needs its own thread
    assert saxpy.EXERCISE.grid(10**9) == 8         # grid-stride: fixed grid
    assert saxpy.work(10) == {"flops": 20, "bytes": 120}


def test_the_recorded_run_has_every_experiment():
    run = gpulab.load_run(saxpy.CHAPTER)
    for experiment in ("ladder", "graph", "timers", "first_launch", "transfers", "streams", "ceilings"):
        assert not run.experiment(experiment).empty
    assert "H100" in run.gpu
    assert set(run.experiment("ladder")["size"]) == set(saxpy.SIZES)


def test_the_recorded_run_times_the_first_kernel_after_idle_and_the_unwarmed_breakdown():
    import gpulab
    run = gpulab.load_run(saxpy.CHAPTER)
    idle = run.experiment("idle")
    assert set(idle["warm_ms"]) == {0, 2} and idle["idle_ms"].max() >= 200
    assert not run.experiment("transfers_unwarmed").empty
    assert set(run.experiment("transfers")["warmed"].astype(str)) == {"True"}
    assert len(run.experiment("copy_methods")) >= 3
    table = saxpy.speedup_by_size(run)
    assert table["launch-bound"].iloc[0] and not table["launch-bound"].iloc[-1]


def test_the_ceiling_comparison_separates_rows_served_by_l2_from_rows_streaming_from_hbm():
    run = gpulab.load_run(saxpy.CHAPTER)
    l2 = saxpy.l2_bytes(run.gpu)
    assert l2 == 50 * 2**20                       # the H100's L2, as CUDA reports it
    from_hbm, in_l2 = saxpy.fastest_against_ceiling(run)
    assert saxpy.BYTES_PER_ELEMENT * from_hbm["size"] >= 2 * l2
    assert saxpy.BYTES_PER_ELEMENT * in_l2["size"] <= l2
    # In the recorded run the L2-resident row is far faster than any row that streams from HBM:
    # quoting it against the copy ceiling would claim a memory faster than the memory.
    assert in_l2["gbs"] > 1.2 * from_hbm["gbs"]
    assert saxpy.fits_in_l2(int(in_l2["size"]), run.gpu) and not saxpy.fits_in_l2(int(from_hbm["size"]), run.gpu)


def test_the_cold_tables_gaps_are_the_ones_its_caption_names():
    # The notebook shows gaps as gpulab.runs.NOT_MEASURED with saxpy.COLD_GAP as the reason:
    # only cuBLAS's saxpy lacks graph times.
    run = gpulab.load_run("measuring")
    cold = run.timings[run.timings["experiment"].isin(["ladder_cold", "graph_cold"])]
    table = cold.pivot_table(index="variant", columns="experiment", values="median_ms", aggfunc="count")
    gaps = table[table.isna().any(axis=1)].index
    assert list(gaps) == ["cuBLAS saxpy (in place)"] and "cuBLAS's saxpy" in saxpy.COLD_GAP
