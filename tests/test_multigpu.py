"""The multigpu chapter: data-parallel logic on one backend, the bucketed
gradient kernel, the all-reduce cost model."""
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from gpulab.workloads import multigpu
from gpulab.workloads.multigpu import costmodel
from gpulab.workloads.multigpu.replicas import DataParallel, Layout, Replica, numpy_allreduce, split_batch
from gpulab.workloads.training import data, reference

V, B, STEPS, LR = 1001, 74, 3, 0.1          # odd sizes: each replica gets 37 documents
#: Two replicas against one on the whole batch: largest relative difference of
#: any parameter's total update after STEPS steps (float32 sums in another order).
REPLICA_TOLERANCE = 1e-5
#: Either against the float64 reference.
REFERENCE_TOLERANCE = 1e-4
#: The parameter-averaging form against one replica (gradient form): each atomic add into W
#: rounds at W's float32 spacing instead of the gradient's (step 9 alone is ~1e-5 off too).
PARAMETER_TOLERANCE = 5e-5


@pytest.fixture(scope="module")
def corpus():
    return data.sample(B * STEPS, V, stream=300)


def _train(corpus, replicas, backend, bucketed=False, form="gradient"):
    dp = DataParallel(reference.init_params(V), replicas, backend, lr=LR, bucketed=bucketed, form=form)
    losses = []
    for s in range(STEPS):
        losses.append(dp.step(corpus.rows(s * B, (s + 1) * B)))
        assert dp.identical(), f"replicas differ after step {s}"
    return dp.params(), np.array(losses)


def _rel_update_error(params, ref, p0):
    return max(np.linalg.norm(params[k].astype(np.float64) - ref[k]) / np.linalg.norm(ref[k] - p0[k])
               for k in reference.PARAMS)


@pytest.mark.parametrize("bucketed", [False, True], ids=["one all-reduce", "bucketed"])
def test_two_replicas_equal_one_replica_on_the_whole_batch(backend, corpus, bucketed):
    p0 = reference.init_params(V)
    one, loss1 = _train(corpus, 1, backend)
    two, loss2 = _train(corpus, 2, backend, bucketed)
    ref, ref_losses = reference.train(corpus, p0, B, STEPS, lr=LR)
    assert _rel_update_error(two, {k: one[k].astype(np.float64) for k in one}, p0) <= REPLICA_TOLERANCE
    assert _rel_update_error(two, ref, p0) <= REFERENCE_TOLERANCE
    assert _rel_update_error(one, ref, p0) <= REFERENCE_TOLERANCE
    np.testing.assert_allclose(loss2, ref_losses, rtol=1e-5)
    np.testing.assert_allclose(loss1, ref_losses, rtol=1e-5)


@pytest.mark.parametrize("bucketed", [False, True], ids=["one all-reduce", "bucketed"])
def test_parameter_averaging_equals_one_replica_on_the_whole_batch(backend, corpus, bucketed):
    # Each replica steps its own copy with 2 lr, the all-reduce averages the copies.
    p0 = reference.init_params(V)
    one, loss1 = _train(corpus, 1, backend)
    two, loss2 = _train(corpus, 2, backend, bucketed, form="parameters")
    ref, ref_losses = reference.train(corpus, p0, B, STEPS, lr=LR)
    err = _rel_update_error(two, {k: one[k].astype(np.float64) for k in one}, p0)
    assert err <= PARAMETER_TOLERANCE
    assert _rel_update_error(two, ref, p0) <= REFERENCE_TOLERANCE
    np.testing.assert_allclose(loss2, ref_losses, rtol=1e-5)


def test_parameter_averaging_leaves_untouched_rows_bit_for_bit(corpus):
    # With 2 replicas NCCL's float average (x/2 + y/2) returns a row no replica touched
    # unchanged: rows of words outside the batch keep their exact bits.
    p0 = reference.init_params(V)
    batch = corpus.rows(0, B)
    dp = DataParallel(p0, 2, "cpu", lr=LR, form="parameters")
    dp.step(batch)
    touched = np.zeros(V, bool)
    touched[batch.indices] = True
    assert 0 < touched.sum() < V
    w1 = dp.params()["W1"]
    np.testing.assert_array_equal(w1[~touched].view(np.uint32), p0["W1"][~touched].astype(np.float32).view(np.uint32))
    assert np.all(np.any(w1[touched] != p0["W1"][touched], axis=1))


@pytest.mark.parametrize("replicas", [3, pytest.param(4, marks=pytest.mark.slow)])    # 4: the larger case, ~6 CPU-s
def test_more_replicas_equal_one_replica(corpus, replicas):
    # Any replica count: 3 does not divide 74, so the batch is 72 documents (24 or 18 each).
    b = 72
    p0 = reference.init_params(V)
    for form, bucketed in (("gradient", False), ("gradient", True), ("parameters", False), ("parameters", True)):
        dp = DataParallel(p0, replicas, "cpu", lr=LR, bucketed=bucketed, form=form)
        one = DataParallel(p0, 1, "cpu", lr=LR)
        for s in range(2):
            batch = corpus.rows(s * b, (s + 1) * b)
            dp.step(batch)
            one.step(batch)
            assert dp.identical()
        ref = {k: v.astype(np.float64) for k, v in one.params().items()}
        tol = REPLICA_TOLERANCE if form == "gradient" else PARAMETER_TOLERANCE
        assert _rel_update_error(dp.params(), ref, p0) <= tol, (form, bucketed)


