import json

import numpy as np

import pandas as pd
import pytest

from gpulab import RecordedRunError, plots, roofline, runs, timing
from gpulab.timing import TIMING_COLUMNS, Timing

META = {"gpu": "NVIDIA Test GPU", "date": "2026-11-23 00:00 UTC", "driver": "580.1",
        "cuda_runtime": "13.0", "cupy": "14.2.0"}


def rows():
    return [Timing([1.0, 2.0, 3.0]).row("ladder", "step 1", 1024, flops=2048, bytes=12288),
            Timing([0.5, 0.6]).row("ladder", "step 2", 1024, flops=2048, bytes=12288)]


def test_save_and_load_round_trip(tmp_path):
    path = runs.save_run("demo", rows(), META, root=tmp_path)
    assert path == tmp_path / "nvidia-test-gpu" / "demo.csv"
    run = runs.load_run("demo", root=tmp_path)
    assert list(run.timings.columns[:len(TIMING_COLUMNS)]) == TIMING_COLUMNS
    assert run.timings["median_ms"].tolist() == [2.0, 0.55]
    assert "NVIDIA Test GPU" in run.caption and "2026-11-23" in run.caption and "CuPy 14.2.0" in run.caption
    assert run.experiment("ladder").shape[0] == 2


def test_the_caption_names_the_timing_method_and_the_power_limit(tmp_path):
    # A run timed by the queued loop has the 'queued' column; one recorded before it has not, and
    # its caption says that its events held the host's dispatch.
    runs.save_run("demo", rows(), {**META, "conditions": {"power_limit_w": 700.0}}, root=tmp_path)
    caption = runs.load_run("demo", root=tmp_path).caption
    assert caption.endswith("; calls queued (host dispatch excluded), power limit 700 W"), caption
    # The card's form and the vendor libraries' versions, where the run recorded them.
    runs.save_run("full", rows(), {**META, "conditions": {
        "power_limit_w": 700.0, "form_factor": "SXM module (from the name 'X', power limit 700 W)",
        "cublas": "13.1.0", "cudnn": "91900", "torch": "2.11.0+cu130"}}, root=tmp_path)
    caption = runs.load_run("full", root=tmp_path).caption
    assert caption.endswith("; calls queued (host dispatch excluded), SXM module, power limit 700 W; "
                            "cuBLAS 13.1.0, cuDNN 9.19.0, PyTorch 2.11.0+cu130"), caption
    earlier = pd.DataFrame(rows()).drop(columns=["queued"])
    runs.save_run("old", earlier, META, root=tmp_path)
    assert "host waited before each call (dispatch included" in runs.load_run("old", root=tmp_path).caption


def test_side_tables_round_trip(tmp_path):
    resources = pd.DataFrame({"kernel": ["a", "b"], "registers": [32, 64]})
    path = runs.save_run("demo", rows(), META, root=tmp_path, tables={"resources": resources})
    run = runs.load_run("demo", root=tmp_path)
    assert run.tables["resources"]["registers"].tolist() == [32, 64]
    path.with_name("demo.resources.csv").unlink()
    with pytest.raises(RecordedRunError, match="lists the table 'resources'"):
        runs.load_run("demo", root=tmp_path)
    with pytest.raises(ValueError, match="lower-case words"):
        runs.save_run("demo", rows(), META, root=tmp_path, tables={"Bad Name": resources})


def test_text_that_looks_like_numbers_stays_text(tmp_path):
    frame = pd.DataFrame(rows()).assign(step=["01", "11"])
    runs.save_run("demo", frame, META, root=tmp_path, tables={"t": pd.DataFrame({"step": ["01", "02"]})})
    run = runs.load_run("demo", root=tmp_path)
    assert run.timings["step"].tolist() == ["01", "11"]
    assert run.tables["t"]["step"].tolist() == ["01", "02"]
    assert run.timings["median_ms"].dtype.kind == "f"


