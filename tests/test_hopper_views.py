"""The hopper notebook's views: the numbers it quotes agree with the recorded run's own columns,
and its diagrams compute the swizzle and the ring's parities the kernels use."""
import numpy as np
import pytest

from gpulab import exercises, paths
from gpulab.runs import load_run
from gpulab.workloads import hopper
from gpulab.workloads.hopper import views


@pytest.mark.parametrize("gpu", ["H100", "H200"])
def test_numbers_agree_with_the_runs_own_ratios(gpu):
    run = load_run("hopper", gpu)
    n = views.numbers(run)
    t = views.rows(run)
    assert n["peak_tflops"] == pytest.approx(989.4)     # H100 SXM5 and H200: dense fp16, float accumulation
    for _, r in t[t["step"] != views.VENDOR].iterrows():
        # record.py computed vs_best_cublas on the GPU; the views recompute it from the times
        assert n[f"cublas{r['step']}"] == pytest.approx(r["vs_best_cublas"], rel=1e-4)
    assert n["best_ms"] == t[t["step"] != views.VENDOR]["median_ms"].min()
    assert n["standing"] == ("past" if n["best_cublas"] > 1 else "short of")
    assert n["cublas_cluster"] in ("2x1", "1x2", "1x1", "none")
    assert [s for s in views.prediction_table(run)["step"]] == [s.number for s in hopper.CHAPTER.steps] + ["07 bf16", "07 tf32"]


def test_the_cpu_backend_runs_the_steps():
    assert hopper.launchers.needs_hopper("cpu") is None


