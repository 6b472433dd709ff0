"""The training chapter: its data, its float64 reference, every ladder step
through the same checks the book runs, and the sweep's broken-run detector."""
import re

import numpy as np
import pandas as pd
import pytest

from dataclasses import replace

from gpulab.workloads import training
from gpulab.workloads.training import checks, data, problem, reference
from gpulab.workloads.training.launchers import buffers
from gpulab.workloads.training.problem import CHECK_DIMS, Dims

CHAPTER = training.CHAPTER


# ----------------------------------------------------------------- the data
def test_the_corpus_is_what_the_chapter_says():
    c = data.sample(2000, stream=7)
    assert c.vocab == 32_754 and c.docs == 2000
    assert set(np.unique(c.labels)) == set(range(data.TOPICS))
    assert (np.diff(c.indptr) > 0).all() and c.indptr[-1] == c.nnz
    density = c.nnz / (c.docs * c.vocab)
    assert 0.002 < density < 0.005                       # about 0.35% non-zeros
    assert 100 < np.median(c.lengths) < 140              # median 120 words
    row = c.indices[c.indptr[5]:c.indptr[6]]
    assert (np.diff(row) > 0).all()                      # ascending, no repeats within a document
    assert np.allclose(np.linalg.norm(c.dense()[:50], axis=1), data.INPUT_NORM, rtol=1e-5)
    topics = data.topic_distributions()
    assert np.allclose(topics.sum(axis=1), 1) and (topics > 0).all()
    shared = topics[:, :data.SHARED_WORDS] / topics[:, :1]           # the function words: Zipf in every topic
    assert np.allclose(shared, data.zipf()[:data.SHARED_WORDS] / data.zipf()[0])
    assert (np.diff(data.zipf()) < 0).all()


def test_the_corpus_is_deterministic_and_streams_differ():
    a, b = data.sample(300, stream=1), data.sample(300, stream=1)
    assert np.array_equal(a.indices, b.indices) and np.array_equal(a.labels, b.labels)
    c = data.sample(300, stream=2)
    assert not np.array_equal(a.labels, c.labels)
    with pytest.raises(ValueError, match="positive number of documents"):
        data.sample(0)
    with pytest.raises(ValueError, match="rows must satisfy"):
        a.rows(10, 5)


def test_the_bayes_accuracy_is_the_bayes_classifiers_hit_rate():
    # E[max_k P(k | doc)] must equal the rate at which the Bayes classifier is
    # right, within the sampling error of each (a small vocabulary keeps it fast).
    acc, err = data.bayes_accuracy(vocab=3000, docs=20_000)
    fresh = data.sample(20_000, vocab=3000, stream=55)
    hits = (data.bayes_predict(fresh) == fresh.labels).mean()
    assert abs(hits - acc) < 4 * np.sqrt(acc * (1 - acc) / 20_000) + 4 * err
    assert 0.25 < acc < 1


def test_the_posterior_is_the_generating_models():
    c = data.sample(40, vocab=500, stream=3)
    logp = np.log(data.topic_distributions(500))
    direct = np.zeros((c.docs, data.TOPICS))
    for d in range(c.docs):
        words, counts = c.indices[c.indptr[d]:c.indptr[d + 1]], c.counts[c.indptr[d]:c.indptr[d + 1]]
        direct[d] = (counts[:, None] * logp[:, words].T).sum(axis=0)
    direct = np.exp(direct - direct.max(axis=1, keepdims=True))
    direct /= direct.sum(axis=1, keepdims=True)
    assert np.allclose(np.exp(data.log_posterior(c)), direct)


# ----------------------------------------------------------------- the reference
def test_gradients_match_finite_differences():
    c = data.sample(23, vocab=300, stream=9)
    rng = np.random.default_rng(4)
    params = {k: v.astype(np.float64) + 0.2 * rng.standard_normal(v.shape)
              for k, v in reference.init_params(vocab=300, hidden=9).items()}
    acts = reference.forward(c, params)
    grads = reference.backward(c, c.labels, params, acts)
    eps = 1e-6
    for k in reference.PARAMS:
        for _ in range(3):
            idx = tuple(rng.integers(0, n) for n in params[k].shape)
            if k == "W1":      # a word the batch contains, so the gradient is not trivially 0
                idx = (int(c.indices[rng.integers(0, c.nnz)]), idx[1])
            plus = {q: v.copy() for q, v in params.items()}
            minus = {q: v.copy() for q, v in params.items()}
            plus[k][idx] += eps
            minus[k][idx] -= eps
            numeric = (reference.loss(reference.forward(c, plus)["P"], c.labels)
                       - reference.loss(reference.forward(c, minus)["P"], c.labels)) / (2 * eps)
            assert grads["d" + k][idx] == pytest.approx(numeric, rel=1e-5, abs=1e-9), (k, idx)