def test_several_gpus_side_by_side(tmp_path):
    runs.save_run("demo", rows(), META, root=tmp_path)
    newer = dict(META, gpu="NVIDIA Other GPU", date="2026-12-01 00:00 UTC")
    runs.save_run("demo", rows(), newer, root=tmp_path)
    assert set(runs.available_runs(tmp_path)["gpu"]) == {"NVIDIA Test GPU", "NVIDIA Other GPU"}
    assert runs.load_run("demo", root=tmp_path).gpu == "NVIDIA Other GPU"  # most recent
    assert runs.load_run("demo", gpu="NVIDIA Test GPU", root=tmp_path).gpu == "NVIDIA Test GPU"
    both = runs.compare_runs("demo", root=tmp_path)
    assert both.groupby("gpu").size().to_dict() == {"NVIDIA Other GPU": 2, "NVIDIA Test GPU": 2}


def test_the_book_gpus_run_is_read_unless_another_is_named(tmp_path):
    runs.save_run("demo", rows(), dict(META, gpu="NVIDIA H100 80GB HBM3"), root=tmp_path)
    runs.save_run("demo", rows(), dict(META, gpu="NVIDIA H200", date="2026-12-01 00:00 UTC"), root=tmp_path)
    assert runs.load_run("demo", root=tmp_path).gpu == "NVIDIA H100 80GB HBM3"   # older, but the book's
    assert runs.load_run("demo", gpu="H200", root=tmp_path).gpu == "NVIDIA H200"


def test_missing_run_says_how_to_record(tmp_path):
    with pytest.raises(RecordedRunError, match="python -m gpulab record nothing"):
        runs.load_run("nothing", root=tmp_path)


def test_missing_experiment_lists_present_ones(tmp_path):
    runs.save_run("demo", rows(), META, root=tmp_path)
    with pytest.raises(RecordedRunError, match="no 'transfers' rows; it has: ladder"):
        runs.load_run("demo", root=tmp_path).experiment("transfers")


def test_malformed_files_are_rejected(tmp_path):
    path = runs.save_run("demo", rows(), META, root=tmp_path)
    frame = pd.read_csv(path).drop(columns=["median_ms"])
    frame.to_csv(path, index=False)
    with pytest.raises(RecordedRunError, match="lacks the columns"):
        runs.read_run(path)
    runs.save_run("demo", rows(), META, root=tmp_path)
    meta_path = path.with_name("demo.meta.json")
    meta_path.write_text(json.dumps({"gpu": "x"}))
    with pytest.raises(RecordedRunError, match="lacks"):
        runs.read_run(path)
    meta_path.write_text("{not json")
    with pytest.raises(RecordedRunError, match="not valid JSON"):
        runs.read_run(path)
    meta_path.unlink()
    with pytest.raises(RecordedRunError, match="is missing"):
        runs.read_run(path)


def test_a_run_without_a_gpu_is_refused(tmp_path):
    with pytest.raises(RecordedRunError, match="not measured on a GPU"):
        runs.save_run("demo", rows(), dict(META, gpu="none (no CuPy)"), root=tmp_path)


def test_non_numeric_times_are_refused(tmp_path):
    frame = pd.DataFrame(rows())
    frame["median_ms"] = ["fast", "slow"]
    with pytest.raises(RecordedRunError, match="must be numeric"):
        runs.save_run("demo", frame, META, root=tmp_path)


def test_committed_runs_are_valid():
    table = runs.available_runs()
    assert not table.empty, "labdata/runs/ should hold at least one recorded run"
    for entry in table.itertuples():
        run = runs.load_run(entry.chapter, gpu=entry.gpu)
        assert run.timings["repeats"].min() >= 1


def test_timing_summary_statistics():
    t = Timing([4.0, 1.0, 3.0, 2.0, 100.0])
    s = t.summary()
    assert (s["median_ms"], s["min_ms"], s["max_ms"], s["repeats"]) == (3.0, 1.0, 100.0, 5)
    assert s["q1_ms"] == 2.0 and s["q3_ms"] == 4.0
    with pytest.raises(ValueError):
        Timing([])


