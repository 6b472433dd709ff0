"""The one recorder (gpulab.recorder): budget, check before time, skipped and problems tables,
writing the run, and the one ``benchmark_all`` signature every chapter is called with."""
from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pandas as pd
import pytest

from gpulab import __main__ as cli
from gpulab import device, profiler, recorder, runs
from gpulab.chapters import names, workload
from gpulab.check import check
from gpulab.errors import CheckFailed
from gpulab.recorder import Experiment, Recorder, Recording


class FakeClock:
    """``time.perf_counter`` that moves only when told, so budgets are tested without waiting."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(recorder.time, "perf_counter", fake)
    return fake


def _row(variant, size=10, median=1.0, experiment="ladder"):
    return {"experiment": experiment, "variant": variant, "size": size, "phase": "kernel", "median_ms": median,
            "q1_ms": median, "q3_ms": median, "min_ms": median, "max_ms": median, "repeats": 5, "flops": 1.0,
            "bytes": 1.0}


def _ladder(outputs):
    """An experiment timing each (name, output) only after checking output against ones."""
    def measure(rec, ctx):
        for name, out in outputs:
            if rec.checked(lambda: check(out, np.ones(4), name=name), variant=name, size=4):
                rec.add(_row(name, 4))
    return measure


def test_budget_spent_skips_the_optional_experiments_with_the_reason(clock):
    ran = []

    def slow(rec, ctx):
        ran.append("slow")
        clock.now += 50.0                       # this experiment uses 50 of the 30 s budget

    def record_name(name):
        def measure(rec, ctx):
            ran.append(name)
            rec.add(_row(name))
        return measure

    recording = Recording("demo", [Experiment("first", record_name("first")), Experiment("slow", slow),
                                   Experiment("sweep", record_name("sweep"), optional=True),
                                   Experiment("tables", record_name("tables"))], budget_s=30.0)
    lines = []
    rows, tables = recording(log=lambda text, **_: lines.append(text))
    assert ran == ["first", "slow", "tables"]             # the non-optional one after it still runs
    assert [r["variant"] for r in rows] == ["first", "tables"]
    problems = tables["problems"]
    assert problems.to_dict("records") == [{"experiment": "sweep",
                                            "error": "skipped: the run's time budget of 30 s was spent"}]
    assert any("sweep: skipped" in line and line.startswith("demo [") for line in lines)


def test_within_budget_nothing_is_skipped_and_no_problems_table(clock):
    recording = Recording("demo", [Experiment("a", lambda rec, ctx: rec.add(_row("a")), optional=True)],
                          budget_s=30.0)
    rows, tables = recording(log=lambda *a, **k: None)
    assert len(rows) == 1 and "problems" not in tables and "skipped" not in tables


def test_budget_argument_overrides_the_chapters_default(clock):
    def spend(rec, ctx):
        clock.now += 10.0
    recording = Recording("demo", [Experiment("spend", spend),
                                   Experiment("late", lambda rec, ctx: rec.add(_row("late")), optional=True)],
                          budget_s=30.0)
    rows, _ = recording(log=lambda *a, **k: None)
    assert [r["variant"] for r in rows] == ["late"]
    rows, tables = recording(budget_s=5.0, log=lambda *a, **k: None)
    assert rows == [] and "5 s" in tables["problems"]["error"].iloc[0]


def test_a_failed_check_is_a_failed_row_and_never_timed():
    good, bad, nan = np.ones(4, np.float32), np.array([1, 1, 2, 1], np.float32), np.full(4, np.nan, np.float32)
    recording = Recording("demo", [Experiment("ladder", _ladder([("good", good), ("bad", bad), ("unwritten", nan)]))],
                          skipped=("variant", "size", "reason"))
    rows, tables = recording(log=lambda *a, **k: None)
    assert [r["variant"] for r in rows] == ["good"]
    skipped = tables["skipped"]
    assert list(skipped.columns) == ["variant", "size", "reason"]
    assert list(skipped["variant"]) == ["bad", "unwritten"]
    assert skipped["reason"].str.startswith("FAILED: CheckFailed").all()


def test_checked_hands_back_the_checks_value_and_catches_a_crashing_check():
    rec = Recorder("demo", log=lambda *a, **k: None)
    ok = rec.checked(lambda: check(np.ones(3), np.ones(3)), variant="a")
    assert ok and ok.value.rel_error == 0.0 and ok.error == ""

    def crash():
        raise RuntimeError("an illegal memory access")
    failed = rec.checked(crash, variant="b")
    assert not failed and failed.error == "RuntimeError: an illegal memory access"
    assert rec.failed == [{"variant": "b", "error": "RuntimeError: an illegal memory access"}]
    assert rec.skipped == [{"variant": "b", "reason": "FAILED: RuntimeError: an illegal memory access"}]


def test_skipped_table_columns_and_when_it_is_written():
    declared = Recording("demo", [Experiment("a", lambda rec, ctx: None)], skipped=("variant", "size", "reason"))
    _, tables = declared(log=lambda *a, **k: None)
    assert list(tables["skipped"].columns) == ["variant", "size", "reason"] and tables["skipped"].empty
    undeclared = Recording("demo", [Experiment("a", lambda rec, ctx: None)])
    assert "skipped" not in undeclared(log=lambda *a, **k: None)[1]


def test_skipped_key_keeps_one_row_per_key_the_later_reason_wins():
    rec = Recorder("demo", skipped_key=("step", "batch"))
    rec.skip("not checked here", step=3, batch=32)
    rec.skip("not checked here", step=3, batch=64)
    rec.skip("too much shared memory", step=3, batch=32)
    _, tables = rec.result()
    assert tables["skipped"].to_dict("records") == [{"step": 3, "batch": 32, "reason": "too much shared memory"},
                                                    {"step": 3, "batch": 64, "reason": "not checked here"}]
    with pytest.raises(ValueError, match="needs a reason"):
        rec.skip("", step=1, batch=1)


def test_keep_going_lists_a_failing_experiment_and_goes_on_but_a_check_failure_stops(capsys):
    def broken(rec, ctx):
        raise ZeroDivisionError("division by zero")
    steps = [Experiment("broken", broken), Experiment("after", lambda rec, ctx: rec.add(_row("after")))]
    rows, tables = Recording("demo", steps, keep_going=True)(log=lambda *a, **k: None)
    assert [r["variant"] for r in rows] == ["after"]
    assert tables["problems"].to_dict("records") == [{"experiment": "broken",
                                                      "error": "ZeroDivisionError: division by zero"}]
    assert "ZeroDivisionError" in capsys.readouterr().err        # the traceback is printed
    with pytest.raises(ZeroDivisionError):                       # a run that does not keep going stops
        Recording("demo", steps)(log=lambda *a, **k: None)

    def raises_check(rec, ctx):
        raise CheckFailed("wrong")
    with pytest.raises(CheckFailed):
        Recording("demo", [Experiment("c", raises_check)], keep_going=True)(log=lambda *a, **k: None)


def test_problem_row_lists_a_failed_or_unstarted_experiment_in_the_skipped_table(clock, capsys):
    """A recording whose readers show one table of what is missing: no problems table, the
    failure and the part the budget left out are skipped rows with the recording's columns."""
    def broken(rec, ctx):
        clock.now += 50.0                      # and spends the 30 s budget
        raise ZeroDivisionError("division by zero")
    recording = Recording("demo", [Experiment("broken", broken),
                                   Experiment("late", lambda rec, ctx: rec.add(_row("late")), optional=True)],
                          skipped=("variant", "size", "reason"), budget_s=30.0, keep_going=True,
                          problem_row=lambda experiment: {"variant": experiment, "size": 0})
    rows, tables = recording(log=lambda *a, **k: None)
    assert rows == [] and "problems" not in tables
    assert tables["skipped"].to_dict("records") == [
        {"variant": "broken", "size": 0, "reason": "ZeroDivisionError: division by zero"},
        {"variant": "late", "size": 0, "reason": "skipped: the run's time budget of 30 s was spent"}]
    assert "ZeroDivisionError" in capsys.readouterr().err


