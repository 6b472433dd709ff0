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
        ladder.Step(1, "f.cu", "t", precision="fp4")


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


# ------------------------------------------------------------------ cases, launchers, the chapter
@dataclasses.dataclass(frozen=True)
class Doubled(ladder.Case):
    """y = 2 x: the smallest case (its launchers below are NumPy, on the CPU backend's arrays)."""
    n: int
    output_name = "y"

    @property
    def columns(self):
        return {"n": self.n}

    def inputs(self, seed, precision="fp32"):
        return {"x": np.random.default_rng(seed).uniform(-1, 1, self.n).astype(np.float32)}

    def reference(self, inputs, precision="fp32"):
        return 2.0 * inputs["x"].astype(np.float64)

    def output(self, precision="fp32"):
        return (self.n,), np.float32


@dataclasses.dataclass(frozen=True)
class Writes(ladder.Launcher):
    """Writes ``factor`` x into y, the first ``skip`` elements left as they were; needs ``shared``."""
    factor: float = 2.0
    skip: int = 0
    capability: int = 0

    def needs(self, step):
        return ladder.Needs(shared_bytes=1024, capability=self.capability, because="a made-up instruction")

    def bind(self, step, case, arrays, backend):
        def launch():
            arrays["y"][self.skip:] = self.factor * arrays["x"][self.skip:]
        return launch


class TooBig(Writes):
    def unfit(self, step, backend):
        return "needs 200 KB of shared memory"


def _chapter(**extra):
    steps = [ladder.Step(1, "a.cu", "right", launcher=Writes()),
             ladder.Step(2, "b.cu", "wrong", launcher=Writes(factor=2.5)),
             ladder.Step(3, "c.cu", "forgets one", launcher=Writes(skip=1)),
             ladder.Step(4, "d.cu", "too big", launcher=TooBig()),
             ladder.Step(5, "e.cu", "gpu only", gpu_only=True, launcher=Writes()),
             ladder.Step(6, "f.cu", "other kernel", launcher=Writes())]
    return ladder.Chapter("demo", "Doubling", steps, [Doubled(5), Doubled(7)],
                          cases=lambda sizes: [Doubled(n) for n in sizes], **extra)


def test_the_one_check_runs_every_step_on_every_case_through_its_launcher():
    table = ladder.check(_chapter(), backend="cpu")
    assert list(table.columns) == ["step", "n", "rel_error", "tolerance", "unwritten", "status"]
    assert list(table["step"]) == ["01", "01", "02", "02", "03", "03", "04", "05", "06", "06"]
    assert list(table["status"]) == ["ok", "ok", "FAILED", "FAILED", "FAILED", "FAILED",
                                     "skipped: needs 200 KB of shared memory",
                                     "skipped: GPU only: the CPU backend cannot run this kernel", "ok", "ok"]
    assert list(table.loc[table["step"] == "03", "unwritten"]) == [1, 1]     # the output was poisoned
    spec = _chapter().check("cpu", steps=[_chapter().step(1)], sizes=(3,))
    assert list(spec["n"]) == [3] and (spec["status"] == "ok").all()


@dataclasses.dataclass(frozen=True)
class Halved(Doubled):
    """Doubled, or halved where the step's family says so: a case whose output depends on the step."""
    half: bool = False

    def for_step(self, step):
        return dataclasses.replace(self, half=step.launcher.factor == 0.5)

    def reference(self, inputs, precision="fp32"):
        return (0.5 if self.half else 2.0) * inputs["x"].astype(np.float64)


def test_a_case_is_checked_as_the_step_computes_it():
    steps = [ladder.Step(1, "a.cu", "doubles", launcher=Writes()), ladder.Step(2, "b.cu", "halves",
                                                                              launcher=Writes(factor=0.5))]
    table = ladder.check(ladder.Chapter("halves", "t", steps, [Halved(3)]), backend="cpu")
    assert list(table["status"]) == ["ok", "ok"]


@dataclasses.dataclass(frozen=True)
class Stepped(Doubled):
    """A step that writes two outputs and updates its input in place: y = 2 x, z = x + 1, x *= 3;
    one check row per quantity."""
    updated = ("x",)

    def outputs(self, precision="fp32"):
        return {"y": ((self.n,), np.float32), "z": ((self.n,), np.float32)}

    def comparisons(self, step, inputs, arrays):
        x = inputs["x"].astype(np.float64)
        want = {"y": 2 * x, "z": x + 1, "update of x": 2 * x}
        got = {"y": arrays["y"], "z": arrays["z"], "update of x": arrays["x"] - inputs["x"]}
        return [({"n": self.n, "quantity": name}, gpulab.compare(got[name], want[name], step.precision))
                for name in want]


@dataclasses.dataclass(frozen=True)
class Steps(ladder.Launcher):
    forgets_z: bool = False

    def bind(self, step, case, arrays, backend):
        def launch():
            arrays["y"][:] = 2 * arrays["x"]
            arrays["z"][1 if self.forgets_z else 0:] = arrays["x"][1 if self.forgets_z else 0:] + 1
            arrays["x"] *= 3
        return launch