def test_rates_and_floors():
    frame = roofline.rates(pd.DataFrame(rows()))
    assert frame["gflops"].iloc[0] == pytest.approx(2048 / 2e-3 / 1e9)
    assert frame["gbs"].iloc[1] == pytest.approx(12288 / 0.55e-3 / 1e9)
    assert frame["intensity"].iloc[0] == pytest.approx(2048 / 12288)
    floors = roofline.floors_ms(flops=1e12, bytes_moved=1e9, peak_gflops=50e3, peak_gbs=3000)
    assert floors["bound"] == "compute" and floors["floor_ms"] == pytest.approx(20.0)
    assert roofline.datasheet("NVIDIA H100 80GB HBM3")["memory_gbs"] == 3350
    assert roofline.datasheet("Some Unknown GPU") is None


def test_every_plot_draws_with_its_caption():
    frame = pd.DataFrame(rows())
    caption = "NVIDIA Test GPU, recorded 2026-11-23"
    figures = [
        plots.speedup_ladder(frame, title="q?", caption=caption, vendor=frame.iloc[:1]),
        plots.scaling(frame, title="q?", caption=caption),
        plots.heatmap(frame.assign(block=[64, 128]), x="block", y="variant", title="q?", caption=caption),
        plots.roofline(roofline.rates(frame), peak_gflops=5e4, peak_gbs=3e3, title="q?", caption=caption),
        plots.profile_bars(pd.DataFrame({"variant": ["a", "b"], "conflicts": [0, 5000], "occ": [50, 75]}),
                           ["conflicts", "occ"], log=["conflicts"], title="q?", caption=caption),
        plots.time_breakdown(pd.DataFrame([dict(r, phase=p) for r in rows() for p in ("h2d", "kernel", "d2h")]),
                             title="q?", caption=caption),
    ]
    for fig in figures:
        texts = [t.get_text() for t in fig.texts]
        assert caption in texts
        assert fig._suptitle.get_text() == "q?"
    # Drawn into panels of one figure, each plot titles its own panel.
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2)
    plots.scaling(frame, title="left?", ax=axes[0])
    plots.scaling(frame, title="right?", caption=caption, ax=axes[1])
    assert [a.get_title(loc="left") for a in axes] == ["left?", "right?"] and fig._suptitle is None


def test_gpu_ratio_table_predicts_from_the_roofline_and_summarises():
    from gpulab.datasheet import lookup
    from gpulab.runs import gpu_comparison_summary, gpu_ratio_table
    h100, h200 = lookup("NVIDIA H100 80GB HBM3"), lookup("NVIDIA H200")
    # A copy-like step at 80% of the H100's bandwidth, an SGEMM-like one at 70% of its FP32
    # peak, and a tiny one far below both roofs.
    a = pd.DataFrame([
        {"variant": "stream", "median_ms": 1.0, "bytes": 0.8 * h100.memory_gbs * 1e6, "flops": 1e6, "precision": "fp32"},
        {"variant": "gemm", "median_ms": 1.0, "bytes": 1e6, "flops": 0.7 * h100.fp32_tflops * 1e9, "precision": "fp32"},
        {"variant": "tiny", "median_ms": 0.01, "bytes": 1e3, "flops": 1e3, "precision": "fp32"},
    ])
    b = a.assign(median_ms=[0.75, 1.02, 0.01])
    table = gpu_ratio_table(a, b, "NVIDIA H100 80GB HBM3", "NVIDIA H200").set_index("variant")
    assert table.loc["stream", "bound"] == "memory"
    assert table.loc["stream", "predicted"] == pytest.approx(h100.memory_gbs / h200.memory_gbs)
    assert table.loc["gemm", "bound"] == "compute" and table.loc["gemm", "predicted"] == pytest.approx(1.0)
    assert table.loc["tiny", "bound"] == "latency"
    assert table.loc["stream", "ratio"] == pytest.approx(0.75)
    summary = gpu_comparison_summary(table.reset_index())
    assert summary["n_memory"] == 1 and summary["n_other"] == 2
    assert summary["furthest_variant"] == "stream" and summary["furthest_ratio"] == pytest.approx(0.75)
    assert summary["other_ratio_min"] == pytest.approx(1.0) and summary["other_ratio_max"] == pytest.approx(1.02)
    none_memory = gpu_comparison_summary(table.reset_index().iloc[1:])
    assert none_memory["n_memory"] == 0 and np.isnan(none_memory["memory_ratio_min"])
    assert none_memory["furthest_variant"] == ""


