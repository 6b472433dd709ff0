"""The hopper chapter's traced timelines and pictures: gpulab.hopper_trace (the CPU backend's record
of one block, laid out by its dependencies), gpulab.hopper_figures (an mbarrier's states, the wgmma
descriptor and the accumulator layout) and gpulab.hopper_exercise's prediction table."""
import contextlib
import io

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from gpulab import exercises, hopper_exercise, hopper_figures as hf, hopper_trace, ladder, paths, plots  # noqa: E402
from gpulab.errors import GpulabError  # noqa: E402
from gpulab.runs import load_run  # noqa: E402
from gpulab.workloads import hopper  # noqa: E402
from gpulab.workloads.hopper import views  # noqa: E402


def step(n):
    return ladder.find(hopper.STEPS, n)


@pytest.fixture(scope="module")
def records():
    return {n: hopper_trace.record(step(n)) for n in (2, 4, 6, 7)}


def test_the_record_is_of_a_checked_run_and_names_its_barriers(records):
    ev = records[4]
    assert ev.attrs["slices"] == 8 and ev.attrs["stages"] == 4
    names = hopper_trace.barrier_names(ev)
    assert sorted(names.values()) == [("empty", s) for s in range(4)] + [("full", s) for s in range(4)]
    # Each slice: one expect_tx of both boxes' bytes, two copies landing on the same barrier.
    arrivals = ev[(ev["kind"] == "arrive") & (ev["b"] > 0)]
    assert len(arrivals) == 8 and (arrivals["b"] == (128 + 256) * 64 * 2).all()
    assert (ev["kind"] == "landed").sum() == 16
    # 8 consumer warps x 8 slices arrive on empty; each wgmma group is 4 instructions 32 bytes apart.
    assert ((ev["kind"] == "arrive") & (ev["b"] == 0)).sum() == 64
    first = ev[(ev["kind"] == "mma") & (ev["thread"] == 128)]["a"].iloc[:4]
    assert list(np.diff(first)) == [32, 32, 32]


def test_a_traced_build_is_one_only_the_trace_asks_for():
    """Without the macro the same kernel prints nothing (the book's and the grader's builds)."""
    from gpulab import ladder as the_ladder
    from gpulab.workloads.hopper import problem
    case = problem.Gemm(64, 128, 128)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        C = the_ladder.run(step(3), case, case.inputs(0), "cpu")
    assert "@T" not in out.getvalue() and np.isfinite(C).all()


def test_a_wait_ends_after_the_phase_it_names_completes(records):
    """The layout's rule: a wait that a dependency held ends one column after the arrival or copy
    that completed its phase; the producer's first round names parity 1 of fresh empty barriers."""
    a = hopper_trace.actions(records[4])
    producer = a[a["lane"] == "producer (thread 0)"]
    waits = producer[producer["kind"] == "wait"]
    empties = waits[waits["label"].str.startswith("empty")]
    assert empties["fresh"].tolist() == [True] * 4 + [False] * 4
    assert empties["label"].tolist()[:4] == [f"empty[{s}] 1" for s in range(4)]
    consumer = a[a["lane"] == "consumer 1 (warp 4)"]
    # The first full wait is held until slice 0's copy has landed (the copy box's end).
    copy0 = a[(a["kind"] == "copy") & (a["label"] == "0")].iloc[0]
    wait0 = consumer[consumer["kind"] == "wait"].iloc[-8]
    assert wait0["label"] == "full[0] 0" and wait0["blocked"] and wait0["end"] == copy0["end"] + 1
    # Refilling slot s for round 1 waits for the last of the 8 consumer warps' releases of round 0.
    held = empties[empties["blocked"]].iloc[0]
    slot = int(held["label"][6])
    releases = a[(a["kind"] == "release") & (a["slot"] == slot)]
    assert held["end"] == releases["start"].iloc[:8].max() + 1 if len(releases) >= 8 else True
    first_round = releases.sort_values("start").iloc[:8]
    assert held["end"] >= first_round["start"].max() + 1


