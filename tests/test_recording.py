"""The recording path without a GPU: ``python -m gpulab record CHAPTER --quick`` with the GPU's
measurements stubbed (tests/recording_stubs.py) writes the files, columns and rows it wrote
before the chapters' records were declared as experiments (gpulab.recorder): the fixtures in
tests/fixtures/recording/ were written from main before that change, by the same stubs (hopper's
from main's tools/hopper_gpu_run.py, which recorded that chapter until it became a Recording;
convpool's from its benchmark_all of main at df938ce, before it became one; alexnet's from its
benchmark_all of main at 81773b5, before it became one). A
check that fails leaves its step untimed, as a FAILED row, and the command exits 1. The records
of measuring, hopper, convpool and alexnet are each made once, with a step failing: everything
but that step's rows is compared with the fixture, and that step's rows are the failure's.

The stubs run each chapter's kernels, and check them, at sizes and batches of their own, as small
as still lets every experiment of the record run (the CPU backend's pace); they are the sizes the
fixtures' rows name, not the GPU record's.

After a change to what a chapter records that is meant, rewrite its fixture:
``PYTHONPATH=. python tests/test_recording.py CHAPTER``.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from gpulab import paths
from gpulab.workloads.hopper import steps as hopper_steps

STUBS = Path(__file__).with_name("recording_stubs.py")
FIXTURES = Path(__file__).parent / "fixtures" / "recording"
#: The columns that say which row is which (times, errors and accuracies are left out: the
#: CPU backend's float sums are not bit-reproducible across runs).
LABELS = ("experiment", "variant", "size", "phase", "step", "layer", "batch", "case", "mode", "memory", "chunks",
          "library", "precision", "reason", "error", "passed", "kernel", "change", "note", "epoch", "lane")


def record(chapter: str, out: Path, *options: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(paths.REPO)}
    env.pop("GPULAB_BACKEND", None)
    return subprocess.run([sys.executable, str(STUBS), chapter, str(out), *options], capture_output=True, text=True,
                          cwd=paths.REPO, env=env, timeout=1500)


def schema(out: Path) -> dict:
    """Every file the run wrote: its columns, and each row's labels (see :data:`LABELS`)."""
    folders = [p for p in out.iterdir() if p.is_dir()]
    assert len(folders) == 1, f"expected one GPU folder under {out}, found {folders}"
    found = {}
    for path in sorted(folders[0].iterdir()):
        if path.suffix == ".json":
            meta = json.loads(path.read_text())
            found[path.name] = {"tables": meta["tables"], "string_columns": meta["string_columns"]}
            continue
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
        labels = [c for c in table.columns if c in LABELS]
        found[path.name] = {"columns": list(table.columns), "rows": table[labels].values.tolist()}
    return found


def run_or_fail(chapter: str, out: Path, *options: str, code: int = 0) -> dict:
    done = record(chapter, out, *options)
    assert done.returncode == code, f"exit {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return schema(out)


def as_before(found: dict, expected: dict) -> None:
    assert sorted(found) == sorted(expected)
    for name in expected:
        assert found[name] == expected[name], name


def adds_the_skipped_table(found: dict, expected: dict, chapter: str) -> None:
    """The run's metadata are the fixture's (a run with nothing skipped), and list the skipped table too."""
    name = f"{chapter}.meta.json"
    assert found[name]["tables"] == sorted([*expected[name]["tables"], "skipped"])
    assert {k: v for k, v in found[name]["string_columns"].items() if k != "skipped"} == \
        expected[name]["string_columns"]


def before_the_queued_loop(expected: dict, chapter: str) -> dict:
    """What a record wrote before the queued timing loop (issue 37): no ``queued`` column, no
    cross-check columns or table; a committed run of that time is compared with this."""
    from gpulab.timing import CROSSCHECK_COLUMNS
    added = {"queued", *CROSSCHECK_COLUMNS}
    out = {}
    for name, found in expected.items():
        if name == f"{chapter}.crosscheck.csv":
            continue
        if name.endswith(".meta.json"):
            out[name] = {"tables": [t for t in found["tables"] if t != "crosscheck"],
                         "string_columns": {t: [c for c in cols if c not in added]
                                            for t, cols in found["string_columns"].items() if t != "crosscheck"}}
        else:
            out[name] = {**found, "columns": [c for c in found["columns"] if c not in added]}
    return out


@pytest.mark.parametrize("chapter", [pytest.param("fcnet", marks=pytest.mark.slow),
                                     pytest.param("lenet", marks=pytest.mark.slow), "multigpu"])