def test_the_gpu_comparison_table_names_both_recorded_runs():
    from gpulab.workloads import fcnet
    comparison = fcnet.gpu_comparison()
    assert comparison is not None, "fcnet has recorded runs on the H100 and the H200"
    caption = comparison[0].attrs["caption"]
    assert "H100" in caption and "H200" in caption and caption.startswith("recorded")
    assert caption.count("recorded 20") == 2      # each run's date


def test_every_recorded_run_matches_the_kernel_sources_it_names():
    # A run that records its sources' sha256 (kernel_sources_sha256 in its meta) must have been
    # recorded from the files on disk: editing a kernel, or a header it includes, means recording
    # again. An edit to a file's comments alone leaves its code digest (kernel_code_sha256:
    # runs.code_digest, comments out, white space collapsed) as recorded, and the run stands.
    import hashlib
    from gpulab.paths import REPO
    from gpulab.runs import code_digest
    checked = 0
    for meta_file in sorted((REPO / "labdata" / "runs").glob("*/*.meta.json")):
        meta = json.loads(meta_file.read_text())
        recorded, code = meta.get("kernel_sources_sha256", {}), meta.get("kernel_code_sha256", {})
        missing = [f for f in recorded if not (REPO / f).is_file()]
        assert not missing, f"{meta_file.relative_to(REPO)} names files that are gone: {missing}"
        edited = [f for f, digest in recorded.items() if hashlib.sha256((REPO / f).read_bytes()).hexdigest() != digest]
        stale = [f for f in edited if code.get(f) != code_digest((REPO / f).read_text())]
        if stale and "kernel_ptx_sha256" in meta:
            # A code edit (code moved into a header, a kernel added beside the steps) that leaves
            # every build of the run's kernel files making the PTX it made when it was stamped
            # (tools/ptx_compare.py stamp) leaves the run describing the code.
            changed = _ptx_compare().unchanged_builds(meta)
            assert not changed, (f"{meta_file.relative_to(REPO)} was recorded from other code: {stale} changed and "
                                 f"so did the PTX of {changed}: record it again")
            stale = []
        assert not stale, f"{meta_file.relative_to(REPO)} was recorded from other code in {stale}: record it again"
        checked += len(recorded)
    assert checked > 0, "no recorded run names its kernel sources"