def test_the_update_zeroes_the_gradient_it_applied(corpus):
    batch = corpus.rows(0, 37)
    r = Replica(batch, reference.init_params(V), 37, "cpu", lr=LR)
    before = r.flat.copy()
    r.forward_backward()
    r.backward_plain()
    g = r.grad.copy()
    assert np.count_nonzero(g) > 0
    bucket = r.buckets[2]
    r.update(bucket)()
    lo, hi = bucket.start, bucket.stop
    np.testing.assert_array_equal(r.grad[lo:hi], 0)
    np.testing.assert_array_equal(r.grad[:lo], g[:lo])
    np.testing.assert_array_equal(r.grad[hi:], g[hi:])
    np.testing.assert_allclose(r.flat[lo:hi], before[lo:hi] - np.float32(LR) * g[lo:hi], rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(r.flat[hi:], before[hi:])


@pytest.mark.parametrize("form", ["gradient", "parameters"])
def test_a_replica_that_skips_the_all_reduce_is_caught(corpus, form):
    # The check is not vacuous: without the sum (or the average), each replica follows its own half.
    dp = DataParallel(reference.init_params(V), 2, "cpu", lr=LR, form=form)
    import gpulab.workloads.multigpu.replicas as rep
    real = rep.numpy_allreduce
    try:
        rep.numpy_allreduce = lambda buffers, bucket, op="sum": None
        dp.step(corpus.rows(0, B))
    finally:
        rep.numpy_allreduce = real
    assert not dp.identical()


def test_parameter_form_writes_the_step_into_the_parameters(corpus):
    # One replica of two, parameter form: its backward pass leaves W - 2 lr g in its own copy
    # (g: the gradient form's, the same kernels) and never touches the gradient buffer.
    batch = corpus.rows(0, 37)
    p0 = reference.init_params(V)
    g = Replica(batch, p0, 74, "cpu", lr=LR)
    g.forward_backward()
    g.backward_plain()
    for split in (False, True):
        r = Replica(batch, p0, 74, "cpu", lr=LR, form="parameters", replicas=2)
        before = r.flat.copy()
        r.forward_backward()
        r.backward_split() if split else r.backward_plain()
        assert r.reduced is r.flat and r.op == "avg"
        np.testing.assert_array_equal(r.grad, 0)
        step, want = before.astype(np.float64) - r.flat, 2 * LR * g.grad.astype(np.float64)
        # W's float32 rounding (a tiny step can even round away): a whole-buffer relative error
        assert np.linalg.norm(step - want) / np.linalg.norm(want) <= PARAMETER_TOLERANCE
        assert not np.any((step != 0) & (g.grad == 0))        # nothing outside the gradient's support moved


@pytest.mark.parametrize("scatter_blocks", [None, 5], ids=["one block per document", "grid-stride, 5 blocks"])
def test_bucketed_gradient_equals_step_9s_gradient(scatter_blocks, monkeypatch):
    # w1_gradient_rows over all buckets = sparse_update in gradient mode, element for element,
    # with one block per document or a few blocks that stride over the 37 documents.
    batch = data.sample(37, V, stream=301)
    params = reference.init_params(V)
    plain = Replica(batch, params, 37, "cpu", buckets=5)
    plain.forward_backward()
    plain.backward_plain()
    bucketed = Replica(batch, params, 37, "cpu", buckets=5, scatter_blocks=scatter_blocks)
    bucketed.forward_backward()
    for k in range(len(bucketed.buckets)):
        bucketed.backward_bucket(k)
    # The same float32 products, added in another order (step 9 unrolls its scatter): whole-gradient relative error.
    diff = np.linalg.norm(bucketed.grad.astype(np.float64) - plain.grad) / np.linalg.norm(plain.grad)
    assert diff <= 1e-6
    assert np.array_equal(bucketed.grad == 0, plain.grad == 0)     # the same rows written, no others
    # The split form: the coalesced small gradients and W1's scatter over every row, two launches
    # (with 5 blocks for the small gradients, each block sums several documents).
    import gpulab.workloads.multigpu.replicas as rep
    monkeypatch.setattr(rep, "SMALL_BLOCKS", 5 if scatter_blocks else rep.SMALL_BLOCKS)
    split = Replica(batch, params, 37, "cpu", buckets=5, scatter_blocks=scatter_blocks)
    split.forward_backward()
    split.backward_split()
    assert np.linalg.norm(split.grad.astype(np.float64) - plain.grad) / np.linalg.norm(plain.grad) <= 1e-6
    assert np.array_equal(split.grad == 0, plain.grad == 0)
    assert split.loss == pytest.approx(plain.loss, rel=1e-6)
    acts = reference.forward(batch, {k: v.astype(np.float64) for k, v in params.items()})
    grads = reference.backward(batch, batch.labels, params, acts)
    g = plain.layout.views(plain.grad)
    for k in reference.PARAMS:
        np.testing.assert_allclose(g[k], grads["d" + k], rtol=1e-4, atol=1e-7)


def test_bucket_ranges_find_each_documents_words_of_the_bucket():
    from gpulab.workloads.multigpu.replicas import bucket_ranges
    batch = data.sample(29, V, stream=302)
    for rows in ((0, 3), (3, 250), (250, V), (0, V), (500, 501)):
        first, last = bucket_ranges(batch, rows)
        for i in range(batch.docs):
            words = batch.indices[batch.indptr[i]:batch.indptr[i + 1]]
            want = np.flatnonzero((words >= rows[0]) & (words < rows[1])) + batch.indptr[i]
            assert list(range(first[i], last[i])) == list(want)
    shuffled = data.Corpus(batch.indptr, batch.indices[::-1].copy(), batch.counts, batch.labels, batch.vocab)
    with pytest.raises(ValueError, match="ascending"):
        bucket_ranges(shuffled, (0, 10))
    with pytest.raises(ValueError, match="scatter_blocks"):
        Replica(batch, reference.init_params(V), 29, "cpu", scatter_blocks=0)
    with pytest.raises(ValueError, match="one per W1 bucket \\(4\\)"):
        Replica(batch, reference.init_params(V), 29, "cpu", scatter_blocks=[None, 3])


def _covers_once(L, buckets):
    spans = sorted((k.start, k.stop) for k in buckets)
    assert spans[0][0] == 0 and spans[-1][1] == L.size
    assert all(a[1] == b[0] for a, b in zip(spans[:-1], spans[1:]))


def test_layout_buckets_cover_the_gradient_once_rare_words_first():
    L = Layout(V=1001)
    buckets = L.buckets(4)
    # W1 at the buffer's start (as step 9's W1 in its own allocation), then W2, b1, b2 (644 floats).
    assert L.offsets["W1"] == (0, 1001 * 128) and L.size == 1001 * 128 + 644 and L.small == 644
    assert L.offsets["W2"] == (1001 * 128, 1001 * 128 + 512) and L.offsets["b2"][1] == L.size
    _covers_once(L, buckets)
    assert buckets[0].rows is None and (buckets[0].start, buckets[0].stop) == (1001 * 128, L.size)
    # Word ids are frequency ranks: the highest ids (rarest words) come first, row 0 last; the first
    # W1 bucket ends where the small parameters begin (one all-reduce sends both).
    assert buckets[1].rows == (751, 1001) and buckets[-1].rows == (0, 250)
    assert buckets[1].stop == buckets[0].start and buckets[-1].start == 0
    assert Layout(V=data.VOCAB).size * 4 - Layout(V=data.VOCAB).small * 4 == 32_754 * 128 * 4
    with pytest.raises(ValueError, match="at least 1"):
        L.buckets(0)
    with pytest.raises(ValueError, match="flat buffer must hold"):
        L.views(np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="row_work must hold 1001"):
        L.buckets(4, np.ones(7))


def test_equal_work_buckets_split_a_real_batchs_nonzeros_evenly():
    # Equal rows put most of a batch's scatter in the bucket of the most frequent words;
    # cut at equal non-zeros, every bucket holds about a quarter.
    from gpulab.workloads.multigpu.replicas import row_work
    batch = data.sample(1024, data.VOCAB, stream=400)
    L = Layout(data.VOCAB)
    work = row_work(batch)
    assert work.sum() == batch.nnz

    def shares(buckets):
        return np.array([work[k.rows[0]:k.rows[1]].sum() for k in buckets[1:]]) / batch.nnz
    by_rows = shares(L.buckets(4))
    assert by_rows[-1] > 0.6                    # the first quarter of the ids (the last bucket)
    even = L.buckets(4, work)
    _covers_once(L, even)
    assert np.all(np.abs(shares(even) - 0.25) < 0.1)
    assert [k.rows[0] for k in even[1:]] == sorted((k.rows[0] for k in even[1:]), reverse=True)
    # The rare-word bucket comes first and holds most of W1's bytes; the frequent-word one, few.
    assert even[1].size > 0.5 * L.size and even[-1].size < 0.05 * L.size
    # A vocabulary where one row holds all the work still gets n non-empty buckets.
    lopsided = np.zeros(L.V)
    lopsided[0] = 1
    assert all(k.size > 0 for k in L.buckets(4, lopsided))


def test_numpy_allreduce_sums_into_every_buffer():
    rng = np.random.default_rng(0)
    bufs = [rng.standard_normal(10).astype(np.float32) for _ in range(3)]
    want = bufs[0] + bufs[1] + bufs[2]
    keep = [b.copy() for b in bufs]
    numpy_allreduce(bufs, multigpu.Bucket("part", 2, 7))
    for b, k in zip(bufs, keep):
        np.testing.assert_array_equal(b[2:7], want[2:7])
        np.testing.assert_array_equal(b[:2], k[:2])
        np.testing.assert_array_equal(b[7:], k[7:])


def test_numpy_allreduce_averages_as_nccl_does_for_floats():
    # ncclAvg on float32: every input multiplied by 1/p, then summed.
    rng = np.random.default_rng(1)
    for p in (2, 3):
        bufs = [rng.standard_normal(9).astype(np.float32) for _ in range(p)]
        want = sum(b * np.float32(1 / p) for b in bufs)
        keep = [b.copy() for b in bufs]
        numpy_allreduce(bufs, multigpu.Bucket("part", 1, 8), "avg")
        for b, k in zip(bufs, keep):
            np.testing.assert_array_equal(b[1:8], want[1:8])
            np.testing.assert_array_equal(b[[0, 8]], k[[0, 8]])
    same = np.float32([0.1, 3.0, -7.25])
    bufs = [same.copy(), same.copy()]
    numpy_allreduce(bufs, multigpu.Bucket("all", 0, 3), "avg")
    np.testing.assert_array_equal(bufs[0], same)          # exact for p = 2
    with pytest.raises(ValueError, match="op must be"):
        numpy_allreduce(bufs, multigpu.Bucket("all", 0, 3), "mean")


def test_batches_that_do_not_split_evenly_are_refused():
    with pytest.raises(ValueError, match="cannot be split evenly over 2 replicas"):
        split_batch(data.sample(5, V, stream=302), 2)


# ----------------------------------------------------------------- the cost model
def test_ring_time_is_the_formula():
    t = costmodel.allreduce_time_ms(1e9, 4, bw_gbs=100.0, alpha_us=10.0)
    assert t == pytest.approx(2 * 3 / 4 * 1e9 / 100e9 * 1e3 + 6 * 10e-3)
    assert costmodel.allreduce_time_ms(1e9, 1, 100.0, 10.0) == 0.0
    # Large messages: the bus bandwidth tends to the link bandwidth whatever p is.
    for p in (2, 8, 16):
        t = costmodel.allreduce_time_ms(1e11, p, 300.0, 5.0)
        assert costmodel.bus_bandwidth_gbs(1e11, t, p) == pytest.approx(300.0, rel=1e-3)


def test_fit_recovers_known_parameters():
    sizes = np.logspace(3, 9, 13)
    rng = np.random.default_rng(1)
    times = costmodel.allreduce_time_ms(sizes, 2, 320.0, 8.0) * (1 + 0.01 * rng.standard_normal(13))
    m = costmodel.fit(sizes, times, 2)
    assert m.bw_gbs == pytest.approx(320.0, rel=0.03) and m.alpha_us == pytest.approx(8.0, rel=0.05)
    # 1% noise: standard errors of about a percent, and the truth within 4 of them.
    assert 0 < m.bw_err < 0.05 * m.bw_gbs and abs(m.bw_gbs - 320.0) < 4 * m.bw_err
    assert 0 < m.alpha_err and abs(m.alpha_us - 8.0) < 4 * m.alpha_err
    lo, hi = costmodel.prediction_range(m, 16.8e6, 8)
    assert lo < m.time_ms(16.8e6, 8) < hi
    exact = costmodel.fit(sizes, costmodel.allreduce_time_ms(sizes, 2, 320.0, 8.0), 2)
    assert exact.bw_err == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="at least 2 GPUs"):
        costmodel.fit(sizes, times, 1)
    with pytest.raises(ValueError, match="two different sizes"):
        costmodel.fit([1e6, 1e6], [1.0, 1.1], 2)