def test_step_6_keeps_a_group_in_flight_and_step_4_does_not(records):
    def overlaps(actions, lane):
        p = actions[(actions["lane"] == lane) & (actions["kind"] == "products")].sort_values("start")
        return int((p["start"].to_numpy()[1:] <= p["end"].to_numpy()[:-1]).sum())
    assert overlaps(hopper_trace.actions(records[4]), "consumer 1 (warp 4)") == 0
    assert overlaps(hopper_trace.actions(records[6]), "consumer 1 (warp 4)") >= 6


def test_step_2_waits_at_every_slice_and_step_7_stores_through_the_copy_engine(records):
    a2 = hopper_trace.actions(records[2])
    held = a2[(a2["lane"] == "warp 1") & (a2["label"] == "__syncthreads") & a2["blocked"]]
    assert len(held) >= 6
    a7 = hopper_trace.actions(records[7])
    stores = a7[a7["kind"] == "store"]
    assert len(stores) == 2 * 2 * 2 * 2                   # 2 tiles x 2 consumers x 2 parts x 2 boxes
    # The first tile's stores run on while the consumers multiply the second tile.
    second = a7[(a7["lane"] == "consumer 1 (warp 4)") & (a7["kind"] == "products") & (a7["label"] == "6")].iloc[0]
    assert (stores["start"] < second["start"]).any() and (stores["end"] > second["end"]).any()
    assert not (hopper_trace.actions(records[6])["kind"] == "store").any()


def test_the_trace_refuses_steps_it_cannot_follow():
    with pytest.raises(GpulabError, match="cluster"):
        hopper_trace.record(step(8))
    with pytest.raises(GpulabError, match="one block"):
        hopper_trace.record(step(3), M=256)


@pytest.mark.parametrize("n", [3, 7])
def test_the_timeline_reads_without_zooming(n):
    fig = hopper_trace.step_figure(step(n))
    assert fig.get_figwidth() <= plots.MAX_WIDTH_IN
    texts = plots.shown_text_px(fig)
    caption = next(t for _, t, note in texts if note and "CPU backend" in t)
    assert "not time" in caption
    plt.close(fig)
    assert not [t for px, t, note in texts if round(px, 1) < (9 if note else 10)]


def test_replay_follows_the_rules_of_the_exercises_solution():
    """The figure's states and exercise 2's solution agree on every wait of random valid streams."""
    e = exercises.get("hopper.2")
    solution = exercises.define(e, exercises.notebook_cell(paths.REPO / e.file, e.cell))
    for case in e.public + ({"count": 3, "phases": 4, "tx": 512, "seed": 5},):
        inputs = e.inputs(case)
        history = hf.replay(inputs["count"], [ev for ev in inputs["events"] if ev[0] != "wait"])
        waits, k = [], 0                          # the phase after each event, read at each wait
        phases = history[history["event"] != "phase completes"]["phase"].tolist()
        after = history.groupby((history["event"] != "phase completes").cumsum())["phase"].last().tolist()
        for ev in inputs["events"]:
            if ev[0] == "wait":
                waits.append(after[k] != ev[1])
            else:
                k += 1
        assert waits == solution(**inputs) and phases


def test_a_fresh_barriers_wait_1_returns_at_once():
    h = hf.replay(1, [("arrive_expect_tx", 96), ("complete_tx", 32), ("complete_tx", 64)])
    assert h["wait(1)"].iloc[0] and not h["wait(0)"].iloc[0]
    assert h["event"].tolist()[-1] == "phase completes" and h["phase"].iloc[-1] == 1 and h["pending"].iloc[-1] == 1
    assert not h["wait(0)"].iloc[:-1].any() and h["wait(0)"].iloc[-1]
    with pytest.raises(GpulabError, match="more arrivals"):
        hf.replay(2, [("arrive_expect_tx", 64), ("arrive", 1), ("arrive", 1)])   # bytes still to land