def test_the_record_writes_what_it_wrote_before(chapter, tmp_path):
    as_before(run_or_fail(chapter, tmp_path), json.loads((FIXTURES / f"{chapter}.json").read_text()))


def test_the_training_record_writes_what_it_wrote_before_and_lists_what_failed_or_was_not_started(tmp_path):
    """As before (the fixture). The stubs crash step 5's timing and the breakdown, and spend the
    330 s budget in the timeline: the run goes on, and its problems table says what is missing and why."""
    found = run_or_fail("training", tmp_path)
    as_before(found, json.loads((FIXTURES / "training.json").read_text()))
    assert found["training.problems.csv"]["rows"] == [
        ["ladder 5", "RuntimeError: step 5's timing crashed"], ["breakdown", "RuntimeError: the breakdown crashed"],
        ["ceilings", "skipped: the run's time budget of 330 s was spent"],
        ["sweep", "skipped: the run's time budget of 330 s was spent"],
        ["profile", "skipped: the run's time budget of 330 s was spent"]]


def test_a_failed_check_is_not_timed_training(tmp_path):
    found = run_or_fail("training", tmp_path, "--fail", "04", code=1)
    checks = pd.read_csv(next(tmp_path.glob("*/training.checks.csv")))
    assert checks.loc[checks["step"] == 4, "passed"].tolist() == [False]
    assert checks.loc[checks["step"] != 4, "passed"].all()
    timed = {row[1] for row in found["training.csv"]["rows"]}          # variant
    assert not any(v.startswith("04 ") for v in timed) and any(v.startswith("03 ") for v in timed)
    failed = [row for row in found["training.skipped.csv"]["rows"] if row[-1].startswith("FAILED: CheckFailed")]
    assert [row[0] for row in failed] == ["4"]


@pytest.mark.slow
def test_the_measuring_record_writes_what_it_wrote_before_and_a_failed_check_is_not_timed(tmp_path):
    """One record, step 02's output made wrong: as before (the fixture) but for step 02, whose
    rows are left out of the timings and are FAILED rows of the skipped table; the run exits 1."""
    found = run_or_fail("measuring", tmp_path, "--fail", "02", code=1)
    fixture = json.loads((FIXTURES / "measuring.json").read_text())
    assert sorted(found) == sorted([*fixture, "measuring.skipped.csv"])
    adds_the_skipped_table(found, fixture, "measuring")
    expected = fixture["measuring.csv"]
    float4 = "float4: 16-byte accesses"
    assert found["measuring.csv"]["columns"] == expected["columns"]
    assert found["measuring.csv"]["rows"] == [row for row in expected["rows"] if row[1] != float4]
    skipped = found["measuring.skipped.csv"]
    # (Through Recorder.ladder, as every ported chapter's, the case's columns come first.)
    assert skipped["columns"] == ["size", "variant", "reason"]
    assert [row[:2] for row in skipped["rows"]] == [["4096", float4], ["16384", float4], ["65536", float4]]
    assert all(row[2].startswith("FAILED: CheckFailed: saxpy_float4 n=") for row in skipped["rows"])