def test_predictions_follow_nccls_topology_and_say_what_is_assumed():
    m = costmodel.RingModel(350.0, 6.0, "test")
    S = 16.8e6
    pred = costmodel.predictions(m, S)
    p8, m8, t8 = pred["8 GPUs, NVLink"]
    p16, m16, t16 = pred["2 nodes x 8 GPUs, one NIC per GPU"]
    assert (p8, p16) == (8, 16) and m16.bw_gbs == 50.0 and "datasheet" in m16.source and "assumed" in m16.source
    # Inside the node: reduce-scatter + all-gather of the 8-GPU ring; across: S/8 per NIC over a 2-node ring.
    inside = 2 * (7 / 8 * S / 350e9 + 7 * 6e-6) * 1e3
    across = (S / 8 / 50e9 + 2 * costmodel.NETWORK_STEP_US * 1e-6) * 1e3
    assert t16 == pytest.approx(inside + across)
    # Not one 16-GPU ring through one 50 GB/s port (the old model): 8 NICs share the data.
    assert t16 < costmodel.allreduce_time_ms(S, 16, 50.0, costmodel.NETWORK_STEP_US) / 3
    assert t16 > t8 > pred["2 GPUs (the model itself)"][2]


def test_step_time_model_and_efficiency():
    m = costmodel.RingModel(400.0, 0.0)
    comm = m.time_ms(16.8e6, 2)
    assert costmodel.step_time_ms(10.0, 16.8e6, 2, m) == pytest.approx(5.0 + comm)
    assert costmodel.step_time_ms(10.0, 16.8e6, 2, m, overlap=1.0) == pytest.approx(5.0)
    assert costmodel.scaling_efficiency(10.0, 5.0, 2) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="overlap must be between 0 and 1"):
        costmodel.step_time_ms(1.0, 1.0, 2, m, overlap=2)
    with pytest.raises(ValueError, match="whole number of GPUs"):
        costmodel.allreduce_time_ms(1.0, 0, 1.0, 1.0)


# ----------------------------------------------------------------- the record and its views
def test_record_needs_two_gpus_and_says_so(monkeypatch):
    from gpulab.workloads.multigpu import record
    monkeypatch.setattr(record, "gpu_count", lambda: 1)
    with pytest.raises(record.NeedsTwoGpus, match="needs 2 GPUs, found 1"):
        record.benchmark_all(quick=True)


def test_the_command_line_names_the_missing_gpus(monkeypatch, capsys):
    from gpulab import __main__ as cli, device
    monkeypatch.setattr(device, "gpu_count", lambda: 1)
    assert cli.run(["record", "multigpu"]) == 2
    assert "needs 2 GPUs, found 1" in capsys.readouterr().err


def _synthetic_run():
    """A run built from SYNTHETIC rows (made-up numbers, for testing the views only)."""
    from gpulab.runs import RecordedRun
    from gpulab.workloads.multigpu import views
    rows = []
    def row(exp, variant, size, ms):
        rows.append({"experiment": exp, "variant": variant, "size": size, "phase": "step", "median_ms": ms,
                     "q1_ms": ms * 0.98, "q3_ms": ms * 1.02, "min_ms": ms * 0.95, "max_ms": ms * 1.1,
                     "repeats": 20, "flops": 0.0, "bytes": 0.0})
    comm = 0.06
    for b in (1024, 4096, 65536):
        compute = 0.02 + b * 2e-5
        row("step", views.ONE_GPU, b, compute)
        row("step", views.ONE_GPU_GRAPH, b, compute * 0.9)
        row("step", views.COMPUTE_ONLY, b, compute / 2)
        row("step", views.PLAIN, b, compute / 2 + comm)
        row("step", views.BUCKETED, b, compute / 2 + comm * 0.4)
        row("ddp", views.DDP, b, compute + comm)
    true = costmodel.RingModel(300.0, 7.0)
    for s in (2 ** k for k in range(10, 29, 2)):
        row("allreduce", "NCCL all-reduce (CuPy, one process)", s, true.time_ms(s, 2))
    meta = {"gpu": "SYNTHETIC test GPU", "date": "2000-01-01", "driver": "-", "cuda_runtime": "-", "cupy": "-"}
    return RecordedRun("multigpu", pd.DataFrame(rows), meta), true


def test_views_on_a_synthetic_run():
    import matplotlib
    matplotlib.use("Agg")
    from gpulab.workloads.multigpu import views
    run, true = _synthetic_run()
    s = views.scaling_table(run)
    assert list(s.index) == [1024, 4096, 65536]
    one = (0.02 + 65536 * 2e-5) * 0.9
    assert s.loc[65536, "speed-up"] == pytest.approx(one / ((0.02 + 65536 * 2e-5) / 2 + 0.024))
    half = (0.02 + 1024 * 2e-5) / 2
    assert s.loc[1024, "all-reduce share of plain step"] == pytest.approx(0.06 / (half + 0.06))
    assert s.loc[1024, "overlap saves (ms)"] == pytest.approx(0.06 * 0.6)
    t = views.targets(run)
    assert len(t) == 3 and t["met"].dtype == bool
    m = views.fitted_model(run)
    assert m.bw_gbs == pytest.approx(300.0, rel=1e-6) and m.alpha_us == pytest.approx(7.0, rel=1e-6)
    a = views.allreduce_table(run)
    assert a["busbw_gbs"].iloc[-1] == pytest.approx(2 ** 28 / (2 ** 28 / 300e9 + 2 * 7e-6) / 1e9)   # 295.4
    for fig in (views.plot_steps(run), views.plot_efficiency(run), views.plot_allreduce(run),
                views.plot_predictions(m, "model")):
        assert fig.axes and fig.texts[-1].get_text().replace("\n", " ") in ("model", run.caption + " (two GPUs)")
    import matplotlib.pyplot as plt
    plt.close("all")


def test_sweep_views_on_a_synthetic_run():
    # SYNTHETIC sweep rows: the views name each configuration without its GPU count and NCCL part,
    # take the slower GPU's time, and pick each NCCL setting's fastest bucketed configuration.
    from gpulab.runs import RecordedRun
    from gpulab.workloads.multigpu import views
    run, _ = _synthetic_run()
    assert views.overlap_table(run) is None and views.nccl_table(run) is None and views.kept(run) is None
    budget = views.scaling_budget(run).set_index("step")["vs one GPU"]
    assert budget.iloc[0] == pytest.approx(0.5) and budget.iloc[-1] == pytest.approx(views.SCALING_TARGET)
    assert np.isnan(budget.iloc[1])              # the synthetic run has no half of its largest batch
    rows = run.timings.to_dict("records")
    base = {k: v for k, v in rows[0].items() if k not in ("experiment", "variant", "size", "median_ms")}
    for nccl, shift in (("NCCL defaults", 0.0), ("NCCL_MAX_NCHANNELS=8", 0.1)):
        for variant, ms in (("one all-reduce, step 9's gradient kernel", 1.0), ("bucketed: A", 0.9), ("bucketed: B", 0.8)):
            for exp, size in (("overlap", 1024), ("nccl settings", 65536)):
                if exp == "overlap" and nccl != "NCCL defaults":
                    continue
                rows.append({**base, "experiment": exp, "variant": f"2 GPUs, {variant}; {nccl}", "size": size,
                             "median_ms": ms, "slowest_rank_ms": ms + shift})
    choices = pd.DataFrame([{"batch": 1024, "label": "B", "plain": "step 9's gradient kernel", "nccl": "NCCL defaults"}])
    swept = RecordedRun("multigpu", pd.DataFrame(rows), dict(run.meta), tables={"choices": choices})
    t = views.overlap_table(swept)
    assert list(t.index) == ["one all-reduce, step 9's gradient kernel", "bucketed: A", "bucketed: B"]
    assert t.loc["bucketed: B", 1024] == pytest.approx(0.8)
    n = views.nccl_table(swept).set_index("NCCL settings")
    assert n.loc["NCCL_MAX_NCHANNELS=8", "fastest bucketed step (ms)"] == pytest.approx(0.9)
    assert n.loc["NCCL defaults", "its configuration"] == "bucketed: B"
    assert views.kept(swept).loc[1024, "label"] == "B"


def test_no_recorded_run_is_none(tmp_path):
    from gpulab.workloads.multigpu import views
    assert views.recorded(root=tmp_path) is None