def test_the_sparse_and_dense_reference_agree():
    c = data.sample(31, vocab=700, stream=4)
    params = reference.init_params(vocab=700)
    sparse = reference.sgd_step(c, c.labels, params)
    dense = reference.sgd_step(c.dense(np.float64), c.labels, params)
    assert sparse[1] == pytest.approx(dense[1], rel=1e-12)
    for k in reference.PARAMS:
        assert np.allclose(sparse[0][k], dense[0][k], rtol=1e-12, atol=1e-15)


# ----------------------------------------------------------------- the ladder
@pytest.mark.parametrize("step", CHAPTER.steps, ids=lambda s: s.number)
def test_every_step_matches_the_reference(backend, step):
    result = CHAPTER.check(backend, steps=[step])
    assert (result["status"] == "ok").all(), result.to_string()
    assert (result["unwritten"] == 0).all()
    assert {"update of W1", "update of b1", "update of W2", "update of b2", "loss", "dz1"} <= set(result["quantity"])
    assert set(result["B"]) == {d.B for d in CHECK_DIMS}


def test_the_last_steps_loss_curve_matches_the_reference():
    # Every step's curve is checked by the notebook's check_curves cell (6 SGD steps at the same
    # dimensions; it stops on a failed check), which the suite executes: here only the last step,
    # so that the quick loop (-m "not slow", without the notebooks) still runs the curve check.
    result = checks.check_curves("cpu", steps=CHAPTER.steps[-1:], n=4)
    assert (result["status"] == "ok").all(), result.to_string()
    assert np.isfinite(result["loss after 4 steps"]).all()


def test_the_reports_bounds_test_is_caught():
    # The report's unrolled kernels skipped partial groups of four: with it,
    # W2 (4 columns) is never updated -- no error, just a wrong step.
    step = CHAPTER.step(4)
    ours = CHAPTER.check("cpu", steps=[step], dims=(Dims(37, 1001),))
    report = CHAPTER.check("cpu", steps=[replace(step, options=("-DREPORT_GUARD",))], dims=(Dims(37, 1001),))
    assert (ours["status"] == "ok").all()
    failed = set(report.loc[report["status"] == "FAILED", "quantity"])
    assert "update of W2" in failed and "update of b2" in failed


@pytest.mark.slow
def test_the_sweep_marks_a_diverging_configuration_as_broken():
    step = CHAPTER.step(6)
    d = Dims(B=40, V=1001)
    ref = checks.loss_curve(step, "cpu", d, steps=3)
    same = checks.loss_curve(step, "cpu", d, steps=3, block=(32, 8))
    report = checks.loss_curve(step, "cpu", d, steps=3, block=(64, 4), options=("-DREPORT_GUARD",))
    assert not checks.is_broken(same, ref)
    assert checks.is_broken(report, ref)
    assert checks.is_broken([1.0, np.nan, 1.0], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="different lengths"):
        checks.curve_deviation([1.0], [1.0, 2.0])


def test_streams_respect_every_dependency():
    for step in CHAPTER.steps:
        ops = step.ops(Dims(1024, data.VOCAB))
        names = [op.name for op in ops]
        assert len(set(names)) == len(names)
        for i, op in enumerate(ops):
            assert all(names.index(a) < i for a in op.after), (step.number, op.name)
    streamed = CHAPTER.step(3).ops(Dims(1024, data.VOCAB))
    assert {op.stream for op in streamed} == {0, 1, 2}
    assert {op.stream for op in CHAPTER.step(2).ops(Dims(1024, data.VOCAB))} == {0}


def test_bad_dimensions_are_refused_clearly():
    with pytest.raises(ValueError, match="positive size"):
        Dims(0, 10)
    with pytest.raises(ValueError, match="at most 8 classes"):
        Dims(4, 10, C=9)
    c = data.sample(5, vocab=1001)
    with pytest.raises(ValueError, match="dimensions say B = 6"):
        buffers(__import__("gpulab").get_backend("cpu"), CHAPTER.step(9), Dims(6, 1001), c,
                reference.init_params(1001))