def test_setup_result_reaches_every_experiment_and_side_tables_are_kept():
    seen = []

    def setup(rec):
        assert rec.repeats == 7 and rec.quick
        return {"x": 42}
    recording = Recording("demo", [Experiment("a", lambda rec, ctx: seen.append(ctx["x"])),
                                   Experiment("b", lambda rec, ctx: rec.table("resources", pd.DataFrame({"r": [1]})))],
                          setup=setup)
    _, tables = recording(repeats=7, quick=True, log=lambda *a, **k: None)
    assert seen == [42] and tables["resources"]["r"].tolist() == [1]
    rec = Recorder("demo")
    with pytest.raises(ValueError, match="writes the 'skipped' table itself"):
        rec.table("skipped", pd.DataFrame())


def test_bad_arguments_are_refused_clearly():
    with pytest.raises(ValueError, match="repeats is a positive number"):
        Recorder("demo", repeats=0)
    with pytest.raises(ValueError, match="budget_s is a positive number"):
        Recorder("demo", budget_s=-1)
    with pytest.raises(ValueError, match="experiments once each"):
        Recording("demo", [Experiment("a", print), Experiment("a", print)])


@pytest.fixture
def fake_gpu(monkeypatch):
    """recorder.record's GPU parts replaced: a monitor that watches nothing and a named GPU."""
    @contextlib.contextmanager
    def monitor():
        yield type("Monitor", (), {"summary": lambda self: {"samples": 0}})()
    meta = {"gpu": "Test GPU 1", "date": "2026-01-01T00:00:00", "driver": "1", "cuda_runtime": "1", "cupy": "1"}
    monkeypatch.setattr(recorder, "GpuMonitor", monitor)
    monkeypatch.setattr(recorder, "describe", lambda: dict(meta))