def _ptx_compare():
    import importlib.util
    from gpulab.paths import REPO
    spec = importlib.util.spec_from_file_location("ptx_compare", REPO / "tools" / "ptx_compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_ptx_stamp_lets_a_run_stand_through_a_refactor_and_not_through_a_code_change(tmp_path):
    """The stamp of a kernel file's builds: a change that moves code into a header keeps its PTX,
    one that changes what the kernel does changes it (tools/ptx_compare.py stamp, unchanged_builds)."""
    ptx_compare = _ptx_compare()
    from gpulab.cpu import resources
    if resources._library()[0] is None:
        pytest.skip("NVRTC (the nvidia-cuda-nvrtc wheel) is not installed here")
    kernel = ("extern \"C\" __global__ void scale(int n, float a, const float *x, float *y)\n"
              "{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = a * x[i];\n}\n")
    folder = tmp_path / "kernels" / "demo"
    folder.mkdir(parents=True)
    (folder / "01_scale.cu").write_text(kernel)
    meta = {"kernel_ptx_sha256": {"nvrtc": ptx_compare.nvrtc_release(),
                                  "builds": {"kernels/demo/01_scale.cu": ptx_compare.build_digests(
                                      folder / "01_scale.cu", tmp_path)}}}
    # The body moved into a header the step includes: the same PTX.
    (folder / "scale.cuh").write_text("__device__ inline float scaled(float a, float v) { return a * v; }\n")
    (folder / "01_scale.cu").write_text('#include "scale.cuh"\n' + kernel.replace("a * x[i]", "scaled(a, x[i])"))
    assert ptx_compare.unchanged_builds(meta, tmp_path) == []
    # What the kernel computes changed: another PTX.
    (folder / "01_scale.cu").write_text(kernel.replace("a * x[i]", "a * x[i] + 1.0f"))
    assert ptx_compare.unchanged_builds(meta, tmp_path) == ["kernels/demo/01_scale.cu [compute_90]"]
    meta["kernel_ptx_sha256"]["nvrtc"] = "0.0"
    with pytest.raises(LookupError, match="stamped with NVRTC 0.0"):
        ptx_compare.unchanged_builds(meta, tmp_path)


def test_a_comment_edit_keeps_the_code_digest_and_a_code_edit_changes_it():
    from gpulab.runs import code_digest
    source = 'int x = 1; // one\n/* two\n lines */ const char *s = "a // b";\n'
    assert code_digest(source) == code_digest('int x = 1;   // changed\nconst char *s = "a // b";')
    assert code_digest(source) != code_digest('int x = 2; const char *s = "a // b";')
    assert code_digest(source) != code_digest('int x = 1; const char *s = "a / b";')


def test_every_queued_run_was_cross_checked_and_agrees_with_do_bench_within_3_percent():
    # A run recorded by the queued loop (its meta has 'conditions') cross-checked the rows its
    # verdicts rest on (issue 37): in its <chapter>.crosscheck.csv the lab's cold median and
    # Triton's do_bench agree within 3% on every row (or within 0.7 us, one of the two levels every
    # timer reads a call of a few microseconds at: timing.crosscheck_agrees), the lab's kernels and the vendor paths alike.
    # (multigpu's record, run by its own worker processes on two GPUs, declares no cross-check.)
    from gpulab.paths import REPO
    for meta_file in sorted((REPO / "labdata" / "runs").glob("*/*.meta.json")):
        meta = json.loads(meta_file.read_text())
        chapter = meta_file.name.split(".")[0]
        if "conditions" not in meta or chapter == "multigpu":
            continue
        table = meta_file.with_name(f"{chapter}.crosscheck.csv")
        assert table.is_file(), f"{meta_file.relative_to(REPO)} was recorded queued but has no {table.name}"
        checked = pd.read_csv(table)
        assert len(checked) and checked["do_bench_ms"].notna().all(), checked
        off = timing.crosscheck_disagreements(checked)
        assert off.empty, f"{table.relative_to(REPO)}: do_bench and the lab's median differ by more than 3%:\n" \
                          f"{off[['variant', 'size', 'precision', 'median_ms', 'do_bench_ms', 'profiler_ms']]}"


def test_a_chapter_object_finds_its_run_where_strings_are_arrow_backed(monkeypatch):
    # pandas 3 with pyarrow (the GPU image, Colab) compares Arrow strings only with strings: a
    # Chapter object (equal to its name) raised NotImplementedError in load_run on the device.
    pytest.importorskip("pyarrow")
    from gpulab.workloads import fcnet
    found = runs.available_runs()
    arrow = found.astype({"chapter": "string[pyarrow]", "gpu": "string[pyarrow]"})
    monkeypatch.setattr(runs, "available_runs", lambda root=None: arrow)
    assert runs.load_run(fcnet.CHAPTER).chapter == "fcnet"
    assert not runs.compare_runs(fcnet.CHAPTER).empty