@pytest.mark.slow
def test_the_hopper_record_writes_what_it_wrote_before_and_the_files_of_the_committed_runs(tmp_path):
    """One record, step 03's output made wrong at the timed size. As main's
    tools/hopper_gpu_run.py wrote (the fixture): every file, its columns and every row of every
    other step, in order. Step 03: its row is left out of the timings and is the FAILED row of the
    skipped table, and the run exits 1. And the files, their columns, the text columns and the
    metadata the chapter adds (its kernel sources' digests, NVRTC's and PyTorch's versions, the
    profile's note) of the runs the book reads, on each GPU."""
    expected = json.loads((FIXTURES / "hopper.json").read_text())
    found = run_or_fail("hopper", tmp_path, "--fail", "03", code=1)
    assert sorted(found) == sorted([*expected, "hopper.skipped.csv"])
    # Added since the fixture: the FP8 rung (its steps' builds and checks, experiment hopper_gemm_fp8
    # timed beside cuBLASLt's FP8 GEMM, and its row of the cross-check). The rest is as before.
    fp8_rows = {name: [row for row in found[name]["rows"] if any(str(v).startswith(("fp8", "hopper_gemm_fp8"))
                                                                  for v in row)]
                for name in found if "rows" in found[name]}
    for name in set(expected) - {"hopper.csv", "hopper.meta.json"}:
        assert found[name]["columns"] == expected[name]["columns"], name
        assert [row for row in found[name]["rows"] if row not in fp8_rows[name]] == expected[name]["rows"], name
    assert [row[:2] for row in fp8_rows["hopper.checks.csv"]] == [["09", "fp8 e4m3 x e4m3"], ["09", "fp8 e4m3 x e5m2"],
                                                                 ["10", "fp8 e4m3 x e4m3"]]
    assert len(fp8_rows["hopper.resources.csv"]) == 3
    adds_the_skipped_table(found, expected, "hopper")
    labels = [c for c in expected["hopper.csv"]["columns"] if c in LABELS]
    variant = labels.index("variant")
    assert found["hopper.csv"]["columns"] == expected["hopper.csv"]["columns"]
    assert [row for row in found["hopper.csv"]["rows"] if row not in fp8_rows["hopper.csv"]] == \
        [row for row in expected["hopper.csv"]["rows"] if not row[variant].startswith("step 03 ")]
    assert [row[variant] for row in fp8_rows["hopper.csv"]] == [
        "step 09 FP8 (e4m3) operands with per-tensor scales", "step 10 FP8, partial sums promoted to float every slice",
        "cuBLASLt (torch._scaled_mm) fp8 fast accumulation", "cuBLASLt (torch._scaled_mm) fp8"]
    skipped = found["hopper.skipped.csv"]
    assert skipped["columns"] == ["experiment", "size", "precision", "variant", "reason"]
    assert [row[:3] for row in skipped["rows"]] == [["hopper_gemm", "136", "fp16"]]
    assert skipped["rows"][0][3].startswith("step 03 ") and skipped["rows"][0][4].startswith("FAILED: CheckFailed")

    written = next(p for p in tmp_path.iterdir() if p.is_dir())
    ours = json.loads((written / "hopper.meta.json").read_text())
    for gpu in ("nvidia-h100-80gb-hbm3", "nvidia-h200"):
        committed = paths.RUNS / gpu
        meta = json.loads((committed / "hopper.meta.json").read_text())
        want = before_the_queued_loop(expected, "hopper") if "conditions" not in meta else expected
        assert sorted(p.name for p in committed.glob("hopper.*")) == sorted(want), gpu
        for path in committed.glob("hopper.*.csv"):
            assert list(pd.read_csv(path).columns) == want[path.name]["columns"], (gpu, path.name)
        assert want["hopper.meta.json"] == {"tables": meta["tables"], "string_columns": meta["string_columns"]}, gpu
        added = {"kernel_sources_sha256", "nvrtc", "torch", "profile_note"}
        assert added <= set(ours) and added <= set(meta), gpu
        # a run recorded before the FP8 rung was timed names its files but the FP8 steps'
        fp8_files = {f"kernels/{step.file}" for step in hopper_steps.FP8_STEPS}
        assert ours["kernel_sources_sha256"].keys() - fp8_files == meta["kernel_sources_sha256"].keys() - fp8_files, gpu


@pytest.mark.slow
def test_the_convpool_record_writes_what_it_wrote_before_and_a_failed_check_is_not_timed(tmp_path):
    """One record, step 06's output made wrong at N = 1 and 2. As before (the fixture): every file,
    its columns and every row of every other step, in order. Step 06: its rows are left out of the
    timed table and are FAILED rows of the skipped table, its checks rows say passed False, and
    the run exits 1."""
    found = run_or_fail("convpool", tmp_path, "--fail", "06", code=1)
    expected = json.loads((FIXTURES / "convpool.json").read_text())
    assert sorted(found) == sorted(expected)
    for name in set(expected) - {"convpool.csv", "convpool.checks.csv", "convpool.skipped.csv"}:
        assert found[name] == expected[name], name
    for name in ("convpool.csv", "convpool.checks.csv", "convpool.skipped.csv"):
        assert found[name]["columns"] == expected[name]["columns"], name
    variant = [c for c in expected["convpool.csv"]["columns"] if c in LABELS].index("variant")
    assert found["convpool.csv"]["rows"] == [row for row in expected["convpool.csv"]["rows"]
                                             if not row[variant].startswith("06 ")]
    # checks: step, size, precision, passed
    checks = found["convpool.checks.csv"]["rows"]
    assert [r for r in checks if r[0] != "06"] == [r for r in expected["convpool.checks.csv"]["rows"] if r[0] != "06"]
    assert [r for r in checks if r[0] == "06"] == [["06", "1", "fp32", "False"], ["06", "2", "fp32", "False"]]
    # skipped: variant, library, precision, size, reason
    skipped = found["convpool.skipped.csv"]["rows"]
    failed = [row for row in skipped if row[-1].startswith("FAILED: CheckFailed")]
    assert [(row[0][:3], row[2], row[3]) for row in failed] == [("06 ", "fp32", "1"), ("06 ", "fp32", "2")]
    assert [row for row in skipped if row not in failed] == expected["convpool.skipped.csv"]["rows"]