def test_record_writes_the_run_with_its_side_tables_through_save_run(tmp_path, fake_gpu):
    ones = np.ones(4, np.float32)

    def resources(rec, ctx):
        rec.table("resources", pd.DataFrame({"step": ["01"], "registers": [32]}))
    recording = Recording("demo", [Experiment("ladder", _ladder([("good", ones), ("bad", 2 * ones)])),
                                   Experiment("resources", resources)],
                          skipped=("variant", "size", "reason"))
    path, rows, failed = recorder.record("demo", recording, repeats=3, root=tmp_path, log=lambda *a, **k: None)
    assert (rows, failed) == (1, 1)
    run = runs.read_run(path)
    assert run.timings["variant"].tolist() == ["good"]
    assert sorted(run.tables) == ["resources", "skipped"]
    assert run.tables["resources"]["step"].tolist() == ["01"]          # text stays text
    assert run.tables["skipped"]["reason"].iloc[0].startswith("FAILED:")
    assert run.meta["gpu_state"] == {"samples": 0}


def test_a_smoke_run_is_never_recorded(tmp_path, fake_gpu, monkeypatch):
    from gpulab import timing
    monkeypatch.setenv(timing.SMOKE_ENV, "1")
    recording = Recording("demo", [Experiment("ladder", _ladder([("good", np.ones(4, np.float32))]))])
    with pytest.raises(RuntimeError, match="smoke run"):
        recorder.record("demo", recording, repeats=3, root=tmp_path, log=lambda *a, **k: None)
    assert not list(tmp_path.iterdir())