@pytest.mark.parametrize("world", [1, 2])
def test_one_process_per_gpu_sums_the_gradient_and_stays_identical(world):
    # On a machine with `world` GPUs or more: the record's own checks (summed gradient against one GPU's
    # and float64, every GPU's copy bit for bit), then a short timing pass and the timeline.
    from gpulab import device
    if device.gpu_count() < world:
        pytest.skip(f"needs {world} GPUs, found {device.gpu_count()}")
    from gpulab.workloads.multigpu import configs, workers
    corpus = data.sample(1024, data.VOCAB, stream=400)
    got = workers.run_workers(corpus, reference.init_params(), (1024,), (4096, 2 ** 20), repeats=3, world=world,
                              timeline_batches=(1024,))
    assert got["checks"] and all(c["passed"] for c in got["checks"]), [c for c in got["checks"] if not c["passed"]]
    assert sum("bit-identical" in c["quantity"] for c in got["checks"]) == 2
    variants = {r["variant"] for r in got["rows"]}
    assert {configs.variant(m, world) for m in configs.MODES} <= variants
    # Every bucketed configuration was checked against the plain step and timed; the one kept is one of them.
    # (The peer update's forms, which read the other GPU's gradient, on two GPUs only.)
    tried, forms = configs.overlaps(configs.OVERLAPS, world), configs.plain_forms(world)
    assert any(c.peer for c in tried) == (world == 2) and any(k[1] in configs.PEER_SPLITS for k in forms) == (world == 2)
    swept = [c for c in got["checks"] if c["quantity"] == "summed gradient vs the plain step's"]
    assert len(swept) == len(tried) + len(forms)
    assert sum(r["experiment"] == "overlap" for r in got["rows"]) == len(tried) + len(forms)
    assert [c["batch"] for c in got["choices"]] == [1024]
    # ... and it is an overlapped one (the sweep's not-overlapped configurations are measurements only).
    assert got["choices"][0]["label"] in {o.label for o in configs.OVERLAPS if o.overlapped}
    assert got["choices"][0]["plain"] in configs.PLAIN_FORMS.values()
    assert all(r["median_ms"] > 0 for r in got["rows"])
    forms = {r["variant"] for r in got["rows"] if r["experiment"] == "compute forms"}
    assert forms == {f"{world} GPUs, compute only, {name}" for key, name in configs.PLAIN_FORMS.items()
                     if key[1] not in configs.PEER_SPLITS}
    # One GPU's share of the batch, bucket by bucket (what the overlap can hide), each piece once.
    pieces = [(r["variant"], r["blocks_per_sm"], r["rare_share"]) for r in got["rows"] if r["experiment"] == "bucket pieces"]
    small = data.sample(2 * world, 101, stream=400)
    want = [(f"1 GPU, one GPU's share: {g[0]}", g[3], g[4])
            for g in workers.bucket_pieces(small, reference.init_params(101), world, sms=1, backend="cpu")]
    assert sorted(pieces) == sorted(want)
    lanes = {(t["gpu"], t["lane"]) for t in got["timeline"]}
    assert {(g, "compute") for g in range(world)} <= lanes
    assert all(t["end_us"] >= t["start_us"] >= 0 for t in got["timeline"])


def test_views_read_a_saved_run_as_the_notebook_will(tmp_path):
    # The record's row format (extra columns gpus, gradient, rank; side tables) through save_run and
    # load_run, as labdata/runs/<gpu>/multigpu.csv will hold it. SYNTHETIC numbers, written to tmp_path only.
    import matplotlib
    matplotlib.use("Agg")
    from gpulab.runs import save_run
    from gpulab.workloads.multigpu import views
    run, _ = _synthetic_run()
    rows = run.timings.copy()
    rows["gpus"] = np.where(rows["variant"].str.startswith("1 GPU"), 1, 2)
    rows.loc[rows["experiment"] == "allreduce", "gradient"] = False
    rows.loc[rows["experiment"] == "ddp", "rank"] = 0
    tables = {"checks": [{"batch": 1024, "variant": "plain", "quantity": "parameters bit-identical after 3 steps",
                          "rel_error": 0.0, "tolerance": 0.0, "passed": True}],
              "topology": [{"from": 0, "to": 1, "peer_access": True, "name": "SYNTHETIC"}]}
    save_run("multigpu", rows, dict(run.meta), root=tmp_path, tables=tables)
    loaded = views.recorded(root=tmp_path)
    assert loaded is not None and loaded.tables["checks"]["passed"].all() and views.problems(loaded) is None
    pd.testing.assert_frame_equal(views.scaling_table(loaded), views.scaling_table(run), check_exact=False, rtol=1e-5)
    views.plot_steps(loaded)
    views.plot_allreduce(loaded)
    import matplotlib.pyplot as plt
    plt.close("all")


def test_a_run_without_the_baseline_says_why(tmp_path):
    from gpulab.runs import save_run
    from gpulab.workloads.multigpu import views
    run, _ = _synthetic_run()
    rows = run.timings[run.timings["experiment"] != "ddp"]
    save_run("multigpu", rows, dict(run.meta), root=tmp_path,
             tables={"problems": [{"experiment": "ddp", "error": "SYNTHETIC: the processes did not start"}]})
    loaded = views.recorded(root=tmp_path)
    assert views.problems(loaded)["experiment"].tolist() == ["ddp"]
    assert views.DDP not in views.step_table(loaded) and len(views.targets(loaded)) == 2


def test_the_ring_counts_what_the_formula_counts():
    # 2 (p-1) steps of S/p bytes each; their times add up to the model's all-reduce time.
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from gpulab.workloads.multigpu import views
    model = costmodel.RingModel(300.0, 7.0)
    S = 4 * 1001 * 128
    for p in (2, 3, 8):
        steps = views.ring_steps(model, S, p)
        assert len(steps) == 2 * (p - 1) and list(steps["phase"]).count("all-gather") == p - 1
        assert steps["bytes per GPU"].sum() == pytest.approx(2 * (p - 1) / p * S)
        assert steps["end_us"].iloc[-1] == pytest.approx(model.time_ms(S, p) * 1e3)
        assert np.allclose(steps["start_us"].iloc[1:].to_numpy(), steps["end_us"].iloc[:-1].to_numpy())
        fig = views.plot_ring(model, S, p, "SYNTHETIC", measured_us=50.0 if p == 2 else None)
        assert fig.texts[-1].get_text() == "SYNTHETIC"
    plt.close("all")
    with pytest.raises(ValueError, match="at least 2 GPUs"):
        views.ring_steps(model, S, 1)


def test_forms_table_and_the_timeline_read_the_parameter_form():
    # SYNTHETIC sweep rows with both forms of the plain step; timeline names of the parameter form.
    from gpulab.runs import RecordedRun
    from gpulab.workloads.multigpu import views
    run, _ = _synthetic_run()
    rows = run.timings.to_dict("records")
    base = {k: v for k, v in rows[0].items() if k not in ("experiment", "variant", "size", "median_ms")}
    for variant, ms in (("one all-reduce, step 9's gradient kernel", 1.0), ("one all-reduce, split gradient", 1.1),
                        ("one all-reduce, parameter average, step 9's kernels", 0.97),
                        ("one all-reduce, parameter average, split", 0.99), ("bucketed: A", 0.9)):
        rows.append({**base, "experiment": "overlap", "variant": f"2 GPUs, {variant}; NCCL defaults", "size": 1024,
                     "median_ms": ms, "slowest_rank_ms": ms + 0.01, "form": "x"})
    timeline = pd.DataFrame([{"batch": 1024, "mode": "plain", "gpu": 0, "lane": "communication",
                              "operation": "all-reduce (average): whole", "start_us": 10.0, "end_us": 30.0}])
    swept = RecordedRun("multigpu", pd.DataFrame(rows), dict(run.meta), tables={"timeline": timeline})
    f = views.forms_table(swept)
    assert f.loc[1024, "gradient summed (ms)"] == pytest.approx(1.01)
    assert f.loc[1024, "parameters averaged (ms)"] == pytest.approx(0.98)
    assert f.loc[1024, "saved (µs)"] == pytest.approx(30.0)
    assert views.forms_table(run) is None
    assert views.timeline(swept)["operation"].tolist() == ["all-reduce: whole"]
    assert views.timeline_span(swept, 1024, "plain", "all-reduce") == pytest.approx(20.0)


def test_the_chapter_reads_a_run_of_the_current_record(tmp_path):
    # The book's GPU's run is read unless it predates the current record (the parameter form's rows and
    # the first bucket timed with the small gradients) and a newer run is of it.
    from gpulab.runs import save_run
    from gpulab.workloads.multigpu import views, workers
    run, _ = _synthetic_run()
    old = run.timings.copy()
    save_run("multigpu", old, {**run.meta, "gpu": "NVIDIA H100 SYNTHETIC", "date": "2000-01-01 00:00 UTC"},
             root=tmp_path)
    assert "H100" in views.recorded(root=tmp_path).gpu
    piece = old.iloc[:1].assign(experiment="bucket pieces", variant=views.BUCKET_PIECE + workers.FIRST_PIECE)
    save_run("multigpu", old.assign(form="gradient"), {**run.meta, "gpu": "NVIDIA H100 SYNTHETIC",
                                                        "date": "2000-01-01 00:00 UTC"}, root=tmp_path)
    assert not views.current(views.recorded(root=tmp_path))     # the parameter form's rows alone: the record before
    new = pd.concat([old, piece], ignore_index=True).assign(form="gradient")
    save_run("multigpu", new, {**run.meta, "gpu": "NVIDIA H200 SYNTHETIC", "date": "2000-01-02 00:00 UTC"},
             root=tmp_path)
    assert "H200" in views.recorded(root=tmp_path).gpu
    save_run("multigpu", new, {**run.meta, "gpu": "NVIDIA H100 SYNTHETIC", "date": "2000-01-03 00:00 UTC"},
             root=tmp_path)
    assert "H100" in views.recorded(root=tmp_path).gpu


def test_the_rare_word_bucket_takes_the_share_of_the_work_it_is_given():
    from gpulab.workloads.multigpu.replicas import row_work
    batch = data.sample(1024, data.VOCAB, stream=400)
    L, work = Layout(data.VOCAB), row_work(batch)
    for n, share in ((2, 0.25), (2, 0.1), (3, 0.25), (4, 0.5)):
        buckets = L.buckets(n, work, share)
        _covers_once(L, buckets)
        shares = np.array([work[k.rows[0]:k.rows[1]].sum() for k in buckets[1:]]) / batch.nnz
        # The first (rarest) bucket holds the share asked for; the others split the rest evenly
        # (to within the work of the single row at each cut: id 0 alone is ~5% of this batch).
        assert abs(shares[0] - share) < 0.02, (n, share, shares)
        assert np.all(np.abs(shares[1:] - (1 - share) / (n - 1)) < 0.06), (n, share, shares)
        assert buckets[1].rows[1] == L.V and buckets[-1].rows[0] == 0
    # Equal work is the share 1 / n.
    assert L.buckets(4, work, 0.25) == L.buckets(4, work)
    # A smaller share moves the cut towards the rarer words: fewer of W1's bytes in the first bucket.
    assert L.buckets(2, work, 0.25)[1].size < L.buckets(2, work)[1].size
    for bad, match in (((2, None, 0.25), "needs row_work"), ((1, work, 0.25), "at least 2 buckets"),
                       ((2, work, 0.0), "strictly between 0 and 1"), ((2, work, 1.0), "strictly between 0 and 1")):
        with pytest.raises(ValueError, match=match):
            L.buckets(*bad)


