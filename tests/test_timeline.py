"""The stream timeline: interval arithmetic and the figure anywhere, the events on a GPU."""
import matplotlib
import pandas as pd
import pytest

import gpulab
from gpulab import timeline

matplotlib.use("Agg")


def _rows():
    return pd.DataFrame([
        {"lane": "stream 0", "kind": "h2d", "label": "c0", "start_ms": 0.0, "end_ms": 1.0},
        {"lane": "stream 0", "kind": "kernel", "label": "c0", "start_ms": 1.0, "end_ms": 3.0},
        {"lane": "stream 1", "kind": "h2d", "label": "c1", "start_ms": 1.0, "end_ms": 2.0},
        {"lane": "stream 1", "kind": "kernel", "label": "c1", "start_ms": 3.0, "end_ms": 5.0},
        {"lane": "stream 0", "kind": "d2h", "label": "c0", "start_ms": 3.0, "end_ms": 3.5},
    ])


def test_busy_time_counts_overlapping_spans_once():
    rows = _rows()
    assert timeline.busy_ms(rows) == pytest.approx(5.0)
    assert timeline.busy_ms(rows, "h2d") == pytest.approx(2.0)       # [0, 1] and [1, 2] touch
    assert timeline.busy_ms(rows, "kernel") == pytest.approx(4.0)
    summary = timeline.overlap_summary(rows)
    # copies busy [0, 2] + [3, 3.5] = 2.5 ms, kernels 4 ms, anything 5 ms: 1.5 ms hidden.
    assert summary == pytest.approx({"wall_ms": 5.0, "copy_busy_ms": 2.5, "kernel_busy_ms": 4.0,
                                     "overlapped_ms": 1.5})


def test_plot_draws_one_lane_per_stream():
    fig = timeline.plot(_rows(), title="Do copies overlap kernels?", caption="synthetic", labels=True)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["stream 0", "stream 1"]
    assert len(ax.patches) == 5


def test_bad_rows_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="missing"):
        timeline.check_rows(_rows().drop(columns="lane"))
    backwards = _rows()
    backwards.loc[0, "end_ms"] = -1.0
    with pytest.raises(ValueError, match="end before they start"):
        timeline.check_rows(backwards)
    with pytest.raises(ValueError, match="empty"):
        timeline.check_rows(_rows().iloc[:0])


SPIN = r'''
extern "C" __global__ void spin(long long nanoseconds)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < nanoseconds);
}
'''


@pytest.mark.skipif(not gpulab.gpu_available(), reason="needs an NVIDIA GPU")
def test_two_streams_run_side_by_side(tmp_path):
    path = tmp_path / "spin.cu"
    path.write_text(SPIN)
    spin = gpulab.load_module(path, "gpu").spin.bind(1, 1, (1_000_000,))
    tl = timeline.Timeline()
    for name in ("a", "b"):
        s = tl.stream(name)
        with tl.span(s, "kernel", name):
            spin()
    rows = tl.rows()
    assert list(rows["lane"]) == ["a", "b"]
    assert (rows["end_ms"] - rows["start_ms"]).min() >= 0.95
    assert timeline.overlap_summary(rows)["wall_ms"] < 1.9       # the two 1 ms spins overlapped