# ----------------------------------------------------------------- reading a run
def _run_of_the_recorded_schema(seed=0):
    """A run with every experiment and table ``record.benchmark_all`` writes, in its
    columns, with random times: the notebook's views must read any such run."""
    from gpulab.runs import RecordedRun
    from gpulab.workloads.training import record
    rng = np.random.default_rng(seed)
    rows = []

    def row(experiment, variant, size, **extra):
        m = float(rng.uniform(0.01, 5))
        return {"experiment": experiment, "variant": variant, "size": size, "phase": "kernel", "median_ms": m,
                "q1_ms": m * 0.98, "q3_ms": m * 1.02, "min_ms": m * 0.9, "max_ms": m * 1.2, "repeats": 50,
                "flops": 1.7e10, "bytes": 3.0e8, **extra}
    for s in CHAPTER.steps:
        for b in record.BATCHES:
            labels = {"step": s.ordinal, "batch": b, "precision": s.precision, "input": s.input, "kernels": 2}
            if not s.graph:
                rows.append(row("ladder", s.label, b, mode="eager", **labels))
            rows.append(row("ladder", s.label, b, mode="graph", **labels))
        for i, op in enumerate(s.ops(Dims(1024, data.VOCAB))):
            rows.append(row("breakdown", s.label, 1024, step=s.ordinal, op=op.name, kernel=op.kernel, order=i,
                            stream=op.stream))
    for name in ("PyTorch eager fp32, dense X", "PyTorch eager fp32, sparse first layer (embedding_bag)"):
        for mode, suffix in (("eager", ""), ("graph", ", CUDA graph")):
            rows.append(row("vendor", name + suffix, 1024, library="PyTorch", precision="fp32", layout="X@W",
                            mode=mode, rel_error=1e-7, vendor_note="", batch=1024, input="dense"))
    rows.append(row("ceilings", "device copy", 2**30, bytes=2.0 * 2**30, flops=0.0))
    rows.append(row("ceilings", "cuBLAS SGEMM", 8192, flops=2.0 * 8192**3, bytes=0.0))
    timeline = pd.DataFrame([{"lane": f"stream {k % 3 if n == 3 else 0}", "kind": "kernel", "label": f"op {k}",
                              "start_ms": k * 0.1, "end_ms": k * 0.1 + 0.05, "step": n, "variant": f"{n:02d}"}
                             for n in (2, 3) for k in range(6)])
    sweep = pd.DataFrame([{"batch": b, "block": blk, "threads": 256, "guard": g, "steps": 8192 // b, "step_ms": 1.0,
                           "final_loss": 1.0, "test_accuracy": rng.uniform(0.2, 0.9), "loss_deviation": 0.0,
                           "broken": bool(g == "report's" and blk == "64 x 4")}
                          for g in ("ours", "report's") for b in (32, 1024) for blk in ("16 x 16", "64 x 4")])
    curves = pd.DataFrame([{"variant": v, "epoch": e, "batch_index": i, "loss": 1.0 / e, "test_accuracy": 0.8 + e / 100,
                            "epoch_ms": 10.0}
                           for v in [CHAPTER.step(n).label for n in (7, 8, 9, 10)] + ["PyTorch eager fp32, dense X"]
                           for e in (1, 2) for i in range(3)])
    tables = {"timeline": timeline, "sweep": sweep, "curves": curves,
              "bayes": pd.DataFrame([{"bayes_accuracy": 0.92, "standard_error": 0.001, "bayes_on_test_set": 0.925}]),
              "checks": pd.DataFrame([{"step": s.ordinal, "variant": s.label, "passed": True} for s in CHAPTER.steps]),
              "profile": pd.DataFrame([{"step": 7, "op": "W1 -= lr X^T dZ1", "id": 0, "kernel": "w1_gradient_step",
                                        "duration_ns": 2e5, "fma_pipe_instructions": 1.3e8,
                                        "achieved_occupancy_pct": 20.0, "registers_per_thread": 121}])}
    meta = {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-11-23 12:00 UTC", "driver": "x", "cuda_runtime": "x",
            "cupy": "x"}
    return RecordedRun("training", pd.DataFrame(rows), meta, tables=tables)


def test_the_notebook_views_read_a_run_of_the_recorded_schema():
    import matplotlib
    matplotlib.use("Agg")
    from gpulab.workloads.training import views
    run = _run_of_the_recorded_schema()
    table = views.ladder(run)
    assert list(table["step"]) == [s.ordinal for s in CHAPTER.steps]
    assert table["vs step 1"].iloc[0] == pytest.approx(1.0)
    targets = views.targets(run)
    assert len(targets) == len(views.TARGETS) + 1 and targets["met"].dtype == bool
    assert set(views.numbers(run).values()) - {"-"}
    assert views.numbers(None)["t01"] == "-"
    for fig in (views.ladder_figure(run), views.scaling_figure(run), views.breakdown_figure(run),
                views.timeline_figure(run), views.sweep_figure(run), views.curves_figure(run),
                views.roofline_figure(run)):
        assert fig.axes
    for n in (1, 10):
        assert len(views.step_times(run, n).data) == len(set(run.experiment("ladder")["size"]))
    # Before step 10 a step's table is its eager time only; step 10's, its captured time only.
    assert [c for c in views.step_times(run, 1).data.columns if "step," in c] == ["step, eager (ms)"]
    assert [c for c in views.step_times(run, 10).data.columns if "step," in c] == ["step, CUDA graph (ms)"]
    assert views.graph_gain_figure(run).axes and views.graph_gain_numbers(None)["graph_first_us"] == "-"
    for n in (1, 10):
        assert len(views.breakdown(run, n).data) == len(CHAPTER.step(n).ops(Dims(1024, data.VOCAB)))
    assert views.accuracy_table(run)["of Bayes-optimal"].between(0.8, 1.0).all()
    assert list(views.overlap(run)["step"]) == [2, 3]
    shown = views.overlap_styled(run).to_html()                     # no index column, 3 decimals
    assert "row_heading" not in shown and not re.search(r">\d+\.\d{4,}<", shown)
    assert views.show(views.ladder, None) is None
    partial = _run_of_the_recorded_schema()
    del partial.tables["sweep"]
    partial.tables["problems"] = pd.DataFrame([{"experiment": "sweep", "error": "skipped: time budget"}])
    assert views.show(views.sweep_figure, partial) is None          # says what is missing, and why
    assert views.numbers(partial)["broken_ours"] == "-"
    assert views.profile(run)["FMA pipe as FFMA (TFLOP/s)"].iloc[0] == pytest.approx(1.3e8 * 64 / 2e5 / 1e3)