def test_the_bucket_pieces_add_up_to_the_whole_scatter(backend, corpus):
    # The record times each bucket's scatter alone (workers.bucket_pieces); the rare-word and
    # frequent-word buckets' scatters must write what the whole scatter writes.
    from gpulab.workloads.multigpu import configs, workers
    batch = corpus.rows(0, B)
    got = list(workers.bucket_pieces(batch, reference.init_params(V), 2, sms=3, backend=backend))
    names = [g[0] for g in got]
    assert names[:2] == ["forward + backward to dZ1", "small gradients, coalesced"]
    assert names.count("W1's scatter, every row") == 2            # once per grid, not per cut
    assert {(g[3], g[4]) for g in got} == {(0, 0.5), (0, configs.RARE_SHARE), (8, 0.5), (8, configs.RARE_SHARE)}
    replicas = {id(g[5]): g[5] for g in got}
    assert len(replicas) == 4
    for r in replicas.values():
        assert r.B == B // 2 and r.form == "parameters"
        r.forward_backward()
        w0 = r.backend.to_host(r.p["W1"]).copy()
        r.w1_gradient()
        whole = r.backend.to_host(r.p["W1"]).copy()
        r.p["W1"][...] = r.backend.to_device(w0)
        r.bucket_gradients[0]()
        rare = r.backend.to_host(r.p["W1"]).copy()
        r.bucket_gradients[1]()
        both = r.backend.to_host(r.p["W1"])
        a, b = r.buckets[1].rows, r.buckets[2].rows
        assert b[1] == a[0] and b[0] == 0 and a[1] == V
        # The rare bucket's scatter wrote only its rows; both together the whole scatter's.
        np.testing.assert_array_equal(rare[:a[0]], w0[:a[0]])
        assert not np.array_equal(rare[a[0]:], w0[a[0]:])
        # The same atomic adds into W in another order: each rounds at W's float32 spacing.
        np.testing.assert_allclose(both, whole, rtol=0, atol=4 * np.spacing(np.abs(whole).max()))
        assert np.abs(whole - w0).max() > 100 * np.spacing(np.abs(whole).max())     # the step is far larger
        # The first bucket with the small gradients in one launch (04_first_bucket_and_small.cu) writes what
        # the rare bucket's scatter and the coalesced small gradients write, and nothing else.
        before = r.backend.to_host(r.flat).copy()
        r.flat[...] = r.backend.to_device(before)
        r.p["W1"][...] = r.backend.to_device(w0)
        r.bucket_gradients[0]()
        r.small_gradients()
        apart = r.backend.to_host(r.flat).copy()
        loss_apart = r.loss
        r.flat[...] = r.backend.to_device(before)
        r.p["W1"][...] = r.backend.to_device(w0)
        r.scratch["loss"][...] = np.nan
        r.first_bucket_and_small()
        fused = r.backend.to_host(r.flat)
        np.testing.assert_array_equal(fused[:a[0] * r.layout.H], w0[:a[0]].ravel())      # the frequent rows untouched
        np.testing.assert_allclose(fused, apart, rtol=0, atol=4 * np.spacing(np.abs(apart).max()))
        assert not np.allclose(fused[r.layout.size - r.layout.small:], before[r.layout.size - r.layout.small:])
        assert r.loss == pytest.approx(loss_apart, rel=1e-6)
    floats = {g[0]: g[2] for g in got if g[4] == 0.5}
    assert floats["W1's scatter, rare-word bucket"] + floats["W1's scatter, frequent-word bucket"] == \
        floats["W1's scatter, every row"] == V * reference.HIDDEN
    assert floats[workers.FIRST_PIECE] == floats["W1's scatter, rare-word bucket"] + Layout(V).small


def test_overlap_bound_from_synthetic_pieces():
    # SYNTHETIC pieces (made-up numbers): a 20 µs scatter whose rare bucket takes 15 µs alone leaves
    # 5 µs to hide; the second all-reduce costs A(rare) + A(rest) - A(whole) from the graph curve.
    from gpulab.runs import RecordedRun
    from gpulab.workloads.multigpu import configs, views, workers
    run, _ = _synthetic_run()
    assert views.overlap_bound(run) is None
    rows = run.timings.to_dict("records")
    base = {k: v for k, v in rows[0].items() if k not in ("experiment", "variant", "size", "median_ms", "bytes")}
    L = Layout(data.VOCAB)
    grad = 4.0 * L.size
    for s in (2 ** 10, 2 ** 20, grad, 2 ** 26):        # a linear curve: 6 µs + 1 µs per 250 KB
        rows.append({**base, "experiment": "allreduce", "variant": views.LAB_ALLREDUCE + ", CUDA graph", "size": s,
                     "median_ms": (6 + s / 250e3) * 1e-3, "bytes": s})
    for per_sm in (0, 8):
        for share, rare_us, rare_bytes in ((0.5, 15.0, 16.5e6), (configs.RARE_SHARE, 10.0, 14.8e6)):
            for name, us, nbytes in (("W1's scatter, every row", 20.0, 0.0), ("W1's scatter, rare-word bucket", rare_us,
                                                                             rare_bytes),
                                     ("W1's scatter, frequent-word bucket", 12.0, 0.0)):
                rows.append({**base, "experiment": "bucket pieces", "variant": views.BUCKET_PIECE + name, "size": 1024,
                             "median_ms": us * 1e-3, "bytes": nbytes, "blocks_per_sm": per_sm, "rare_share": share})
    for label, ms in (("one all-reduce, parameter average, step 9's kernels", 0.100),
                      ("bucketed: " + configs.Overlap(2, 8, True, "parameters").label, 0.104),
                      ("bucketed: " + configs.Overlap(2, 8, True, "parameters", overlapped=False).label, 0.109)):
        rows.append({**base, "experiment": "overlap", "variant": f"2 GPUs, {label}; NCCL defaults", "size": 1024,
                     "median_ms": ms, "slowest_rank_ms": ms})
    b = views.overlap_bound(RecordedRun("multigpu", pd.DataFrame(rows), dict(run.meta)))
    assert len(b) == 4 and set(b["batch"]) == {1024}
    one = b[(b["scatter grid"] == "8 blocks per SM") & (b["rare bucket's share of the work"] == 0.5)].iloc[0]
    assert one["hideable (µs)"] == pytest.approx(5.0)
    # A(rare) + A(rest) - A(whole): the bytes add up, so the curve's fixed 6 µs is what is left.
    assert one["second all-reduce costs (µs)"] == pytest.approx(6.0)
    assert one["ideal saving (µs)"] == pytest.approx(-1.0)
    assert one["measured saving (µs)"] == pytest.approx(-4.0)
    # Split without the overlap: 9 µs slower than plain; the overlap wins 5 of them back.
    assert one["split, not overlapped (µs)"] == pytest.approx(-9.0)
    assert one["the overlap's own gain (µs)"] == pytest.approx(5.0)
    # The configurations the sweep did not time have no measured saving.
    assert b["measured saving (µs)"].isna().sum() == 3 and b["split, not overlapped (µs)"].isna().sum() == 3
    quarter = b[(b["scatter grid"] == "one block per document") & (b["rare bucket's share of the work"] < 0.5)].iloc[0]
    assert quarter["hideable (µs)"] == pytest.approx(10.0) and quarter["ideal saving (µs)"] == pytest.approx(4.0)
    assert quarter["last all-reduce (MB)"] == pytest.approx((grad - 14.8e6) / 1e6)
    # The prose: the kept configuration's row, and per batch whether any configuration could win at all.
    kept = pd.DataFrame({"label": [configs.Overlap(2, 8, True, "parameters").label]}, index=[1024])
    text = views.bound_text(b, kept)
    assert "8 blocks per SM" in text and "20.0 µs alone" in text and "would therefore still lose 1.0 µs" in text
    assert "a loss of 4.0 µs" in text and "(ideal saving +4.0 µs)" in text      # the quarter cut on that grid
    verdict = views.bound_verdict(b, kept)
    # ideal -1.0, measured -4.0: the split step costs 9.0 where its pieces add up to 6.0 + (15 + 12 - 20) = 13.0,
    # so -4.0 of excess; the overlap gained 5.0 of the 12.0 µs frequent scatter, 7.0 lost side by side.
    assert verdict.startswith("At B = 1,024 (" + configs.Overlap(2, 8, True, "parameters").label + ") the bucketed step "
                              "would lose 1.0 µs even with perfect overlap; measured, it lost 4.0 µs.")
    assert "-4.0 µs is the split step's own cost" in verdict and "add up to 13.0" in verdict
    assert "7.0 µs is what the all-reduce" in verdict and "gained 5.0 µs of the 12.0 µs" in verdict
    assert "The best cut timed piece by piece" in verdict and "could save 4.0 µs ideally" in verdict
    # The lean steps run the small gradients (4 µs alone) beside the all-reduce: they count among what can be
    # hidden, and the lean step not overlapped (one stream) runs them after the scatter.
    rows.append({**base, "experiment": "bucket pieces", "variant": views.BUCKET_PIECE + "small gradients, coalesced",
                 "size": 1024, "median_ms": 4e-3, "bytes": 0.0, "blocks_per_sm": 0, "rare_share": 0.5})
    lean = configs.Overlap(2, 8, True, "parameters", lean=True)
    for config, ms in ((lean, 0.097), (replace(lean, overlapped=False), 0.106), (replace(lean, comm_first=True), 0.095)):
        rows.append({**base, "experiment": "overlap", "variant": f"2 GPUs, bucketed: {config.label}; NCCL defaults",
                     "size": 1024, "median_ms": ms, "slowest_rank_ms": ms})
    b = views.overlap_bound(RecordedRun("multigpu", pd.DataFrame(rows), dict(run.meta)))
    assert len(b) == 6 and sorted(b["streams"]) == ["four"] * 4 + ["two (lean)", "two, all-reduce first"]
    row = b[b["configuration"] == lean.label].iloc[0]
    assert row["hideable (µs)"] == pytest.approx(9.0) and row["ideal saving (µs)"] == pytest.approx(3.0)
    assert row["measured saving (µs)"] == pytest.approx(3.0) and row["split, not overlapped (µs)"] == pytest.approx(-6.0)
    assert b[b["streams"] == "two, all-reduce first"]["measured saving (µs)"].iloc[0] == pytest.approx(5.0)
    kept = pd.DataFrame({"label": [lean.label]}, index=[1024])
    assert "leaving at most 9.0 µs of work" in views.bound_text(b, kept)
    verdict = views.bound_verdict(b, kept)
    # the pieces predict 6 + (15 + 12 - 20) + 4 = 17 µs for the one-stream step, measured 6: -11 of excess;
    # the overlap gained 9 of the 16 µs of work beside the all-reduce: 7 lost side by side.
    assert "-11.0 µs is the split step's own cost" in verdict and "add up to 17.0" in verdict
    assert "gained 9.0 µs of the 16.0 µs of work" in verdict
    # A run that times the rare bucket with the small gradients in one launch (17 µs, the small parameters'
    # bytes with the rare rows): the first all-reduce waits for that launch in every step, and no step runs
    # the small gradients beside the all-reduce.
    small_bytes = 4.0 * L.small
    for per_sm in (0, 8):
        for share, nbytes in ((0.5, 16.5e6), (configs.RARE_SHARE, 14.8e6)):
            rows.append({**base, "experiment": "bucket pieces", "variant": views.BUCKET_PIECE + workers.FIRST_PIECE,
                         "size": 1024, "median_ms": 17e-3, "bytes": nbytes + small_bytes, "blocks_per_sm": per_sm,
                         "rare_share": share})
    b = views.overlap_bound(RecordedRun("multigpu", pd.DataFrame(rows), dict(run.meta)))
    assert (b["small gradients beside it (µs)"] == 0).all() and (b["first all-reduce after (µs)"] == 17.0).all()
    row = b[b["configuration"] == lean.label].iloc[0]
    assert row["hideable (µs)"] == pytest.approx(3.0) and row["ideal saving (µs)"] == pytest.approx(-3.0)
    assert row["last all-reduce (MB)"] == pytest.approx((grad - 16.5e6 - small_bytes) / 1e6)
    text = views.bound_text(b, kept)
    assert "17.0 µs with the small parameters' gradient in the same launch" in text
    assert "leaving at most 3.0 µs of scatter" in text
    # one stream: 6 + (17 + 12 - 20) = 15 µs predicted, 6 measured
    assert "add up to 15.0" in views.bound_verdict(b, kept)