def test_a_recording_adds_meta_and_derives_from_its_rows(tmp_path, fake_gpu):
    """What a chapter says beyond the machine (add_meta) reaches the run's meta.json; the keys the
    recorder and save_run write are refused; ``finish`` sees every experiment's rows, once."""
    seen = []

    def provenance(rec):
        rec.add_meta(nvrtc="13.0", sources={"a.cu": "00ff"})

    def ratios(rows):
        seen.append(len(rows))
        best = min(row["median_ms"] for row in rows)
        return pd.DataFrame(rows).assign(vs_best=lambda t: best / t["median_ms"])
    recording = Recording("demo", [Experiment("a", lambda rec, ctx: rec.add(_row("x", median=2.0))),
                                   Experiment("b", lambda rec, ctx: rec.add(_row("y", median=4.0)))],
                          setup=provenance, finish=ratios)
    path, rows, failed = recorder.record("demo", recording, repeats=3, root=tmp_path, log=lambda *a, **k: None)
    run = runs.read_run(path)
    assert (rows, failed, seen) == (2, 0, [2])
    assert run.meta["nvrtc"] == "13.0" and run.meta["sources"] == {"a.cu": "00ff"}
    assert run.timings["vs_best"].tolist() == [1.0, 0.5]
    rows, tables = recording(repeats=3, log=lambda *a, **k: None)             # called as benchmark_all
    assert list(rows["variant"]) == ["x", "y"] and tables == {}
    for owned in ("gpu", "date", "tables", "gpu_state"):
        with pytest.raises(ValueError, match="writes"):
            Recorder("demo").add_meta(**{owned: "mine"})


def test_only_keeps_the_named_experiments_in_order():
    recording = Recording("demo", [Experiment(name, lambda rec, ctx, name=name: rec.add(_row(name)))
                                   for name in ("a", "b", "c")])
    rows, _ = recording.only("c", "a")(log=lambda *a, **k: None)
    assert [row["variant"] for row in rows] == ["a", "c"]
    with pytest.raises(ValueError, match="no experiment"):
        recording.only("d")


def test_the_command_line_calls_every_chapter_the_same_way(monkeypatch, tmp_path, capsys):
    calls = []

    def fake_record(chapter, benchmark_all, **options):
        calls.append((chapter, benchmark_all, options))
        return tmp_path / f"{chapter}.csv", 5, 1 if chapter == "lenet" else 0
    monkeypatch.setattr(device, "require_gpu", lambda purpose: None)
    monkeypatch.setattr(recorder, "record", fake_record)
    code = cli.main(["record", "measuring", "lenet", "--quick", "--budget-s", "60", "--out", str(tmp_path)])
    assert code == 1                                                   # lenet had a failed check
    assert [c[0] for c in calls] == ["measuring", "lenet"]
    for chapter, fn, options in calls:
        assert fn is workload(chapter).benchmark_all
        assert options == {"repeats": 100, "quick": True, "budget_s": 60.0, "root": tmp_path}
    assert "lenet: 1 check(s) FAILED" in capsys.readouterr().err


def test_every_chapter_is_a_recording():
    """Every chapter with a workload declares its recorded run as a Recording (no adapter is left)."""
    for name in names(with_workload=True):
        assert isinstance(workload(name).benchmark_all, Recording), name
    assert not hasattr(recorder, "benchmark_all_of")


def test_one_profiler_entry_point(capsys):
    assert profiler.driver("fcnet", "large", python="python") == ["python", "-m", "gpulab", "profile-driver",
                                                                  "fcnet", "large"]
    for chapter in ("fcnet", "lenet", "training", "hopper", "convpool", "alexnet"):
        assert callable(workload(chapter).profile_driver), chapter
    assert cli.run(["profile-driver", "measuring"]) == 2
    assert "chapter 'measuring' has no profile_driver" in capsys.readouterr().err
    assert cli.run(["profile-driver", "basics"]) == 2
    assert "has no workload" in capsys.readouterr().err


def _variant(label, out, *, fails=False):
    def check_it():
        if fails:
            raise CheckFailed(f"{label}: relative error 1.0")
        return {"rel_error": 0.0}
    return recorder.Variant(label, lambda: out.append(label), check_it,
                            row=lambda t, checked, medians: {**t.row("ladder", label, 8), **checked,
                                                             "rounds": len(medians)},
                            where={"size": 8})


