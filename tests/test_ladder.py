"""The ladder protocol: one Step base, one look-up, one check loop and table, one assert."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

import gpulab
from gpulab import CheckFailed, ladder
from gpulab import chapters


def test_step_numbers_have_one_form():
    assert ladder.number(7) == ladder.number("7") == ladder.number("07") == "07"
    assert ladder.number(12) == "12" and ladder.number("12h") == "12h" and ladder.number("E1") == "E1"
    for bad in (True, "", " ", 1.5, None):
        with pytest.raises(TypeError, match="step number"):
            ladder.number(bad)
    with pytest.raises(ValueError, match="not negative"):
        ladder.number(-1)


def test_a_step_normalises_its_number_and_validates_its_precision():
    step = ladder.Step(3, "chapter/03_x.cu", "what changed")
    assert (step.number, step.label, step.ordinal, step.dtype) == ("03", "03 what changed", 3, np.float32)
    assert ladder.Step("E1", "f.cu", "exercise", precision="fp16").dtype == np.float16
    with pytest.raises(ValueError, match="named rung"):
        ladder.Step("E1", "f.cu", "exercise").ordinal
    with pytest.raises(ValueError, match="precision must be one of"):
        ladder.Step(1, "f.cu", "t", precision="fp8")


def test_every_chapters_steps_are_ladder_steps_with_unique_labels():
    for chapter in chapters.chapters(with_workload=True):
        module = chapter.workload()
        steps = getattr(module, "STEPS", None)
        if steps is None:                 # multigpu has no kernel ladder
            continue
        assert all(isinstance(s, ladder.Step) for s in steps), chapter
        # a kernel exercise is a step of the ladder; hopper's exercises are functions (no EXERCISE)
        exercise = getattr(module, "EXERCISE", None)
        assert exercise is None or isinstance(exercise, ladder.Step), chapter
        labels = [s.label for s in steps]
        assert len(set(labels)) == len(labels), (chapter, labels)
        assert all(isinstance(s.number, str) for s in steps), chapter


def test_look_up_by_number_in_either_form():
    steps = [ladder.Step(1, "a.cu", "one"), ladder.Step(13, "b.cu", "large"), ladder.Step(13, "c.cu", "small")]
    assert ladder.find(steps, 1) is ladder.find(steps, "01") is steps[0]
    assert ladder.select(steps, "13") == steps[1:] and ladder.select(steps) == steps
    with pytest.raises(KeyError, match=r"steps \['01', '13'\]; none is number 2"):
        ladder.find(steps, 2)


def _compare(error: float):
    ref = np.arange(1.0, 101.0)
    return gpulab.compare(ref * (1 + error), ref, "fp32")


def test_one_check_loop_one_schema():
    steps = [ladder.Step(1, "a.cu", "good"), ladder.Step(2, "b.cu", "bad"), ladder.Step(3, "c.cu", "too big"),
             ladder.Step(4, "d.cu", "gpu only", gpu_only=True)]

    def check_one(step, be):
        for n in (5, 7):
            yield {"n": n}, _compare(1e-3 if step.number == "02" else 0.0)
    table = ladder.check_steps(steps, check_one, "cpu", skip=lambda s: "needs 200 KB" if s.number == "03" else None)
    assert list(table.columns) == ["step", "n", "rel_error", "tolerance", "unwritten", "status"]
    assert list(table["step"]) == ["01", "01", "02", "02", "03", "04"]
    assert list(table["status"]) == ["ok", "ok", "FAILED", "FAILED", "skipped: needs 200 KB",
                                     "skipped: GPU only: the CPU backend cannot run this kernel"]
    assert list(ladder.failures(table)) == [False, False, True, True, False, False]
    with pytest.raises(CheckFailed, match="disagree with the float64 reference") as info:
        gpulab.assert_ok(table)
    assert "b.cu" not in str(info.value) and "02" in str(info.value)
    ok = table[table["step"] != "02"]
    assert gpulab.assert_ok(ok) is ok          # skipped rows are not failures


def test_a_table_without_status_is_an_error_not_a_pass():
    with pytest.raises(KeyError, match="'status' column"):
        gpulab.assert_ok(pd.DataFrame({"step": ["01"], "passed": [False]}))
    with pytest.raises(ValueError, match="needs a reason"):
        ladder.skipped("")


def test_a_subclass_adds_fields_after_the_common_ones():
    @dataclasses.dataclass(frozen=True)
    class Launching(ladder.Step):
        kernel: str
        block: int = 256
    step = Launching(2, "f.cu", "title", "k", precision="fp16")
    assert (step.number, step.kernel, step.block, step.precision) == ("02", "k", 256, "fp16")
    assert dataclasses.replace(step, file="g.cu").number == "02"