def test_the_overfitting_view_reads_the_peak_and_both_curve_schemas():
    import matplotlib
    matplotlib.use("Agg")
    from gpulab.workloads.training import views
    run = _run_of_the_recorded_schema()
    acc = {1: 0.80, 2: 0.87, 3: 0.86}                   # peaks at epoch 2, then falls: over-fitting
    run.tables["curves"] = pd.DataFrame([{"variant": "PyTorch eager fp32, dense X", "epoch": e, "batch_index": i,
                                          "loss": 1.0 / e ** 2, "test_accuracy": a, "epoch_ms": 1.0}
                                         for e, a in acc.items() for i in range(4)])
    n = views.overfitting_numbers(run, bayes_loss=0.2)
    assert (n["of_peak_epoch"], n["of_peak_acc"], n["of_final_acc"], n["of_drop"]) == (2, "87.0%", "86.0%", "1.0")
    assert n["of_cross_epoch"] == 3 and n["of_final_loss"] == "0.111"
    assert list(views.overfitting(run).columns) == ["epoch", "training loss (mean over the epoch)", "test accuracy"]
    assert views.overfitting_figure(run, 0.2).axes
    c = run.tables["curves"]                             # runs recorded since: train and test, accuracy and loss
    run.tables["curves"] = c.assign(train_accuracy=0.99, train_eval_loss=0.05, test_loss=0.4)
    assert {"training accuracy (8,192 documents)", "test loss"} <= set(views.overfitting(run).columns)
    assert views.overfitting_figure(run, 0.2).axes
    assert set(views.overfitting_numbers(None).values()) == {"-"}


def test_the_profiler_numbers_come_from_the_profile_table():
    from gpulab.workloads.training import views
    run = _run_of_the_recorded_schema()
    rows = [(6, "Z1 = X W1", "matmul_tiled_ro", 3e5), (6, "dW1 = X^T dZ1", "matmul_tiled_ro", 1e5),
            (6, "X^T", "transpose_tiled_ro", 1e5), (9, "gather", "sparse_forward_backward", 4e4),
            (9, "scatter", "sparse_update", 2e4)]
    run.tables["profile"] = pd.DataFrame([{"step": s, "op": op, "id": i, "kernel": k, "duration_ns": d,
                                           "fma_pipe_instructions": 1e7, "achieved_occupancy_pct": 30.0 + i,
                                           "registers_per_thread": 32, "dram_bytes_read": 1e7,
                                           "shared_load_bank_conflicts": 5.0}
                                          for i, (s, op, k, d) in enumerate(rows)])
    table = views.profile(run)
    assert table.groupby("step")["share of step"].sum().tolist() == pytest.approx([1.0, 1.0])
    assert table["DRAM (GB/s)"].iloc[0] == pytest.approx(1e7 / 3e5)
    n = views.profile_numbers(run)
    assert n["pr_s6_share"] == "80%" and n["pr_s9_us"] == "60" and n["pr_s9_occ"] == "33-34%"
    assert n["pr_s7_share"] == "-" and n["pr_stalls"] == "not recorded" and n["pr_mem_gbs"] == "3,350"
    assert set(views.profile_numbers(None).values()) == {"-"}


def test_the_recorded_run_has_every_step_batch_and_baseline():
    import gpulab
    from gpulab.errors import RecordedRunError
    from gpulab.workloads.training import record
    try:
        run = gpulab.load_run(training.CHAPTER)
    except RecordedRunError:
        pytest.skip("no recorded run of the training chapter yet (python -m gpulab record training on a GPU)")
    assert "H100" in run.gpu
    assert run.tables["checks"]["passed"].all(), run.tables["checks"].to_string()
    ladder = run.experiment("ladder")
    for s in CHAPTER.steps:
        assert set(ladder.loc[ladder["variant"] == s.label, "size"]) == set(record.BATCHES), s.label
    vendor = run.experiment("vendor")
    assert {"PyTorch eager fp32, dense X", "PyTorch eager fp32, dense X, CUDA graph"} <= set(vendor["variant"])
    assert vendor["variant"].str.contains("embedding_bag").any()
    assert (vendor["rel_error"] <= 1e-5).all()
    assert not run.experiment("breakdown").empty and not run.experiment("ceilings").empty
    for table in ("timeline", "sweep", "curves", "bayes"):
        assert table in run.tables, f"the run lacks its {table} table"
    assert run.tables["sweep"]["broken"].dtype == bool
    assert not run.tables["sweep"].query("guard == 'ours'")["broken"].any()
    assert 0.25 < run.tables["bayes"]["bayes_accuracy"].iloc[0] < 1