#: A skip whose reason is the record's estimate of a run's time: the stubs' clock counts timed
#: calls, so a step left untimed moves the estimates of what follows it.
_ESTIMATE = re.compile(r"^about \d+ s per run: ")


@pytest.mark.slow
def test_the_alexnet_record_writes_what_it_wrote_before_and_a_failed_check_is_not_timed(tmp_path):
    """One record (the chapter's is the longest), step 14's output made wrong at every
    layer and batch. As before (the fixture): every file, its columns and every row of every
    other step, in order. Step 14: its rows (ladder, cold, copies, scaling) are left out, it is a
    FAILED row of the skipped table at each layer and batch, which its checks rows say too, and
    the run exits 1."""
    found = run_or_fail("alexnet", tmp_path, "--fail", "14", code=1)
    expected = json.loads((FIXTURES / "alexnet.json").read_text())
    assert sorted(found) == sorted(expected)
    for name in expected:
        assert found[name].keys() == expected[name].keys() and found[name].get("columns") == \
            expected[name].get("columns"), name
    for name in set(expected) - {"alexnet.csv", "alexnet.checks.csv", "alexnet.skipped.csv"}:
        assert found[name] == expected[name], name
    variant = [c for c in expected["alexnet.csv"]["columns"] if c in LABELS].index("variant")
    assert found["alexnet.csv"]["rows"] == [row for row in expected["alexnet.csv"]["rows"]
                                            if not row[variant].startswith("14 ")]
    # checks: step, layer, size, passed
    assert [r for r in found["alexnet.checks.csv"]["rows"] if r[0] != "14"] == \
        [r for r in expected["alexnet.checks.csv"]["rows"] if r[0] != "14"]
    failed_checks = [r for r in found["alexnet.checks.csv"]["rows"] if r[0] == "14"]
    assert [r[1:] for r in failed_checks] == [[str(layer), str(N), "False"] for layer in range(1, 6) for N in (1, 2)]
    # skipped: step, layer, size, reason
    skipped = found["alexnet.skipped.csv"]["rows"]
    failed = [row[:3] for row in skipped if row[3].startswith("FAILED: CheckFailed")]
    assert failed == [["14", str(layer), str(N)] for layer in range(1, 6) for N in (1, 2)]
    as_before = lambda rows: [[*row[:3], _ESTIMATE.sub("about ? s per run: ", row[3])] for row in rows]  # noqa: E731
    assert as_before(row for row in skipped if not row[3].startswith("FAILED")) == \
        as_before(row for row in expected["alexnet.skipped.csv"]["rows"] if row[0] != "14")


def test_the_multigpu_record_refuses_a_run_whose_checks_failed(tmp_path):
    done = record("multigpu", tmp_path, "--fail", "checks")
    assert done.returncode == 2 and "the multi-GPU steps failed their checks" in done.stderr, done.stderr[-2000:]
    assert not list(tmp_path.rglob("multigpu.*"))


def test_the_multigpu_record_keeps_its_measurements_when_ddp_fails(tmp_path):
    """PyTorch DDP's processes fail: the lab's own rows are kept and the problems table says why."""
    found = run_or_fail("multigpu", tmp_path, "--fail", "ddp")
    expected = json.loads((FIXTURES / "multigpu.json").read_text())
    assert found["multigpu.csv"]["rows"] == [row for row in expected["multigpu.csv"]["rows"] if row[0] != "ddp"]
    assert found["multigpu.problems.csv"]["rows"] == [["ddp", "GpulabError: DDP's processes did not start"]]


if __name__ == "__main__":          # rewrite a chapter's fixture from this checkout's record
    import tempfile
    for chapter in sys.argv[1:]:
        with tempfile.TemporaryDirectory() as tmp:
            FIXTURES.mkdir(parents=True, exist_ok=True)
            (FIXTURES / f"{chapter}.json").write_text(json.dumps(run_or_fail(chapter, Path(tmp)), indent=1) + "\n")
        print(f"wrote {FIXTURES / chapter}.json")