def test_split_verdict_says_where_the_split_forms_time_goes():
    # SYNTHETIC rows: the split form 10% slower with the all-reduce, 1% without it, 2% on one GPU.
    from gpulab.runs import RecordedRun
    from gpulab.workloads.multigpu import configs, views
    run, _ = _synthetic_run()
    assert "does not time" in views.split_verdict(run)
    rows = run.timings.to_dict("records")
    base = {k: v for k, v in rows[0].items() if k not in ("experiment", "variant", "size", "median_ms")}
    for b, one, split in ((32768, 1.0, 1.02), (65536, 2.0, 2.04)):
        rows += [{**base, "experiment": "step", "variant": views.ONE_GPU_REPLICA, "size": b, "median_ms": one},
                 {**base, "experiment": "step", "variant": views.ONE_GPU_SPLIT, "size": b, "median_ms": split}]
    for (form, split), name in configs.PLAIN_FORMS.items():
        rows.append({**base, "experiment": "compute forms", "variant": f"2 GPUs, compute only, {name}", "size": 65536,
                     "median_ms": 1.01 if split else 1.0})
    for name, ms in (("split gradient", 1.1), ("step 9's gradient kernel", 1.0)):
        rows.append({**base, "experiment": "overlap", "variant": f"2 GPUs, one all-reduce, {name}; NCCL defaults",
                     "size": 65536, "median_ms": ms, "slowest_rank_ms": ms})
    text = views.split_verdict(RecordedRun("multigpu", pd.DataFrame(rows), dict(run.meta)))
    assert "takes 1.01x" in text and "32,768 documents: 1.02x" in text and "with the all-reduce: 1.10x" in text
    assert text.endswith("comes with the all-reduce, not from the computation.")