# ----------------------------------------------------------------- PyTorch's paths (declared here, run on the GPU)
def test_x_transposed_as_csr_is_the_transpose():
    from gpulab.workloads.training import baselines
    c = data.sample(37, vocab=501, stream=12)
    indptr, indices, values = baselines.transpose_csr(c.indptr, c.indices, c.values, c.vocab)
    dense_t = np.zeros((c.vocab, c.docs), np.float32)
    rows = np.repeat(np.arange(c.vocab), np.diff(indptr))
    dense_t[rows, indices] = values
    assert np.array_equal(dense_t, c.dense().T)
    for w in range(c.vocab):           # documents ascending within each word: a valid CSR matrix
        assert (np.diff(indices[indptr[w]:indptr[w + 1]]) > 0).all()


def test_the_pytorch_paths_are_labelled_precisely_and_skip_with_a_reason():
    import importlib.util
    from gpulab import baselines as vendor
    from gpulab.workloads.training import baselines
    c = data.sample(16, vocab=1001, stream=4)
    params = reference.init_params(1001)
    compile_times = {}
    eager = baselines.torch_paths(params, c, None)
    compiled = baselines.compiled_paths(params, c, None, compile_times=compile_times)
    graphs = vendor.graph_paths(eager)
    labels = [p.label for p in eager + graphs + compiled]
    assert len(labels) == len(set(labels))
    # the autograd CSR path is not offered for capture (PyTorch refuses it); the prebuilt-X^T one is
    assert [p.label for p in graphs if "sparse.mm" in p.label] == [
        "PyTorch eager fp32, sparse first layer (torch.sparse.mm, CSR; X^T prebuilt as CSR), CUDA graph"]
    assert {p.label.split("mode=")[1].split(")")[0] for p in compiled} == set(baselines.COMPILE_MODES)
    assert all("triton" in p.requires and p.capture == "none" and p.precision == "fp32" for p in compiled)
    assert [p.graph for p in compiled if "reduce-overhead" in p.label] == [True, True]
    assert not any("max-autotune" in p.label and "embedding_bag" in p.label for p in compiled)
    if importlib.util.find_spec("torch") is None:       # here: every path skipped, with why, nothing run
        result = vendor.measure(eager + compiled, reference=np.zeros(1), experiment="vendor", size=16,
                                log=lambda *a, **k: None)
        assert result.rows == [] and len(result.skipped) == len(eager + compiled)
        assert all(s["reason"].startswith("unavailable: ") and " is not available" in s["reason"]
                   for s in result.skipped)
        assert compile_times == {}
    assert "sparse tensors" in baselines.NOT_COMPILED[0]["reason"]


# ----------------------------------------------------------------- fitting smaller GPUs (#17)
@pytest.fixture(scope="module")
def kernel_figures():
    from gpulab.cpu import resources
    from gpulab.workloads.training import fit
    if resources.unavailable():
        pytest.skip(f"NVRTC is not installed here: {resources.unavailable()}")
    return fit.kernel_resources(backend="cpu")


@pytest.mark.parametrize("profile, keeps_all", [("T4", False), ("L4", True)])
def test_the_plan_fits_a_t4_and_an_l4(kernel_figures, profile, keeps_all):
    from gpulab import device
    from gpulab.workloads.training import fit
    from gpulab.workloads.training.record import BATCHES
    train = data.corpus()[0]
    assert kernel_figures["static_shared_bytes"].notna().all()
    assert (kernel_figures["static_shared_bytes"] <= fit.STATIC_SHARED_LIMIT).all()
    with device.simulate(profile) as limits:
        p = fit.plan(train=train, resources=kernel_figures)
    assert p.device == limits.name and p.budget_bytes == limits.total_memory * fit.MEMORY_FRACTION
    assert p.skipped().empty                                  # every step and batch size runs on both
    assert (p.dense_docs == train.docs) == keeps_all
    assert p.dense_docs % fit.DOC_QUANTUM == 0 and p.dense_docs >= max(BATCHES)
    assert fit.resident_bytes(p.dense_docs, train) + max(fit.step_bytes(s, Dims(b, data.VOCAB))
                                                          for s in CHAPTER.steps for b in BATCHES) <= p.budget_bytes
    if not keeps_all:
        assert f"{p.dense_docs:,} of the {train.docs:,} training documents kept dense" in p.notes[0]
    assert (p.kernels["shared limit (bytes)"] == limits.shared_per_block).all()
    assert list(p.summary()["step"]) == [s.ordinal for s in CHAPTER.steps]