def test_swizzle_chunk_by_hand():
    assert views.swizzle_chunk(0, 5) == 5
    assert views.swizzle_chunk(3, 5) == 6                    # 5 ^ 3
    assert views.swizzle_chunk(9, 2) == 3                    # row 9: the pattern repeats every 8 rows
    assert views.swizzle_chunk(2, 1, swizzle=64) == 0        # offset 144: bit 7 set, so chunk 1 ^ 1
    assert views.swizzle_chunk(1, 1, swizzle=64) == 1        # offset 80: bits 7-8 clear
    for s in (32, 64, 128):
        for r in range(16):
            assert sorted(views.swizzle_chunk(r, c, s) for c in range(s // 16)) == list(range(s // 16))


def _solution(exercise_id):
    e = exercises.get(exercise_id)
    return exercises.define(e, exercises.notebook_cell(paths.REPO / e.file, e.cell))


def test_the_figure_and_the_exercise_solution_swizzle_alike():
    swizzled = _solution("hopper.1")
    for s in (32, 64, 128):
        rows = 1024 // s
        got = swizzled(np.arange(0, 1024, 16), s)
        want = [r * s + 16 * views.swizzle_chunk(r, c, s) for r in range(rows) for c in range(s // 16)]
        assert list(got) == want


def test_the_rings_parities_never_block_a_wait_that_should_pass():
    """Drive one slot's full barrier (1 arrival + bytes) and empty barrier (consumer warps) through
    the ring's schedule with the exercise's mbarrier model: the producer's wait for round r's empty
    parity returns once round r - 1 was consumed (at once for round 0), the consumer's wait for the
    full parity only after the bytes landed."""
    waits = _solution("hopper.2")
    stages, slices = 3, 12
    schedule = views.ring_schedule(slices, stages)
    full, empty = {s: [] for s in range(stages)}, {s: [] for s in range(stages)}
    for _, r in schedule.iterrows():
        s = r["slot"]
        assert waits(2, empty[s] + [["wait", int(r["empty parity"])]])[-1]       # producer may refill
        full[s] += [["wait", int(r["full parity"])], ["arrive_expect_tx", 64], ["complete_tx", 64]]
        before, after = waits(1, full[s] + [["wait", int(r["full parity"])]])[-2:]
        assert not before and after                 # blocks until the bytes land, then returns
        empty[s] += [["arrive", 1], ["arrive", 1]]


def test_every_number_the_prose_reads_is_glued():
    """Each {glue:text}`name` of the notebook's markdown is among the values the notebook glues
    (tests/fixtures/glued/hopper.json, which tests/test_glued.py holds to the executed notebook)."""
    import json
    import re
    nb = json.loads((paths.REPO / "book" / "hopper" / "hopper.ipynb").read_text())
    prose = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    used = set(re.findall(r"\{glue:text\}`(\w+)", prose))
    glued = json.loads((paths.REPO / "tests" / "fixtures" / "glued" / "hopper.json").read_text())
    assert used and not used - glued.keys(), sorted(used - glued.keys())


@pytest.mark.parametrize("gpu", ["H100", "H200"])
def test_bf16_tf32_and_shape_numbers_agree_with_the_runs_own_ratios(gpu):
    """Step 7's standing in each type and at each shape, as the prose quotes it, is the ratio the
    GPU run itself wrote (record.vs_best_cublas), and every check there passed."""
    run = load_run("hopper", gpu)
    n = views.type_numbers(run)
    t = run.timings
    assert t[t["experiment"].str.startswith("hopper")]["passed"].astype(bool).all()
    for precision in ("bf16", "tf32"):
        rows = t[(t["experiment"] == f"hopper_gemm_{precision}") & (t["step"].astype(str) != views.VENDOR)]
        for _, r in rows.iterrows():
            assert n[f"ratio_{precision}_{int(r['size'])}"] == pytest.approx(r["vs_best_cublas"], rel=1e-4)
            assert r["precision"] == precision and r["variant"].endswith(precision)
    shapes = t[(t["experiment"] == "hopper_shapes") & (t["step"].astype(str) != views.VENDOR)]
    assert len(shapes) == len(hopper.record.SHAPES) * 3
    for _, r in shapes.iterrows():
        key = f"{r['shape'].replace(' ', '_')}_{r['precision']}"
        assert n[f"shape_ratio_{key}"] == pytest.approx(r["vs_best_cublas"], rel=1e-4)
    # tf32: the step's error is that of operands with their low 13 bits dropped, cuBLAS's that of
    # operands rounded to nearest (the prose says so from these numbers)
    assert n["error_tf32_4096"] == pytest.approx(n["tf32_truncated_error"], rel=0.05)
    assert n["vendor_error_tf32_4096"] == pytest.approx(n["tf32_rounded_error"], rel=0.05)
    steps = list(views.prediction_table(run)["step"])
    assert steps[-2:] == ["07 bf16", "07 tf32"]


def test_the_shapes_are_the_book_chapters_gemms():
    """record.SHAPES against the chapters' own shape declarations, and the rules a tensor map sets
    (rows of A, B and C multiples of 16 bytes in every type)."""
    from gpulab.workloads import training
    from gpulab.workloads.alexnet import problem as alexnet
    from gpulab.workloads.convpool import problem as convpool
    shapes = {name: (M, N, K) for name, M, N, K, _ in hopper.record.SHAPES}
    L = convpool.LAYER
    assert shapes["convpool b32"] == (32 * L.E * L.F, L.M, L.C * 5 * 5)
    for layer in alexnet.LAYERS:
        M, N, K = shapes[f"alexnet conv{layer.index}"]
        assert (M, N) == (alexnet.MAIN_N * layer.E * layer.F, layer.M)
        assert K == -(-layer.K // 8) * 8                      # 363 -> 368 for conv1, others exact
    assert shapes["training layer 1"] == (1024, training.HIDDEN, -(-training.VOCAB // 8) * 8)
    for M, N, K in shapes.values():
        assert K % 8 == 0 and N % 8 == 0                        # 16-byte rows of halves (and floats)


def test_tiles_and_columns_used_by_hand():
    run = load_run("hopper", "H100")
    s = views.shapes_table(run).drop_duplicates("shape").set_index("shape")
    assert s.loc["alexnet conv1", "tiles"] == 387200 // 128 * 1 and s.loc["alexnet conv1", "N used of the tile"] == 96 / 256
    assert s.loc["alexnet conv3", "tiles"] == 21632 // 128 * 2 and s.loc["alexnet conv3", "N used of the tile"] == 0.75
    assert s.loc["training layer 1", "tiles"] == 8
    e = views.tf32_operand_errors(m=64, k=1024)
    assert 2 < e["tf32_truncated_error"] / e["tf32_rounded_error"] < 3.5


def test_a_live_run_of_the_fp16_ladder_reads_bf16_tf32_and_shapes_from_a_recorded_run():
    """A live run (views.load's: benchmark_all.only("ladder"), the fp16 ladder) on a Hopper GPU
    the lab has no run of: the type and shape views read the H100's recorded run and say so; the
    prediction table leaves the variant rows unmeasured rather than judging live fp16 times
    against recorded bf16 ones."""
    import dataclasses
    recorded = load_run("hopper", "H100")
    t = recorded.timings
    live = dataclasses.replace(recorded, timings=t[t["experiment"] == views.EXPERIMENT].copy(), live=True,
                               meta={**recorded.meta, "gpu": "NVIDIA H100 PCIe"}, tables={})
    table = views.precision_table(live)
    assert set(table["precision"]) == {"fp16", "bf16", "tf32"}
    assert recorded.caption in table.attrs["caption"]
    assert len(views.shapes_table(live)) == len(hopper.record.SHAPES) * 3
    p = views.prediction_table(live).set_index("step")
    assert p.loc["07 bf16", "outcome"] == "not measured" and p.loc["07 tf32", "outcome"] == "not measured"


def test_the_shapes_gemm_moves_its_explicit_a_which_the_convolution_never_builds():
    """The 21 GB the prose's memory reading moves is the GEMM's with im2col's A made explicit
    (record.SHAPES, random data); the convolution reads its input, 1/25 of that A."""
    from gpulab.workloads.hopper import record
    name, M, N, K, _ = next(s for s in record.SHAPES if s[0] == "convpool b32")
    assert K % views.CONVPOOL_TAPS == 0 and K // views.CONVPOOL_TAPS == 256      # 256 channels x 5 x 5 taps
    n = views.type_numbers(load_run("hopper", "H100"))
    assert n["convpool_a_gbytes"] == pytest.approx(2 * M * K / 1e9)
    assert n["convpool_gbytes"] == pytest.approx(record.gemm_bytes(M, N, K) / 1e9)
    assert n["convpool_a_gbytes"] / n["convpool_gbytes"] > 0.95
    assert n["convpool_input_gbytes"] == pytest.approx(2 * 32 * 256 * 224 * 224 / 1e9) and n["convpool_input_gbytes"] < 1


@pytest.mark.parametrize("name", ["profile_figure", "swizzle_figure", "ring_figure", "warpgroups_figure"])
def test_the_hopper_figures_read_without_zooming(name):
    """On a book page (the figure shrunk to the output column, plots.COLUMN_PX, which
    tests/test_site.py measures), every label of the profile, swizzle, ring and warpgroup figures
    is at least 10 pixels high, and the caption 9: they were 6."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from gpulab import plots
    figure = getattr(views, name)
    fig = figure(load_run("hopper", "H100")) if name == "profile_figure" else figure()
    texts = plots.shown_text_px(fig)
    plt.close(fig)
    small = [(round(px, 1), text[:40]) for px, text, note in texts if round(px, 1) < (9 if note else 10)]
    assert texts and not small, f"{name}: text too small to read on the page: {small}"


def test_the_crosscheck_ratios_compare_each_precision_and_size_by_three_timers():
    from gpulab import runs
    from gpulab.workloads.hopper import views
    run = runs.load_run("hopper", "H100")
    ratios = views.crosscheck_ratios(run)
    assert len(ratios) == len(run.tables["crosscheck"]) // 2           # a lab row and a vendor row each
    fp16 = ratios[(ratios["precision"] == "fp16") & (ratios["size"] == "4096^3")].iloc[0]
    table = run.tables["crosscheck"]
    here = table[(table["precision"] == "fp16") & (table["size"] == 4096)].set_index("side")
    assert fp16["step / cuBLAS (do_bench)"] == pytest.approx(here.loc["vendor", "do_bench_ms"]
                                                              / here.loc["lab", "do_bench_ms"])
    spread = views.crosscheck_spread(ratios)
    assert 0 < spread == pytest.approx((ratios.filter(like="step / cuBLAS").max(axis=1)
                                        - ratios.filter(like="step / cuBLAS").min(axis=1)).max())
    # A run recorded before the cross-check has none.
    earlier = runs.read_run(paths.REPO / "labdata" / "trials" / views.EARLIER_METHOD / "nvidia-h100-80gb-hbm3" / "hopper.csv")
    assert views.crosscheck_ratios(earlier) is None and views.crosscheck_spread(None) is None
    assert views.standing(1.019) == "level with" and views.standing(1.03) == "past" and views.standing(0.975) == "short of"