class _Ranks:
    """Ranks of one "communicator" on the CPU backend, each in a thread, taking turns: a rank runs
    (holding the baton) until its all-reduce, where every rank's [lo, hi) is reduced in NumPy as
    NCCL would (:func:`numpy_allreduce`); then the ranks go on, one at a time again."""

    def __init__(self, world):
        import threading
        self.world, self.baton, self.barrier = world, threading.Lock(), threading.Barrier(world)
        self.buffers, self.calls = [None] * world, [[] for _ in range(world)]

    def allreduce(self, rank, step, lo, hi):
        self.buffers[rank] = step.replica.reduced
        self.calls[rank].append((lo, hi))
        self.baton.release()
        if self.barrier.wait() == 0:
            numpy_allreduce(self.buffers, multigpu.Bucket("span", lo, hi), step.replica.op)
        self.barrier.wait()
        self.baton.acquire()

    def peer(self, rank, replica, spans):
        """A peer update (06_peer_update.cu) of ``spans`` on every rank at once, as the flags order
        it on the GPUs: once every rank's gradient is formed, each rank's copy is updated from its own
        gradient and the other's (the kernel with its flags off), and only then is every gradient
        zeroed over the spans."""
        self.buffers[rank] = replica
        self.calls[rank].append(("peer", tuple((b.start, b.stop) for b in spans)))
        self.baton.release()
        if self.barrier.wait() == 0:
            reps = self.buffers
            unused = np.zeros(1, np.uint32)
            for r, rep in enumerate(reps):
                rep.peer_update(spans, reps[1 - r].grad, unused, unused, unused, 0, 3, sync=False)()
            for rep in reps:
                for b in spans:
                    rep.grad[b.start:b.stop] = 0.0
        self.barrier.wait()
        self.baton.acquire()

    def run(self, fn):
        import threading
        errors = []

        def rank(r):
            with self.baton:
                try:
                    fn(r)
                except BaseException as exc:      # noqa: BLE001 (raised in the test's thread)
                    errors.append(exc)
                    self.barrier.abort()
        threads = [threading.Thread(target=rank, args=(r,)) for r in range(self.world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        if errors:
            raise errors[0]


def _run_ranks(monkeypatch, world, make):
    """``world`` ranks (:class:`_Ranks`), each running the GpuStep ``make(rank, comm)`` makes: one
    step with its snapshot, then two more, its all-reduces and peer updates taken in turn with the
    other ranks'. Returns (the ranks, each rank's step, each rank's snapshot)."""
    import types
    from gpulab.workloads.multigpu import gpustep
    ranks = _Ranks(world)
    monkeypatch.setattr(gpustep, "nccl", lambda: None)

    class Link:                  # gpustep.PeerLink's stand-in: the launches meet in ranks.peer
        def __init__(self, replica, comm, lib):
            self.replica, self.rank = replica, comm.rank

        def launch(self, spans, slot, blocks):
            return lambda: ranks.peer(self.rank, self.replica, spans)
    monkeypatch.setattr(gpustep, "PeerLink", Link)
    steps, snapshots = [None] * world, [None] * world

    def run(r):
        step = steps[r] = make(r, types.SimpleNamespace(rank=r))
        step.allreduce = lambda lo, hi, stream: ranks.allreduce(r, step, lo, hi)
        snapshots[r] = np.full(step.replica.layout.size, np.nan, np.float32)
        step(snapshot=snapshots[r])
        for _ in range(2):
            step()
    ranks.run(run)
    return ranks, steps, snapshots


def _fake_cupy(monkeypatch):
    """CuPy's streams and events as no-ops (the CPU backend runs each launch when it is made),
    its device queries answered for a small GPU, and "gpu" served by the CPU backend."""
    import sys
    import types
    from gpulab import kernels

    class Stream:
        ptr = 0

        def __init__(self, *args, **options):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def wait_event(self, event):
            pass

    class Event:
        def __init__(self, *args, **options):
            pass

        def record(self, stream=None):
            pass
    runtime = types.SimpleNamespace(getDeviceProperties=lambda d: {"multiProcessorCount": 3},
                                    deviceGetStreamPriorityRange=lambda: (0, -1))
    cupy = types.ModuleType("cupy")
    cupy.float64, cupy.float32 = np.float64, np.float32
    cupy.cuda = types.SimpleNamespace(Stream=Stream, Event=Event, runtime=runtime, get_current_stream=Stream,
                                      Device=lambda *a: types.SimpleNamespace(id=0))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    real = kernels.Backend.__init__
    monkeypatch.setattr(kernels.Backend, "__init__", lambda self, name: real(self, "cpu" if name == "gpu" else name))


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("config", [
    dict(lean=True), dict(lean=True, form="parameters", blocks_per_sm=2), dict(lean=True, overlapped=False),
    dict(lean=True, buckets=4, form="parameters"), dict(lean=True, form="parameters", rare_share=0.25),
    dict(lean=True, blocks_per_sm=1, spare_sms=1, buckets=3), dict(lean=True, comm_first=True),
    dict(lean=True, comm_first=True, buckets=4, form="parameters"),
    dict(lean=True, comm_first=True, blocks_per_sm=1, spare_sms=2, buckets=3), dict(),
    dict(form="parameters", overlapped=False), dict(lean=True, in_forward=True),
    dict(lean=True, in_forward=True, buckets=3, blocks_per_sm=2, rare_share=0.25)],
    ids=["lean", "lean, parameters, grid-stride", "one stream", "lean, 4 buckets, parameters", "lean, quarter cut",
         "lean, spare SMs", "all-reduce first", "all-reduce first, 4 buckets, parameters",
         "all-reduce first, spare SMs", "four streams",
         "four streams, parameters, not overlapped", "first bucket in the forward kernel",
         "first bucket in the forward kernel, 3 buckets, quarter cut"])
def test_the_gpu_step_sums_every_bucket_once_in_the_same_order_on_every_rank(monkeypatch, world, config):
    """gpustep.GpuStep's bucketed step, its streams and events aside (the CPU backend runs each
    launch as it is made), on ``world`` ranks: every rank sends the same spans in the same order,
    together the whole buffer once; the summed gradient it applied equals one replica's on the
    whole batch, and the copies stay bit-identical over three steps."""
    from gpulab.workloads.multigpu import configs, gpustep
    _fake_cupy(monkeypatch)
    batch = data.sample(12 * world, V, stream=303)
    params = reference.init_params(V)
    config = configs.Overlap(**{"buckets": 2, **config})
    if config.spare_sms:       # the first bucket on one block per document, the later ones beside the spare SMs
        assert config.blocks(3) == [None] + [config.blocks_per_sm * (3 - config.spare_sms)] * (config.buckets - 1)
    buckets = Layout(V).buckets(config.buckets, multigpu.replicas.row_work(batch), config.rare_share)
    ranks, steps, snapshots = _run_ranks(monkeypatch, world, lambda r, comm: gpustep.GpuStep(
        split_batch(batch, world)[r], params, batch.docs, comm, "bucketed", buckets, config=config, world=world))
    assert all(calls == ranks.calls[0] for calls in ranks.calls)
    covered = np.zeros(Layout(V).size, int)
    for lo, hi in ranks.calls[0]:
        covered[lo:hi] += 1
    assert (covered == 3).all()                  # three steps, each span once a step
    # one all-reduce per W1 bucket, the small parameters with the first; in the forward-kernel step
    # they go on their own, in one NCCL group with the last bucket
    assert len(ranks.calls[0]) == 3 * (config.buckets + config.in_forward)
    one = Replica(batch, params, batch.docs, "cpu")
    one.forward_backward()
    one.backward_plain()
    want = one.grad.astype(np.float64)
    got = steps[0].effective_gradient(snapshots[0])
    tolerance = gpustep.GRADIENT_TOLERANCE if config.form == "gradient" else gpustep.UPDATE_TOLERANCE
    assert np.linalg.norm(got - want) / np.linalg.norm(want) <= tolerance
    assert all(np.array_equal(s.replica.flat.view(np.uint32), steps[0].replica.flat.view(np.uint32)) for s in steps)


def test_streams_verdict_compares_the_lean_step_with_the_four_stream_one():
    # SYNTHETIC sweep rows (µs below the plain step's 100): four streams, lean, all-reduce first, spare SMs.
    from gpulab.runs import RecordedRun
    from gpulab.workloads.multigpu import configs, views
    run, _ = _synthetic_run()
    assert views.streams_verdict(run).startswith("This run does not time the lean step")
    base = {k: v for k, v in run.timings.iloc[0].items() if k not in ("experiment", "variant", "size", "median_ms")}
    times_of = {configs.Overlap(2, 8, True, "parameters"): (0.110, 0.300),
               configs.Overlap(2, 8, True, "parameters", overlapped=False): (0.120, 0.320),
               configs.Overlap(2, 8, True, "parameters", lean=True): (0.104, 0.301),
               configs.Overlap(2, 8, True, "parameters", overlapped=False, lean=True): (0.111, 0.318),
               configs.Overlap(2, None, True, "parameters", lean=True, comm_first=True): (0.095, 0.305),
               configs.Overlap(2, 1, True, "parameters", lean=True, spare_sms=configs.SPARE_SMS): (0.106, 0.290)}
    rows = [{**base, "experiment": "overlap", "variant": f"2 GPUs, bucketed: {c.label}; NCCL defaults", "size": b,
             "median_ms": ms, "slowest_rank_ms": ms} for c, times in times_of.items() for b, ms in zip((1024, 8192), times)]
    swept = RecordedRun("multigpu", pd.DataFrame(rows), dict(run.meta))
    text = views.streams_verdict(swept)
    # lean overlapped: min(0.104, 0.095, 0.106) vs 0.110 at 1,024 (+15.0); min(.301, .305, .290) vs .300 at 8,192 (+10.0)
    assert "faster than the fastest four-stream configuration at 2 of 2 batch sizes (by +10.0 to +15.0 µs" in text
    assert "on one stream took +9.0 µs less than on four at B = 1,024, +2.0 µs at 8,192" in text
    # against the others (four streams, the lean one on 8 blocks per SM): 0.104 at 1,024, 0.300 at 8,192
    assert "launching the all-reduce first won at B = 1,024 (+9.0 µs)" in text
    assert f"leaving NCCL {configs.SPARE_SMS} empty SMs at 8,192 (+10.0 µs)" in text


def test_the_ladder_checks_each_kernel_alone(backend, monkeypatch):
    # Every kernel file of the chapter is a step, each checked on one replica's share of a small batch
    # against float64; a reference that is off (the learning rate the update check expects) fails it.
    from gpulab import ladder, paths
    from gpulab.workloads.multigpu import CHAPTER, launchers, problem
    files = sorted(p.relative_to(paths.KERNELS).as_posix() for p in (paths.KERNELS / "multigpu").glob("*.cu"))
    assert [s.file for s in CHAPTER.steps] == files
    table = ladder.assert_ok(CHAPTER.check(backend))
    assert set(table["step"]) == {s.number for s in CHAPTER.steps} and (table["status"] == ladder.OK).all()
    assert table["unwritten"].sum() == 0
    # 01: one row per W1 bucket; 03 and 04: dW2, db1, db2 and the loss; 04 also its bucket's rows.
    assert (table["step"] == "01").sum() == problem.CHECK_BUCKETS and (table["step"] == "04").sum() == 5
    assert list(table.loc[table["step"] == "05", "case"]) == ["dZ1", list(table.loc[table["step"] == "04", "case"])[-1]]
    assert list(table.loc[table["step"] == "02", "case"]) == ["w over [0, 128772)", "g over [0, 128772)",
                                                              "w over [3, 1004)", "g over [3, 1004)"]
    monkeypatch.setattr(launchers, "LEARNING_RATE", 2 * launchers.LEARNING_RATE)
    off = CHAPTER.check(backend, steps=[CHAPTER.step(2)])
    assert list(off["status"]) == [ladder.FAILED, ladder.OK, ladder.FAILED, ladder.OK]     # w wrong, g still zeroed


@pytest.mark.parametrize("number, family", [("03", "SmallGradients"), ("05", "ForwardAndFirstBucket")])
def test_what_a_kernel_leaves_unwritten_fails_its_check(backend, monkeypatch, number, family):
    # The loss and dZ1 are poisoned before the launch: a launch that writes nothing leaves NaN there.
    from gpulab import ladder
    from gpulab.workloads.multigpu import CHAPTER, launchers
    monkeypatch.setattr(getattr(launchers, family), "launch", lambda self, replica, case, arrays: lambda: None)
    table = CHAPTER.check(backend, steps=[CHAPTER.step(number)]).set_index("case")
    poisoned = "loss" if number == "03" else "dZ1"
    assert table.loc[poisoned, "status"] == ladder.FAILED and table.loc[poisoned, "unwritten"] > 0
    # the gradient rows, zeroed and never scattered into, are zero where the reference is not
    assert (table["status"] == ladder.FAILED).all()


def test_a_step_must_name_the_file_its_family_launches():
    import dataclasses

    from gpulab import ladder
    from gpulab.workloads.multigpu import CHAPTER
    wrong = dataclasses.replace(CHAPTER.step(3), file="multigpu/04_first_bucket_and_small.cu")
    with pytest.raises(ValueError, match="launches the replica's multigpu/03_small_gradients.cu"):
        ladder.run_all(wrong, CHAPTER.check_cases[0], CHAPTER.check_cases[0].for_step(wrong).inputs(0), "cpu")


@pytest.mark.parametrize("world", [2, 3])
def test_the_plain_step_with_w1s_gradient_in_the_forward_kernel(monkeypatch, world):
    # The plain step's chance at the forward kernel (split="forward"): one all-reduce of the whole buffer a
    # step, the same summed gradient as one replica's, bit-identical copies; refused in the parameter form.
    from gpulab.workloads.multigpu import configs, gpustep
    _fake_cupy(monkeypatch)
    batch = data.sample(12 * world, V, stream=304)
    params = reference.init_params(V)
    buckets = Layout(V).buckets(2, multigpu.replicas.row_work(batch))
    ranks, steps, snapshots = _run_ranks(monkeypatch, world, lambda r, comm: gpustep.GpuStep(
        split_batch(batch, world)[r], params, batch.docs, comm, "plain", buckets, split="forward", world=world))
    assert ranks.calls[0] == [(0, Layout(V).size)] * 3 and all(c == ranks.calls[0] for c in ranks.calls)
    one = Replica(batch, params, batch.docs, "cpu")
    one.forward_backward()
    one.backward_plain()
    got = steps[0].effective_gradient(snapshots[0])
    assert np.linalg.norm(got - one.grad) / np.linalg.norm(one.grad) <= gpustep.GRADIENT_TOLERANCE
    assert all(np.array_equal(s.replica.flat.view(np.uint32), steps[0].replica.flat.view(np.uint32)) for s in steps)
    with pytest.raises(ValueError, match="gradient form only"):
        gpustep.GpuStep(split_batch(batch, world)[0], params, batch.docs, object(), "plain", buckets, split="forward",
                        form="parameters", world=world)
    with pytest.raises(ValueError, match="forward kernel needs the lean"):
        configs.Overlap(2, 8, True, "parameters", lean=True, in_forward=True)


@pytest.mark.parametrize("plain, config", [("peer", None), ("forward peer", None),
                                           (None, {"buckets": 2, "blocks_per_sm": 8, "peer": 2}),
                                           (None, {"buckets": 3, "rare_share": 0.25, "peer": 1})],
                         ids=["plain, step 9's gradient", "plain, forward kernel", "bucketed", "bucketed, 3 buckets"])
def test_the_peer_update_sums_every_float_once_and_keeps_the_copies_identical(monkeypatch, plain, config):
    # The all-reduce fused with the update (06_peer_update.cu), each rank reading the other's gradient: two
    # ranks, every float of the buffers updated once a step, the gradient zeroed after it; the update applied
    # equals one replica's on the whole batch and the float64 reference; the copies stay bit-identical.
    from gpulab.workloads.multigpu import configs, gpustep
    _fake_cupy(monkeypatch)
    batch = data.sample(26, V, stream=305)
    params = reference.init_params(V)
    if config is not None:
        config = configs.Overlap(**{"blocks_per_sm": None, **config, "form": "gradient", "lean": True,
                                    "in_forward": True})
    cut = Layout(V).buckets(config.buckets if config else 2, multigpu.replicas.row_work(batch),
                            config.rare_share if config else None)
    ranks, steps, snapshots = _run_ranks(monkeypatch, 2, lambda r, comm: gpustep.GpuStep(
        split_batch(batch, 2)[r], params, batch.docs, comm, "bucketed" if config else "plain", cut, config=config,
        split=plain or False, world=2))
    assert ranks.calls[0] == ranks.calls[1] and all(kind == "peer" for kind, _ in ranks.calls[0])
    covered = np.zeros(Layout(V).size, int)
    for _, spans in ranks.calls[0]:
        for lo, hi in spans:
            covered[lo:hi] += 1
    assert (covered == 3).all()                                  # three steps, each float once a step
    assert len(ranks.calls[0]) == 3 * (config.buckets if config else 1)
    assert all(not s.replica.grad.any() for s in steps)           # zeroed for the next step's scatter-add
    one = Replica(batch, params, batch.docs, "cpu")
    one.forward_backward()
    one.backward_plain()
    got = steps[0].effective_gradient(snapshots[0])
    assert steps[0].tolerance == gpustep.UPDATE_TOLERANCE
    assert np.linalg.norm(got - one.grad) / np.linalg.norm(one.grad) <= gpustep.UPDATE_TOLERANCE
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    ref = reference.backward(batch, batch.labels, p64, reference.forward(batch, p64))
    views = Layout(V).views(got)
    for k in reference.PARAMS:
        assert np.linalg.norm(views[k] - ref["d" + k]) / np.linalg.norm(ref["d" + k]) <= REFERENCE_TOLERANCE
    assert np.array_equal(steps[0].replica.flat.view(np.uint32), steps[1].replica.flat.view(np.uint32))


def test_the_peer_update_is_refused_where_it_cannot_run(monkeypatch):
    from gpulab.workloads.multigpu import configs, gpustep
    _fake_cupy(monkeypatch)
    batch = data.sample(26, V, stream=305)
    params = reference.init_params(V)
    cut = Layout(V).buckets(2)
    with pytest.raises(ValueError, match="gradient form only"):
        gpustep.GpuStep(split_batch(batch, 2)[0], params, batch.docs, object(), "plain", cut, split="peer",
                        form="parameters", world=2)
    with pytest.raises(ValueError, match="peer update"):
        configs.Overlap(2, 8, True, "gradient", lean=True, peer=32)          # not with the first bucket forward
    with pytest.raises(ValueError, match="peer update"):
        configs.Overlap(8, 8, True, "gradient", lean=True, in_forward=True, peer=32)   # more buckets than slots
    r = Replica(split_batch(batch, 2)[0], params, batch.docs, "cpu", form="parameters", replicas=2)
    with pytest.raises(ValueError, match="form='gradient'"):
        r.peer_update([r.layout.whole()], r.grad, np.zeros(1, np.uint32), np.zeros(1, np.uint32),
                      np.zeros(1, np.uint32), 0, 4)
    assert configs.plain_forms(3) == [k for k in configs.PLAIN_FORMS if k[1] not in configs.PEER_SPLITS]
    assert not any(c.peer for c in configs.overlaps(configs.OVERLAPS, 3))
    assert any(c.peer for c in configs.overlaps(configs.OVERLAPS, 2))


def test_views_read_the_nccl_settings_per_batch_and_the_peer_updates_apart():
    # SYNTHETIC rows: NCCL settings swept at two batches (each batch keeps its fastest step through NCCL;
    # the peer update's rows, which never call NCCL, are left out), the cost model compared with the plain
    # step through NCCL under the largest batch's setting, and the peer update named "all-reduce" in the
    # timeline (flagged fused).
    from gpulab.runs import RecordedRun
    from gpulab.workloads.multigpu import configs, views
    run, _ = _synthetic_run()
    base = {k: v for k, v in run.timings.iloc[0].items() if k not in ("experiment", "variant", "size", "median_ms")}
    rows = run.timings.to_dict("records")
    peer = f"one all-reduce, {configs.PLAIN_FORMS[('gradient', 'peer')]}"
    times = {("NCCL defaults", 1024): 0.10, ("NCCL_MAX_NCHANNELS=8", 1024): 0.15,
             ("NCCL defaults", 65536): 0.80, ("NCCL_MAX_NCHANNELS=8", 65536): 0.70}
    for (nccl, size), ms in times.items():
        for variant, t in (("one all-reduce, step 9's gradient kernel", ms), (peer, ms / 10), ("bucketed: A", ms + 0.01)):
            rows.append({**base, "experiment": "nccl settings", "variant": f"2 GPUs, {variant}; {nccl}", "size": size,
                         "median_ms": t, "slowest_rank_ms": t})
    choices = pd.DataFrame([{"batch": 1024, "label": "A", "plain": "x", "nccl": "NCCL defaults"},
                            {"batch": 65536, "label": "A", "plain": "x", "nccl": "NCCL_MAX_NCHANNELS=8"}])
    timeline = pd.DataFrame([{"batch": 1024, "mode": "plain", "gpu": 0, "lane": "communication",
                              "operation": f"{configs.PEER_OP}: whole", "start_us": 1.0, "end_us": 5.0}])
    swept = RecordedRun("multigpu", pd.DataFrame(rows), dict(run.meta), tables={"choices": choices, "timeline": timeline})
    by = views.nccl_by_batch(swept, plain_only=True)
    assert by.loc[1024, "NCCL defaults"] == pytest.approx(0.10) and by.loc[65536, "NCCL_MAX_NCHANNELS=8"] == pytest.approx(0.70)
    assert views.nccl_by_batch(swept).loc[1024, "NCCL defaults"] == pytest.approx(0.10)     # the peer's 0.01 left out
    assert views.curve_setting(swept) == "NCCL_MAX_NCHANNELS=8"
    assert list(views.nccl_plain(swept)) == pytest.approx([0.15, 0.70])
    n = views.nccl_table(swept).set_index("NCCL settings")          # the largest batch only, NCCL's steps only
    assert n.loc["NCCL_MAX_NCHANNELS=8", "plain step (ms)"] == pytest.approx(0.70)
    tl = views.timeline(swept)
    assert list(tl["operation"]) == ["all-reduce: whole"] and bool(tl["fused"].iloc[0])
    assert views.timeline_span(swept, 1024, "plain", "all-reduce") == pytest.approx(4.0)
