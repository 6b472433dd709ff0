"""The sweep helper: every point checked before it is timed, invalid and wrong points reported."""
import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from gpulab import compare, plots
from gpulab.sweep import best, point_row, points, sweep


def test_points_are_the_product_of_the_grid():
    assert points({"a": [1, 2], "b": ["x", "y", "z"]})[:4] == [
        {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 1, "b": "z"}, {"a": 2, "b": "x"}]
    assert len(points({"a": [1, 2], "b": [3, 4, 5], "c": [6]})) == 6
    for bad in ({}, {"a": []}, {"a": "abc"}, [1, 2]):
        with pytest.raises(ValueError, match="grid"):
            points(bad)


def scaled_sweep(timed=False):
    """A toy 'kernel': out = x * scale. scale 1 is right, 2 is wrong, a negative scale is refused
    when the launch is prepared, and 0 raises when it runs."""
    x = np.random.default_rng(0).random(100)
    out = np.full(100, np.nan)

    def prepare(p):
        if p["scale"] < 0:
            raise ValueError(f"scale must be >= 0, got {p['scale']}")

        def launch():
            if p["scale"] == 0:
                raise RuntimeError("too many resources requested for launch")
            out[:] = x * p["scale"] * p["unroll"] / p["unroll"]
        return launch
    calls = []
    table = sweep({"scale": [1, 2, -1, 0], "unroll": [1, 4]}, prepare, timed=timed,
                  reset=lambda p: out.fill(np.nan), verify=lambda p: compare(out, x, name=str(p)),
                  describe=lambda p: calls.append(p) or {"threads": 32 * p["unroll"]}, flops=1e6)
    return table, calls


def test_statuses_reasons_and_no_timing_of_what_failed():
    table, described = scaled_sweep()
    assert len(table) == 8 and len(described) == 8          # every point is described, valid or not
    by_scale = table.groupby("scale")["status"].unique().to_dict()
    assert [list(by_scale[s]) for s in (1, 2, -1, 0)] == [["ok"], ["wrong"], ["invalid"], ["invalid"]]
    assert table.loc[table["scale"] == -1, "reason"].str.contains("scale must be >= 0").all()
    assert table.loc[table["scale"] == 0, "reason"].str.contains("RuntimeError: too many resources").all()
    assert table.loc[table["scale"] == 2, "reason"].str.contains("FAILED").all()
    assert (table.loc[table["scale"] == 1, "rel_error"] == 0).all()
    assert not table["timed"].any() and table["median_ms"].isna().all()   # timed=False: checked only
    assert list(table["threads"]) == [32, 128] * 4


def test_best_never_picks_a_wrong_or_untimed_point():
    table, _ = scaled_sweep()
    with pytest.raises(ValueError, match="no point of the sweep was checked and timed"):
        best(table)
    # Pretend the points were timed; the wrong ones "fastest" of all.
    timed = table.assign(timed=True, median_ms=[1.0, 2.0, 0.01, 0.01, np.nan, np.nan, np.nan, np.nan])
    timed["gflops"] = 1e6 / timed["median_ms"] / 1e6
    assert best(timed)["scale"] == 1 and best(timed)["unroll"] == 1
    assert best(timed, "median_ms", largest=False)["unroll"] == 1
    assert point_row(timed, scale=1, unroll=4)["median_ms"] == 2.0
    with pytest.raises(KeyError):
        point_row(timed, scale=1)


def test_heatmap_colours_only_checked_and_timed_points():
    table, _ = scaled_sweep()
    table = table.assign(timed=table["status"] == "ok", gflops=np.where(table["status"] == "ok", 5.0, 1e9),
                         occupancy=0.5)
    fig = plots.sweep_heatmap(table, x="unroll", y="scale", title="t", note="occupancy")
    values = fig.axes[0].images[0].get_array()
    ys = sorted(table["scale"].unique())
    for scale in (2, -1, 0):                                 # wrong and invalid: masked, never coloured
        assert values.mask[ys.index(scale)].all()
    assert not values.mask[ys.index(1)].any() and values.max() == 5.0
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("wrong") == 2 and texts.count("invalid") == 4 and "5\n50%" in texts
    with pytest.raises(ValueError, match="no column 'nope'"):
        plots.sweep_heatmap(table, x="nope", y="scale", title="t")
    matplotlib.pyplot.close("all")


def test_a_real_kernel_sweep_on_the_cpu_backend():
    from gpulab.workloads.convpool import CHECK, sweeps
    table = sweeps.shape_sweep("cpu", CHECK, threads=(32, 2048), q_values=(2, 16))
    ok = table[table["threads"] == 32]
    assert (ok["status"] == "ok").all() and (ok["rel_error"] < 1e-5).all()
    refused = table[table["threads"] == 2048]
    assert (refused["status"] == "invalid").all()
    assert refused["reason"].str.contains("at most 1024").all()
    assert list(table["blocks"]) == [2 * 7 * 5, 2 * 7 * 5, 2 * 7 * 1, 2 * 7 * 1]   # N x PE x ceil(PF / Q)
    assert isinstance(table, pd.DataFrame)