def test_the_plan_skips_what_does_not_fit_with_the_reason():
    from gpulab.device import DeviceLimits
    from gpulab.workloads.training import fit
    pairs = sorted({(op.file, op.kernel) for s in CHAPTER.steps for op in s.ops(Dims(1024, data.VOCAB))})
    figures = pd.DataFrame([{"file": f, "kernel": k, "registers": 32, "max_threads_per_block": np.nan,
                             "static_shared_bytes": 27136 if k == "forward_product_tc" else 1024} for f, k in pairs])
    small = DeviceLimits("a small GPU", shared_per_block=16 * 1024, total_memory=int(3e9))
    p = fit.plan(limits=small, train=data.corpus()[0], resources=figures)
    assert p.dense_docs == 0                     # 1.5 GB: not even one batch of dense documents fits
    assert "forward_product_tc needs 27,136 bytes of shared memory per block" in p.skip_reason(8, 32)
    assert "dense documents" in p.skip_reason(7, 1024) and p.skip_reason(9, 2048) is None
    assert set(p.skipped()["step"]) == set(range(1, 9))      # the sparse steps 9-10 still run
    assert fit.plan(limits=None, resources=figures).skipped().empty   # CPU backend: no limits
    old = DeviceLimits("a Pascal GPU", 48 * 1024, int(80e9), compute_capability="6.1")
    p = fit.plan(limits=old, resources=figures)
    assert set(p.skipped()["step"]) == {8} and "compute capability 7.0" in p.skip_reason(8, 1024)
    # a step's buffers: step 1 at B = 2,048 holds X^T (V x B) and dW1 (V x H) besides the parameters
    d = Dims(2048, data.VOCAB)
    assert fit.step_bytes(CHAPTER.step(1), d) > 4 * (d.V * d.B + 2 * d.V * d.H)
    assert fit.step_bytes(CHAPTER.step(9), d) < 4 * 2 * d.V * d.H + 4 * d.B * d.H * 4


# ----------------------------------------------------------------- a second GPU (#14)
def test_the_h200_comparison_reads_both_recorded_runs(tmp_path):
    from gpulab.workloads.training import views
    comparison = views.gpu_comparison()
    if comparison is None:
        pytest.skip("the training chapter is not recorded on both the H100 and the H200")
    table, figure = comparison
    assert [s.label for s in CHAPTER.steps] == list(table["variant"][:len(CHAPTER.steps)])
    assert table["ratio"].between(0.3, 3).all() and set(table["bound"]) <= {"memory", "compute", "latency"}
    assert figure.axes
    numbers = views.gpu_comparison_numbers(table)
    assert "-" not in {numbers[k] for k in ("g2_s8_ratio", "g2_s8_pred", "g2_lab_min", "g2_lab_max")}
    assert float(numbers["g2_lab_min"]) <= float(numbers["g2_s8_ratio"]) <= float(numbers["g2_lab_max"])
    assert views.gpu_comparison(root=tmp_path) is None
    assert set(views.gpu_comparison_numbers(None).values()) == {"-"}


def test_the_checks_table_shows_a_dash_for_no_error_and_errors_in_e_notation():
    from types import SimpleNamespace
    import pandas as pd
    from gpulab.workloads.training import views
    table = pd.DataFrame([{"step": 1, "variant": "01", "passed": True, "error": float("nan"), "rel_error loss": 3.9e-8},
                          {"step": 2, "variant": "02", "passed": False, "error": "CheckFailed: loss off",
                           "rel_error loss": float("nan")}])
    run = SimpleNamespace(tables={"checks": table}, caption="a run", chapter="training", gpu="X")
    html = views.checks(run).to_html()
    assert "3.90e-08" in html and "CheckFailed: loss off" in html and "nan" not in html.lower().replace("nano", "")
    assert html.count("\u2014") >= 3          # the passed row's error, the failed row's missing rel_error, the caption


def test_only_inductors_too_large_gemm_candidates_are_dropped_from_its_log():
    # Seen live on an H100 (max-autotune): Inductor logs an error per candidate Triton GEMM whose
    # tile needs more shared memory than the GPU has, then picks among the rest.
    import logging
    from gpulab.workloads.training.baselines import _too_large_candidate

    def record(message, *args):
        return logging.LogRecord("torch._inductor.select_algorithm", logging.ERROR, __file__, 1, message, args, None)
    assert not _too_large_candidate(record("Exception No valid triton configs. OutOfMemoryError: out of resource: "
                                           "triton_mm Required: 262144 Hardware limit:232448"))
    assert not _too_large_candidate(record("Runtime error during autotuning: \n%s",
                                           "No valid triton configs. OutOfMemoryError: out of resource: triton_mm"))
    assert _too_large_candidate(record("Runtime error during autotuning: %s", "CUDA error: illegal memory access"))
    assert _too_large_candidate(record("No valid triton configs"))


# ----------------------------------------------------------------- the graph step's guards
def _bound_step9(d=Dims(B=37, V=1001)):
    """Step 9 (the kernels step 10 captures) bound on the CPU backend to one batch."""
    from gpulab.kernels import get_backend
    from gpulab import ladder
    corpus_ = data.sample(d.B, d.V, stream=201)
    bufs = buffers(get_backend("cpu"), CHAPTER.step(9), d, corpus_, reference.init_params(d.V, d.H))
    case = problem.SgdStep(d, lr=0.5).for_step(CHAPTER.step(9))
    return ladder.bind(CHAPTER.step(9), case, bufs, "cpu"), bufs


