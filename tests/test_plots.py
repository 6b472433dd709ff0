"""gpulab.plots' ladder figure: vendor reference lines readable however many paths a run timed."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from gpulab import plots  # noqa: E402


def _ladder(n=6):
    t = np.geomspace(5.0, 0.05, n)
    return pd.DataFrame({"variant": [f"{i + 1:02d} step number {i + 1}" for i in range(n)], "median_ms": t,
                         "q1_ms": t * 0.98, "q3_ms": t * 1.02})


def _vendor(n=13):
    rng = np.random.default_rng(3)
    precision = np.array(["fp32", "tf32", "fp16", "bf16"])[rng.integers(0, 4, n)]
    mode = np.array(["eager", "graph"])[rng.integers(0, 2, n)]
    return pd.DataFrame({"variant": [f"Vendor path {i} with a long descriptive name, {p}, {m}"
                                     for i, (p, m) in enumerate(zip(precision, mode))],
                         "median_ms": rng.uniform(0.1, 3.0, n), "precision": precision, "mode": mode})


def test_fastest_vendor_lines_keeps_the_fastest_per_precision_and_mode():
    vendor = _vendor()
    kept = plots.fastest_vendor_lines(vendor)
    assert 1 <= len(kept) <= 4
    assert kept["median_ms"].iloc[0] == vendor["median_ms"].min()
    klass = vendor["precision"].replace({"bf16": "fp16"})
    for _, row in kept.iterrows():
        same = vendor[(klass == ("fp16" if row["precision"] == "bf16" else row["precision"]))
                      & (vendor["mode"] == row["mode"])]
        assert row["median_ms"] == same["median_ms"].min()
    few = vendor.head(3)
    assert len(plots.fastest_vendor_lines(few)) == 3      # few paths: all of them


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_ladder_labels_do_not_overlap_and_stay_in_the_figure():
    fig = plots.speedup_ladder(_ladder(), vendor=_vendor(), title="How fast is each step?", caption="GPU, date")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    lines = [l for l in ax.lines if l.get_linestyle() not in ("None", "")]
    assert 1 <= len(lines) <= 4
    legend = ax.get_legend()
    assert legend is not None and len(legend.get_texts()) == len(lines) + 1   # + "n slower paths" note
    boxes = [legend.get_window_extent(renderer)] + [t.get_window_extent(renderer) for t in ax.texts if t.get_text()]
    figure_box = fig.bbox
    for i, a in enumerate(boxes):
        assert a.x0 >= figure_box.x0 - 1 and a.x1 <= figure_box.x1 + 1, "a label runs off the figure"
        for b in boxes[i + 1:]:
            assert not _overlap(a, b), "two labels overlap"
    # The axis spans the data, not decades of empty room for annotations.
    lo, hi = ax.get_xlim()
    data = np.r_[_ladder()["median_ms"], lines[0].get_xdata()[0]]
    assert lo > data.min() / 3 and hi < data.max() * 3


def test_a_branching_ladder_compares_each_step_with_the_step_it_builds_on():
    rows = _ladder(4).assign(median_ms=[4.0, 3.0, 5.0, 0.7])
    rows = rows.assign(q1_ms=rows["median_ms"] * 0.98, q3_ms=rows["median_ms"] * 1.02)
    labels = list(rows["variant"])
    fig = plots.speedup_ladder(rows, title="t", builds_on={labels[2]: labels[0], labels[3]: labels[2]})
    texts = [t.get_text() for t in fig.axes[0].texts]
    t = rows["median_ms"].to_numpy()
    assert f"x{t[0] / t[2]:.2f} vs 1" in texts and f"x{t[2] / t[3]:.2f} vs 3" in texts
    assert f"x{t[1] / t[2]:.2f} vs 2" not in texts and f"x{t[1] / t[2]:.2f}" not in texts   # not the row above
    assert "vs its base step" in texts and "vs previous" not in texts
    with pytest.raises(ValueError, match="not in the ladder"):
        plots.speedup_ladder(rows, title="t", builds_on={labels[1]: "99 no such step"})