def test_a_case_with_several_outputs_and_an_update_in_place_has_a_row_per_quantity():
    steps = [ladder.Step(1, "a.cu", "right", launcher=Steps()), ladder.Step(2, "b.cu", "forgets", launcher=Steps(True))]
    table = ladder.check(ladder.Chapter("sgd", "t", steps, [Stepped(4)]), backend="cpu")
    assert list(table["quantity"]) == ["y", "z", "update of x"] * 2
    assert list(table["status"]) == ["ok", "ok", "ok", "ok", "FAILED", "ok"]
    assert list(table["unwritten"]) == [0, 0, 0, 0, 1, 0]          # every output was poisoned
    case = Stepped(4)
    inputs = case.inputs(0)
    arrays = ladder.run_all(steps[0], case, inputs, "cpu")
    assert sorted(arrays) == ["x", "y", "z"] and np.allclose(arrays["x"], 3 * inputs["x"])
    assert np.array_equal(ladder.run(steps[0], case, inputs, "cpu"), arrays["y"])     # output_name's
    with pytest.raises(TypeError, match="compares 3 quantities: ladder.case_checks lists them"):
        ladder.check_case(steps[0], case, 0, "cpu")
    assert len(ladder.case_checks(steps[0], case, 0, "cpu")) == 3


def test_a_check_s_inputs_come_from_its_seed():
    chapter = _chapter(seed=4)
    first, again = (ladder.check(chapter, [chapter.step(2)], backend="cpu")["rel_error"] for _ in range(2))
    assert list(first) == list(again)            # the chapter's seed: the same inputs each check
    case = Doubled(6)
    assert np.array_equal(case.inputs(4)["x"], case.inputs(4)["x"])
    assert not np.array_equal(case.inputs(None)["x"], case.inputs(None)["x"])


def test_run_and_bind_refuse_a_step_the_backend_cannot_run():
    chapter = _chapter()
    case = Doubled(4)
    out = ladder.run(chapter.step(3), case, case.inputs(0), "cpu")
    assert np.isnan(out[0]) and np.isfinite(out[1:]).all()
    with pytest.raises(NotImplementedError, match="step 04 .* cannot run here: needs 200 KB"):
        ladder.run(chapter.step(4), case, case.inputs(0), "cpu")
    with pytest.raises(TypeError, match="has no launcher"):
        ladder.run(ladder.Step(9, "g.cu", "no family"), case, case.inputs(0), "cpu")
    # a family's compute capability is asked of a GPU only: the CPU backend emulates the kernels
    assert Writes(capability=90).unfit(chapter.step(1), gpulab.get_backend("cpu")) is None


def test_a_chapter_is_one_object_known_by_its_name():
    chapter = _chapter(exercises=[ladder.Step(16, "x.cu", "exercise", launcher=Writes())])
    assert chapter.step("01") is chapter.step(1) is chapter.steps[0]
    assert chapter.step(16).title == "exercise"          # an exercise's step is found by its number too
    assert chapter == "demo" and "demo" == chapter and str(chapter) == "demo" and chapter != "fcnet"
    assert pd.Series(["demo", "fcnet"]).eq(chapter).tolist() == [True, False]
    with pytest.raises(KeyError, match="none is number 7"):
        chapter.step(7)
    with pytest.raises(TypeError, match="takes no case keywords"):
        ladder.Chapter("x", "t", chapter.steps[:1], [Doubled(1)]).check("cpu", sizes=(1,))
    twice = [ladder.Step(13, "a.cu", "large", launcher=Writes()), ladder.Step(13, "b.cu", "small", launcher=Writes())]
    both = ladder.Chapter("y", "t", twice, [Doubled(1)])
    assert both.rung(13) == twice
    with pytest.raises(KeyError, match=r"CHAPTER.rung\('13'\) lists them"):
        both.step(13)
    with pytest.raises(ValueError, match="no launcher"):
        ladder.Chapter("z", "t", [ladder.Step(1, "a.cu", "bare")], [Doubled(1)])


#: Every chapter with a workload, each one CHAPTER on cases and launchers (basics' puzzles too:
#: gpulab.puzzles.CHAPTER, tests/test_basics.py).
PORTED = ("fcnet", "hopper", "alexnet", "measuring", "convpool", "lenet", "training", "multigpu")


@pytest.mark.parametrize("name", PORTED)
def test_a_ported_chapter_exports_one_chapter_every_consumer_reads(name):
    module = chapters.workload(name)
    chapter = module.CHAPTER
    assert isinstance(chapter, ladder.Chapter) and chapter == name and module.benchmark_all is chapter.recording
    assert all(isinstance(s.launcher, ladder.Launcher) for s in [*chapter.steps, *chapter.exercises])
    assert all(isinstance(c, ladder.Case) for c in chapter.check_cases)
    assert not hasattr(module, "check_steps") and not hasattr(module, "make_launch")
    numbers = {s.number for s in chapter.steps}
    assert {ladder.number(str(key).split()[0]) for key in chapter.predicted} <= numbers   # "07 bf16": step 07


def test_a_cell_that_only_checks_a_ported_chapters_steps_is_a_kernel_check():
    # The profile runs (tests/notebook_on_profile.py, kernel_checks=False) leave such cells out:
    # after the port a chapter's cells call CHAPTER.check, not check_steps.
    from notebook_on_profile import is_kernel_check
    assert is_kernel_check('gpulab.assert_ok(fcnet.CHAPTER.check(backend, steps=[fcnet.CHAPTER.step("16")]))')
    assert is_kernel_check("gpulab.assert_ok(lenet.check_steps(backend))")
    assert not is_kernel_check("run = gpulab.load_run('fcnet')\nviews.ladder_figure(run)")