def test_the_replay_check_passes_a_faithful_replay_and_restores_the_weights():
    from gpulab.workloads.training.record import check_replay
    bound, bufs = _bound_step9()
    state = {k: bufs[k] for k in reference.PARAMS}
    before = {k: v.copy() for k, v in state.items()}
    errs = check_replay("10 test", state, bufs["loss"], eager=bound, replay=bound)
    assert set(errs) == {"loss", *reference.PARAMS} and max(errs.values()) <= 1e-5
    for k in reference.PARAMS:      # the run starts from the weights it had, not one step on
        np.testing.assert_array_equal(state[k], before[k])
    bound()                          # and the step really moves them (so the check above can fail)
    assert not np.array_equal(state["W2"], before["W2"])


def test_the_replay_check_catches_a_replay_that_reads_poisoned_scratch():
    # What a replay racing the NaN fill of its scratch buffers (or a W1 copy still in
    # flight) does: the second kernel reads NaN, and the weights become NaN.
    from gpulab.workloads.training.record import ReplayMismatch, check_replay
    bound, bufs = _bound_step9()
    state = {k: bufs[k] for k in reference.PARAMS}

    def racing_replay():
        bound.launches[0]()
        bufs["dz1"][...] = np.nan       # the poison landing between the two kernels
        bound.launches[1]()
    with pytest.raises(ReplayMismatch, match=r"^10 test: the first batch replayed .* relative errors"):
        check_replay("10 test", state, bufs["loss"], eager=bound, replay=racing_replay)

    def stale_w1_replay():              # a finite but wrong W1 (the copy not landed yet)
        saved = bufs["W1"].copy()
        bufs["W1"][...] = 0.0
        bound()
        bufs["W1"][...] += saved     # its update kept, made from the wrong W1
    with pytest.raises(ReplayMismatch, match="W2"):
        check_replay("10 test", state, bufs["loss"], eager=bound, replay=stale_w1_replay)


def test_a_non_finite_training_loss_stops_the_run_naming_the_step():
    from gpulab.workloads.training.record import NonFiniteLoss, require_finite
    require_finite("09 sparse", 1, np.array([1.5, 1.4, 1.3], np.float32))
    with pytest.raises(NonFiniteLoss, match=r"^10 sparse, whole step in a CUDA graph: .* epoch 3 "
                                            r"\(first at batch 1, 2 of 4 batches\)"):
        require_finite("10 sparse, whole step in a CUDA graph", 3, np.array([1.5, np.nan, 1.2, np.inf]))


# ----------------------------------------------------------------- step 7's tiling diagram
def test_the_tiling_is_read_from_step_7s_file_and_launch():
    from gpulab.workloads.training import tiling
    from gpulab.workloads.training.launchers import split_k
    d = Dims(1000, 5000)                      # B not a multiple of the tile: the grid still covers it
    t = tiling.geometry(d)
    op = next(o for o in CHAPTER.step(7).ops(d) if o.kernel == "forward_product")
    assert t.grid == op.grid == (1, 8, split_k(d)) and t.threads == 256
    own = t.owner()
    # every element of the tile has one thread, and every thread the TM x TN elements it accumulates
    assert own.min() == 0 and np.bincount(own.ravel()).tolist() == [t.TM * t.TN] * t.threads
    # thread (0, 0) owns rows and columns 0-3 and 64-67: four 4 x 4 pieces, as the epilogue writes them
    assert t.rows(0) == t.cols(0) == [0, 1, 2, 3, 64, 65, 66, 67]
    assert tiling.numbers(t)["rt_chunk"] == f"{-(-(-(-5000 // t.grid[2])) // 8) * 8:,}"


def test_the_tiling_refuses_a_kernel_it_cannot_read(tmp_path, monkeypatch):
    from gpulab import paths
    from gpulab.workloads.training import tiling
    source = paths.kernel_path(CHAPTER.step(7).file).read_text()
    bad = tmp_path / "07.cu"
    real = paths.kernel_path
    monkeypatch.setattr(paths, "kernel_path", lambda p: bad if "07_" in str(p) else real(p))
    bad.write_text(source.replace("#define TM 8", "#define TM_ROWS 8"))
    with pytest.raises(ValueError, match="#define TM <number>"):
        tiling.geometry()
    bad.write_text(source.replace("64 + ty * 4 + i - 4", "64 + ty * 2 + i - 4"))
    with pytest.raises(ValueError, match="runs of 4 and 2"):
        tiling.geometry()
    bad.write_text(source.replace("#define BN 128", "#define BN 64"))   # 16 x 8 threads, but 256 launched
    with pytest.raises(ValueError, match="needs 128 threads, but the step launches 256"):
        tiling.geometry()