def test_the_ladder_loop_checks_then_times_in_interleaved_rounds_with_the_recordings_budget(monkeypatch):
    """Recorder.ladder: every variant checked first (a failure a FAILED row, never timed), then
    those that passed timed round after round in turn, each under the recording's one budget."""
    from gpulab import timing
    calls, launched = [], []

    def fake_benchmark(fn, *, repeats, budget_ms, **options):
        fn()
        calls.append((launched[-1], budget_ms, options))
        return timing.Timing([1.0, 2.0, float(len(calls))])
    monkeypatch.setattr(timing, "benchmark", fake_benchmark)
    rec = Recording("demo", [Experiment("x", lambda rec, ctx: None)], variant_budget_ms=250.0).recorder(
        log=lambda *a, **k: None)
    rows = rec.ladder([_variant("a", launched), _variant("b", launched, fails=True), _variant("c", launched)],
                      rounds=2, min_repeats=10)
    assert [c[0] for c in calls] == ["a", "c", "a", "c"]                 # interleaved, b never timed
    assert {c[1] for c in calls} == {250.0} and all(c[2] == {"min_repeats": 10} for c in calls)
    assert [r["variant"] for r in rows] == ["a", "c"] == [r["variant"] for r in rec.rows]
    assert [r["repeats"] for r in rows] == [6, 6] and [r["rounds"] for r in rows] == [2, 2]   # both rounds' samples
    assert [(s["variant"], s["size"]) for s in rec.skipped] == [("b", 8)]
    assert rec.skipped[0]["reason"].startswith("FAILED: CheckFailed: b")


def test_a_variant_with_a_timer_of_its_own_is_timed_by_it(monkeypatch):
    """A variant replayed from a CUDA graph (lenet's steps 12, 12h and 13g) names its timer; the
    others keep the lab's loop, each under the recording's budget."""
    from gpulab import timing
    timed = []

    def timer(name):
        def time_it(fn, *, repeats, budget_ms, **options):
            timed.append((name, budget_ms))
            return timing.Timing([1.0, 2.0, 3.0])
        return time_it
    monkeypatch.setattr(timing, "benchmark", timer("benchmark"))
    rec = Recording("demo", [Experiment("x", lambda rec, ctx: None)], variant_budget_ms=250.0).recorder(
        log=lambda *a, **k: None)
    graph = dataclasses.replace(_variant("g", []), timer=timer("graph"))
    rec.ladder([_variant("a", []), graph])
    assert timed == [("benchmark", 250.0), ("graph", 250.0)]


def test_the_vendor_paths_are_timed_with_the_same_budget_and_their_skips_listed(monkeypatch):
    from gpulab import baselines
    seen = {}

    def measure(paths, **options):
        seen.update(options)
        return baselines.Measured([{"variant": "cuBLAS", "median_ms": 1.0}],
                                  [{"variant": "cuBLAS bf16", "reason": "no bf16 path"}])
    monkeypatch.setattr(baselines, "measure", measure)
    rec = Recorder("demo", log=lambda *a, **k: None, variant_budget_ms=600.0, repeats=30)
    rec.vendor([], reference=None, experiment="ladder", size=1, skipped_as={"step": "vendor"})
    assert (seen["budget_ms"], seen["repeats"], seen["on_failure"]) == (600.0, 30, "skip")
    assert rec.rows == [{"variant": "cuBLAS", "median_ms": 1.0}]
    assert rec.skipped == [{"step": "vendor", "variant": "cuBLAS bf16", "reason": "no bf16 path"}]
    rec.vendor([], reference=None, experiment="cold", size=1, budget_ms=500)     # a budget of its own; skips unlisted
    assert seen["budget_ms"] == 500 and len(rec.skipped) == 1