def test_the_barrier_history_of_a_record_agrees_with_the_backends_flips(records):
    full = hf.barrier_history(records[4], "full", 0)
    assert full["event"].tolist() == ["init", "arrive_expect_tx", "complete_tx", "complete_tx", "phase completes"]
    assert full["tx"].tolist() == [0, 49152, 32768, 0, 0]
    empty = hf.barrier_history(records[4], "empty", 1, phases=2)
    assert (empty["event"] == "phase completes").sum() == 2 and empty.attrs["count"] == 8
    fig = hf.mbarrier_figure(full)
    texts = plots.shown_text_px(fig)
    plt.close(fig)
    assert not [t for px, t, note in texts if round(px, 1) < (9 if note else 10)]


def test_the_descriptor_packs_as_smem_desc_and_the_k_steps_stay_in_the_atom():
    d = hf.smem_desc(0x4020, 1, 1024, 1)
    assert d == (0x4020 >> 4) | (64 << 32) | (1 << 62)           # LBO 1 is stored as 0, as on the GPU
    assert hf.descriptor_fields(d) == {"start": 0x4020, "lbo": 0, "sbo": 1024, "swizzle": 1}
    for kk in range(4):
        chunks = hf.slice_chunks(kk)
        assert chunks[0].tolist() == [2 * kk, 2 * kk + 1]                         # row 0: no XOR
        assert [c.tolist() for c in chunks] == [[(2 * kk) ^ r, (2 * kk + 1) ^ r] for r in range(8)]
    # The four slices together fill every chunk of every row exactly once.
    every = np.concatenate([hf.slice_chunks(kk) for kk in range(4)], axis=1)
    assert all(sorted(row) == list(range(8)) for row in every)


def test_the_accumulator_layout_is_cutlass_clayout_64xN():
    """CUTLASS's CLayout_64xN: (thread, value) -> m + 64 n with thread shape (4, 8, 4) strides
    (128, 1, 16) and value shape (2, 2, N/8) strides (64, 8, 512)."""
    n = 32
    thread, register = hf.accumulator_owner(n)
    for t in range(128):
        q, g, w = t % 4, (t // 4) % 8, t // 32
        for v in range(n // 2):
            v0, v1, v2 = v % 2, (v // 2) % 2, v // 4
            offset = 128 * q + g + 16 * w + 64 * v0 + 8 * v1 + 512 * v2
            m, col = offset % 64, offset // 64
            assert thread[m, col] == t and register[m, col] == v
    assert (thread >= 0).all()
    with pytest.raises(GpulabError):
        hf.accumulator_owner(12)


@pytest.mark.parametrize("name", ["descriptor_figure", "accumulator_figure"])
def test_the_layout_figures_read_without_zooming(name):
    fig = getattr(hf, name)()
    assert fig.get_figwidth() <= plots.MAX_WIDTH_IN
    texts = plots.shown_text_px(fig)
    plt.close(fig)
    assert not [t for px, t, note in texts if round(px, 1) < (9 if note else 9.9)]


def test_your_prediction_sits_beside_the_run():
    numbers = views.numbers(load_run("hopper", "H100"))
    table = hopper_exercise.your_prediction(numbers, 2, None, 1.3)
    assert table["your prediction"].tolist() == [2, "not made", 1.3]
    assert table["the run"].tolist()[:2] == [numbers["blocks02"], numbers["blocks03"]]
    assert table["the run"].iloc[2] == pytest.approx(numbers["t02"] / numbers["t03"], abs=0.005)


def test_the_trace_reads_what_is_printed_either_way():
    # The CPU backend's printf reaches Python's sys.stdout here and file descriptor 1 on the GPU
    # machine (where the record found no events on 2026-12-07): both are read.
    import os
    from gpulab import hopper_trace
    with hopper_trace._printed() as printed:
        print("@T through sys.stdout")
        os.write(1, b"@T through the descriptor\n")
    lines = printed.getvalue().splitlines()
    assert "@T through sys.stdout" in lines and "@T through the descriptor" in lines