def test_loads_per_fma_make_step_6_shared_bound_and_step_7_not():
    from fractions import Fraction
    from gpulab.workloads.training import tiling
    counts = tiling.sass_counts()        # the kernels' machine code, live or recorded
    # step 6 reads B by columns (one LDS per k) and A by rows (the compiler makes them LDS.128)
    assert counts.loc[6, "FFMA"] == 16 and counts.loc[6, "LDS"] > counts.loc[6, "LDS.128"] > 0
    assert counts.loc[7, "LDS"] == counts.loc[7, "LDS.128"] and counts.loc[7, "FFMA"] == 64 * 8
    table = tiling.loads_per_fma(counts=counts).set_index("step")
    assert table["values from shared memory per FMA"][6] == 2 and table["values from shared memory per FMA"][7] == Fraction(1, 4)
    assert table["values from global memory per FMA"].tolist() == [2, Fraction(1, 8), Fraction(1, 64)]
    # fewer loads per FMA can only raise the ceiling; a load per FMA (step 6's best case) caps it at 1/4
    fake = counts.copy()
    fake.loc[6, ["LDS", "LDS.128", "FFMA"]] = (16, 0, 16)
    fake.loc[7, ["LDS", "LDS.128", "FFMA"]] = (128, 128, 512)   # 4 clocks each: a whole clock per FFMA
    share = tiling.loads_per_fma(counts=fake).set_index("step")["share of the FP32 rate shared memory allows"]
    assert share[6] == Fraction(1, 4) and share[7] == Fraction(1, 4)
    share = table["share of the FP32 rate shared memory allows"]
    assert share[6] < Fraction(1, 4) and share[7] == 1
    fig = tiling.figure()
    assert len(fig.axes) == 3 and "?" in fig._suptitle.get_text()


def test_the_profile_table_keeps_the_kernels_and_counters_the_prose_reads():
    from gpulab.runs import load_run
    from gpulab.workloads.training import views
    run = load_run("training", "H100")
    full, shown = views.profile(run), views.profile_table(run).data
    names = views.profile_numbers(run)
    stalls = {"stall: " + names[k] for k in ("pr_s9_fb_stall", "pr_s9_up_stall", "pr_s9_up_stall2")}
    assert {c for c in shown.columns if "stall" in c} == stalls
    assert not {"kernel", "sectors_per_request", "issue_slots_busy_pct", "dram_bytes_read"} & set(shown.columns)
    assert shown["share of step"].min() >= views.PROFILE_MIN_SHARE
    assert len(shown) == (full["share of step"] >= views.PROFILE_MIN_SHARE).sum() < len(full)
    # the kernels the prose quotes are all there
    assert {"Z1 = X W1", "dW1 = X^T dZ1", "X^T"} <= set(shown[shown["step"] == 6]["op"])
    assert (shown["step"] == 9).sum() == 2


def test_graph_gain_is_eager_minus_captured_for_the_steps_timed_both_ways():
    from gpulab.runs import load_run
    from gpulab.workloads.training import views
    run = load_run("training", "H100")
    gain = views.graph_gain(run)
    rows = run.experiment("ladder")
    rows = rows[rows["size"] == views.MAIN_BATCH]
    both = rows.pivot_table(index="variant", columns="mode", values="median_ms").dropna()
    assert list(gain["variant"]) == [s.label for s in CHAPTER.steps if s.label in both.index]
    for _, g in gain.iterrows():
        eager, graph = both.loc[g["variant"], "eager"], both.loc[g["variant"], "graph"]
        assert g["saved (µs)"] == pytest.approx(1e3 * (eager - graph))
        assert g["saved, share of the step"] == pytest.approx((eager - graph) / eager)
    numbers = views.graph_gain_numbers(run)
    untimed = [s.ordinal for s in CHAPTER.steps if not s.graph and s.label not in both.index]
    assert numbers["graph_not_timed"] == " and ".join(", ".join(map(str, untimed)).rsplit(", ", 1))
    assert numbers["graph_last_step"] == gain["step"].iloc[-1]


def test_the_graph_saving_reads_right_when_a_live_run_times_the_graph_slower():
    # On a busy GPU a live run timed step 1's captured form 557 µs slower than the eager one: the
    # prose must say so, not "saves -557 µs", and the figure's axis must hold the negative bar.
    from gpulab.workloads.training import views
    slower = {"saved (µs)": -557.0, "saved, share of the step": -0.891, "eager (ms)": 0.625}
    faster = {"saved (µs)": 52.0, "saved, share of the step": 0.0118, "eager (ms)": 4.42}
    assert views._saving_text(slower) == "made it 557 µs slower in this run (89.1% of its 625 µs)"
    assert views._saving_text(faster) == "saves 52 µs, 1.2% of its 4.42 ms"


def test_a_run_without_its_ceilings_still_draws_its_roofline():
    # A live run that spent its budget before the ceilings (the H100's check of 2026-12-07 stopped
    # with KeyError 'device copy') draws the datasheet's roof, and the table says what is missing.
    from gpulab import roofline, runs
    from gpulab.workloads.training import views
    run = runs.load_run("training")
    without = run.timings[run.timings["experiment"] != "ceilings"]
    table = roofline.ceilings_table(without, run.gpu)
    assert table["measured"].isna().all()
    assert table["how"].str.contains("not measured in this run").all()
    run.timings = without
    fig = views.roofline_figure(run)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "measured ceilings: not in this run" in labels and any(l.startswith("datasheet") for l in labels)
