"""gpulab.predictions: reading each ladder step's prediction from its kernel file, the verdict rules,
and every chapter's declared claims against its recorded runs."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpulab import predictions as p
from gpulab.runs import load_run

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------- the chapters' ladders
def _ladders():
    from importlib import import_module
    from gpulab.workloads import alexnet, fcnet, hopper, measuring
    convpool_steps = import_module("gpulab.workloads.convpool.steps")
    lenet_steps = import_module("gpulab.workloads.lenet.steps")
    training_steps = import_module("gpulab.workloads.training.steps")
    hopper_steps = import_module("gpulab.workloads.hopper.steps")
    return {
        "training": ([(s.ordinal, s.title, s.file) for s in training_steps.STEPS], training_steps.PREDICTED),
        "lenet": ([(s.number, s.title, s.file) for s in lenet_steps.STEPS if not s.graph], lenet_steps.PREDICTED),
        "convpool": ([(s.number, s.title, s.file) for s in convpool_steps.STEPS], convpool_steps.PREDICTED),
        "fcnet": (p.ladder_steps(fcnet.CHAPTER.steps, key=lambda s: s.ordinal), fcnet.CHAPTER.predicted),
        "measuring": ([(str(i), s.title, s.file) for i, s in enumerate(measuring.STEPS, 1)], measuring.PREDICTED),
        "alexnet": ([(s.number, s.title, s.file) for s in alexnet.STEPS], alexnet.PREDICTED),
        "hopper": (hopper_steps.prediction_steps(), hopper.CHAPTER.predicted),   # the ladder, then step 7 in bf16, tf32
    }


def _tables(chapter: str, run):
    from gpulab.workloads import alexnet, fcnet, measuring
    from gpulab.workloads.convpool import views as convpool_views
    from gpulab.workloads.lenet import views as lenet_views
    from gpulab.workloads.training import views as training_views
    from gpulab.workloads import hopper
    return {"hopper": lambda: hopper.CHAPTER.views.prediction_table(run),
            "training": lambda: training_views.prediction_table(run),
            "lenet": lambda: lenet_views.prediction_table(run.experiment("ladder")),
            "convpool": lambda: convpool_views.prediction_table(run, 1),
            "fcnet": lambda: fcnet.CHAPTER.views.prediction_table(run, "large"),
            "measuring": lambda: measuring.prediction_table(run),
            "alexnet": lambda: alexnet.prediction_table(run)}[chapter]()


CHAPTERS = list(_ladders())


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_ladder_step_has_a_prediction_or_says_so(chapter):
    steps, expected = _ladders()[chapter]
    for key, _, file in steps:
        path = p.kernel_path(file)
        assert path.exists(), f"{chapter} step {key}: no kernel file {path}"
        text = p.prediction_text(path)
        if text is None:
            # Only a first step (the baseline) may lack one, and it must be declared unjudged.
            assert str(key).lstrip("0") == "1", f"{path} states no prediction"
            assert not expected[key].judged
        else:
            assert len(text) > 10 and "//" not in text, f"{path}: prediction parsed badly: {text!r}"
            assert not text.startswith(("(", "Tried", "Measured before")), text


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_claims_are_declared_for_ladder_steps_only(chapter):
    steps, expected = _ladders()[chapter]
    keys = {str(k) for k, _, _ in steps}
    assert {str(k) for k in expected} <= keys
    missing = keys - {str(k) for k in expected}
    assert not missing, f"{chapter}: steps {sorted(missing)} declare no claim (use predictions.unjudged)"


@pytest.mark.parametrize("gpu", ["H100", "H200"])
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_verdicts_agree_with_the_recorded_runs(chapter, gpu):
    """The verdict the table prints is the one the numbers give: recomputed here from the run's
    times and the declared bounds, and every failed claim carries its reason."""
    run = load_run(chapter, gpu)
    table = _tables(chapter, run)
    steps, expected = _ladders()[chapter]
    assert list(table["step"]) == [str(k) for k, _, _ in steps]
    for _, row in table.iterrows():
        assert "no reason written yet" not in row["verdict"], \
            f"{chapter} on {gpu}, step {row['step']}: a failed prediction without its reason: {row['verdict']}"
        claims = expected[row["step"] if row["step"] in expected else int(row["step"])]
        claims = claims if isinstance(claims, tuple) else (claims,)
        judged = [c for c in claims if c.judged]
        if not judged:
            assert row["outcome"] == "not judged"
            continue
        c = judged[0]
        value = row["ratio judged"]
        if pd.isna(value):      # a step this run did not time (e.g. a later step on an older run)
            assert row["outcome"] == "not measured" and not row["verdict"].startswith("held")
            continue
        inside = (c.low is None or value >= c.low) and (c.high is None or value <= c.high)
        if row["outcome"] == "held":
            assert inside, f"{chapter} {gpu} step {row['step']}: 'held' but {value} outside [{c.low}, {c.high}]"
            assert row["verdict"].startswith("held")
        if not inside:
            assert row["outcome"] == "did not hold"
            assert "did not hold" in row["verdict"]


_CLAIM = re.compile(r"(?P<outcome>held|did not hold): (?P<x>x)?(?P<value>[0-9.]+)(?P<ms> ms)?"
                    r"(?P<margin>.*?)\(predicted: .*?accepted: (?:(?P<side>at least|at most) )?"
                    r"(?P<a>[0-9.]+)(?:-(?P<b>[0-9.]+))?(?: ms|x)\)", re.S)


def _stated(match) -> tuple[float, float, float]:
    """(value, low, high) as one verdict line states them."""
    value, a = float(match["value"]), float(match["a"])
    b = float(match["b"]) if match["b"] else None
    low, high = ((a, b) if b is not None else (a, np.inf) if match["side"] == "at least" else (-np.inf, a))
    return value, low, high


@pytest.mark.parametrize("gpu", ["H100", "H200"])
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_verdict_states_its_margin_and_holds_only_inside_the_band_it_states(chapter, gpu):
    """Each judged claim's verdict shows the measurement, its margin and the band the rule
    accepts, and says "held" only when the numbers it prints lie inside that band (to the digits
    printed): a reader can check every verdict from its own line."""
    table = _tables(chapter, load_run(chapter, gpu))
    steps, expected = _ladders()[chapter]
    for _, row in table.iterrows():
        claims = expected[row["step"] if row["step"] in expected else int(row["step"])]
        claims = claims if isinstance(claims, tuple) else (claims,)
        if row["outcome"] in ("not judged", "not measured"):
            continue
        found = list(_CLAIM.finditer(row["verdict"]))
        assert len(found) == sum(c.judged for c in claims), f"{chapter} {gpu} step {row['step']}: {row['verdict']}"
        for m in found:
            value, low, high = _stated(m)
            slack = 0.006 if m["x"] else 0.006 * value      # the digits printed
            assert re.search(r"%|inside the predicted", m["margin"]), m.group(0)
            if m["outcome"] == "held":
                assert low - slack <= value <= high + slack, \
                    f"{chapter} {gpu} step {row['step']}: 'held' outside the band it states: {m.group(0)}"
            else:
                assert not low + slack < value < high - slack, \
                    f"{chapter} {gpu} step {row['step']}: 'did not hold' inside the band it states: {m.group(0)}"


@pytest.mark.parametrize("expect, value, unit, words", [
    (p.about_ms(0.458), 0.551, "ms", ["held: 0.551 ms", "20% longer than the 0.458 ms predicted",
                                      "accepted: 0.344-0.573 ms"]),
    (p.about(2), 1 / 0.6, "x", ["did not hold: x1.67", "17% below the 2x predicted", "accepted: 1.68-2.38x"]),
    (p.times(1.5, 2), 1.81, "x", ["held: x1.81", "inside the predicted 1.5-2x", "accepted: 1.44-2.14x"]),
    (p.times(1.2, 1.4), 1.02, "x", ["did not hold: x1.02", "15% below the predicted 1.2-1.4x"]),
    (p.same(), 1.18, "x", ["did not hold: x1.18", "18% off the same time", "accepted: 0.91-1.10x"]),
    (p.faster(), 1.002, "x", ["did not hold: x1.00", "4.6% short of the 1.05x needed", "accepted: at least 1.05x"]),
    (p.ms_between(2, 2.5), 2.6, "ms", ["held: 2.60 ms", "4.0% above the predicted 2-2.5 ms",
                                       "accepted: 1.8-2.75 ms"]),
    (p.times(1 / 2, 1 / 1.5), 1 / 1.6, "x", ["held: x0.62", "inside the predicted 0.5-0.667x"]),
])
def test_verdict_margins(expect, value, unit, words):
    """The margin beside a verdict, in the words and digits a reader sees (a 0.2% margin is not
    written "0%"; a slower-than claim's range in its own numbers)."""
    _, line = p.verdict(expect, value, "step 1", unit=unit)
    for w in words:
        assert w in line, (w, line)


def test_small_margins_keep_a_digit():
    assert p._pct(0.002) == "0.2%" and p._pct(0.2) == "20%" and p._pct(0.0001) == "<0.1%"


def test_the_time_range_rule_is_the_one_the_rules_state():
    """RULES: a time range "N-M ms" widened by SLACK of each end."""
    e = p.ms_between(2, 2.5)
    assert e.low == pytest.approx(2 * (1 - p.SLACK)) and e.high == pytest.approx(2.5 * (1 + p.SLACK))
    assert f"by {p.SLACK:.0%} of each end" in p.RULES


def test_training_step_3_is_a_failed_prediction_in_both_runs():
    from gpulab.workloads.training import views
    for gpu in ("H100", "H200"):
        run = load_run("training", gpu)
        table = views.prediction_table(run).set_index("step")
        lad = views.ladder(run).set_index("step")["median_ms"]
        assert lad[3] > lad[2]     # the run: streams made the step slower
        assert table.loc["3", "outcome"] == "did not hold"
        assert "slower than predicted" in table.loc["3", "verdict"]
        numbers = views.streams_numbers(run)
        assert float(numbers["z1_beside"]) > float(numbers["z1_alone"])


# ----------------------------------------------------------------------------- rules, on made-up runs
STEPS = [(1, "first", "training/01_one_kernel_per_op.cu"), (2, "second", "training/02_fused_elementwise.cu"),
         (3, "third", "training/03_streams.cu")]


def _run(*times, cases=None):
    rows = pd.DataFrame({"step": [1, 2, 3], "median_ms": list(times)})
    return rows


@pytest.mark.parametrize("expect, t2, outcome", [
    (p.faster(), 0.90, "held"), (p.faster(), 0.97, "did not hold"), (p.faster(), 1.2, "did not hold"),
    (p.slower(), 1.2, "held"), (p.slower(), 1.0, "did not hold"),
    (p.same(), 1.05, "held"), (p.same(), 0.95, "held"), (p.same(), 0.8, "did not hold"), (p.same(), 1.3, "did not hold"),
    (p.several(), 1 / 3.1, "held"), (p.several(), 1 / 2.5, "did not hold"),
    (p.about(2), 1 / 2.3, "held"), (p.about(2), 1 / 1.7, "held"), (p.about(2), 1 / 2.45, "did not hold"),
    (p.about(2), 1 / 1.6, "did not hold"), (p.about(1.2), 1 / 0.9, "did not hold"),
    (p.times(2, 3), 1 / 1.9, "held"), (p.times(2, 3), 1 / 1.5, "did not hold"), (p.times(2, 3), 1 / 3.3, "held"),
    (p.times(2, 3), 1 / 3.6, "did not hold"), (p.times(1.1, 1.25), 1 / 1.03, "did not hold"),
    (p.times(1 / 2, 1 / 1.5), 1.8, "held"), (p.times(1 / 2, 1 / 1.5), 5.0, "did not hold"),
    (p.about_ms(1.0), 1.2, "held"), (p.about_ms(1.0), 1.4, "did not hold"),
    (p.ms_between(0.5, 0.6), 0.64, "held"), (p.ms_between(0.5, 0.6), 0.7, "did not hold"),
])
def test_verdict_rules(expect, t2, outcome):
    """Step 2 against step 1 (1 ms): each rule's edges, on a constructed run."""
    table = p.table(STEPS, _run(1.0, t2, 1.0), {2: expect, 3: p.unjudged("n/a")})
    row = table.set_index("step").loc["2"]
    assert row["outcome"] == outcome, row["verdict"]
    assert row["verdict"].startswith("held" if outcome == "held" else "did not hold")


def test_reason_follows_the_direction_of_the_failure():
    e = p.times(2, 3, because="SLOW-REASON", because_faster="FAST-REASON")
    slow = p.table(STEPS, _run(1.0, 0.8, 1.0), {2: e}).set_index("step").loc["2", "verdict"]
    fast = p.table(STEPS, _run(1.0, 0.1, 1.0), {2: e}).set_index("step").loc["2", "verdict"]
    held = p.table(STEPS, _run(1.0, 0.4, 1.0), {2: e}).set_index("step").loc["2", "verdict"]
    assert "SLOW-REASON" in slow and "FAST-REASON" not in slow and "slower than predicted" in slow
    assert "FAST-REASON" in fast and "faster than predicted" in fast
    assert "REASON" not in held


def test_numbers_in_verdicts_come_from_the_run():
    a = p.table(STEPS, _run(1.0, 0.5, 0.5), {2: p.times(2, 3)}).set_index("step").loc["2", "verdict"]
    b = p.table(STEPS, _run(1.0, 0.4, 0.5), {2: p.times(2, 3)}).set_index("step").loc["2", "verdict"]
    assert "x2.00" in a and "x2.50" in b


def test_claim_against_a_named_step_and_case():
    measured = pd.DataFrame({"step": [1, 2, 3, 1, 2, 3], "case": ["big"] * 3 + ["tiny"] * 3,
                             "median_ms": [1.0, 2.0, 0.5, 1.0, 1.0, 1.0]})
    table = p.table(STEPS, measured, {3: (p.times(1.8, 2.2, than=1), p.same(2, "tiny"))}, main_case="big")
    row = table.set_index("step").loc["3"]
    assert row["outcome"] == "held", row["verdict"]
    assert "vs step 1" in row["verdict"] and "(tiny)" in row["verdict"]
    assert row["vs previous"] == pytest.approx(4.0)


def test_a_missing_step_is_not_measured_not_held():
    measured = pd.DataFrame({"step": [1, 3], "median_ms": [1.0, 0.5]})
    row = p.table(STEPS, measured, {2: p.faster(1)}).set_index("step").loc["2"]
    assert row["outcome"] == "not measured"


def test_bad_declarations_are_refused():
    with pytest.raises(ValueError, match="not in the ladder"):
        p.table(STEPS, _run(1, 1, 1), {7: p.faster()})
    with pytest.raises(ValueError, match="range"):
        p.Expect()
    with pytest.raises(ValueError, match="main_case"):
        p.table(STEPS, pd.DataFrame({"step": [1], "case": ["a"], "median_ms": [1.0]}), {})
    with pytest.raises(ValueError, match="'median_ms'"):
        p.table(STEPS, pd.DataFrame({"step": [1]}), {})


def test_prediction_text_parsing(tmp_path):
    f = tmp_path / "k.cu"
    f.write_text("// What changed: tiles.\n// Why: reuse. Prediction: 2-3x faster than step 1, on the\n"
                 "// (large) case.\n// (Measured before the tile change: 1.2 ms.)\n//\n// Notes.\n"
                 "#include <x.h>\nextern \"C\" __global__ void k() {}\n")
    assert p.prediction_text(f) == "2-3x faster than step 1, on the (large) case."
    g = tmp_path / "g.cu"
    g.write_text("// Nothing predicted here.\n__global__ void k() {}\n// Prediction: not in the header\n")
    assert p.prediction_text(g) is None
    h = tmp_path / "h.cu"
    h.write_text("// so the prediction there is no change. Tried on the H100: worse.\nint x;\n")
    assert p.prediction_text(h) == "So the prediction there is no change."


# ------------------------------------------------------------------------------------ the notebooks
def test_insertion_script_is_idempotent_and_applied():
    """The committed notebooks already hold the cells (so --check changes nothing)."""
    out = subprocess.run([sys.executable, str(REPO / "tools" / "insert_prediction_cells.py"), "--check"],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr


def test_glued_verdict_names_exist():
    """Every ``verdict_NN`` the training notebook's prose reads is glued by prediction_numbers."""
    import re
    from gpulab.workloads.training import views
    nb = json.loads((REPO / "book" / "training" / "training.ipynb").read_text())
    used = set()
    for cell in nb["cells"]:
        used |= set(re.findall(r"\{glue:text\}`(verdict_\d\d|predictions_\w+|z1_\w+|xt_\w+|slower_pct)",
                               "".join(cell["source"])))
    glued = set(views.prediction_numbers(load_run("training", "H100"))) | set(views.streams_numbers(None))
    assert used and used <= glued, used - glued


@pytest.mark.parametrize("chapter", ["alexnet", "alexnet_hopper"])
def test_every_judged_alexnet_step_quotes_its_verdict_after_its_times(chapter):
    """Each of the chapter's steps with a judged claim quotes its glued verdict (the one the
    table prints, with its margin and band) in a markdown cell after the step's check."""
    import re
    from gpulab.workloads import alexnet
    nb = json.loads((REPO / "book" / chapter / f"{chapter}.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"]]
    quoted = {}
    for i, (cell, text) in enumerate(zip(nb["cells"], cells)):
        if cell["cell_type"] == "markdown":
            for step in re.findall(rf"\{{glue:text\}}`(?:{chapter}_verdict_(\d\d)|s(\d\d)_verdict)`", text):
                quoted.setdefault("".join(step), i)
    table = alexnet.prediction_table(load_run("alexnet", "H100"), alexnet.CHAPTER_STEPS[chapter])
    judged = set(table.loc[table["outcome"] != "not judged", "step"])
    assert judged and judged <= set(quoted), f"{chapter}: steps {sorted(judged - set(quoted))} quote no verdict"
    for step in judged:
        checked = next(i for i, text in enumerate(cells) if re.search(rf"CHAPTER\.step\(\"?{step}\"?\)|\"{step}\"", text))
        assert checked < quoted[step], f"{chapter} step {step}: its verdict (cell {quoted[step]}) comes before its code"

def test_insertion_script_reinserts_removed_cells_once(tmp_path, monkeypatch):
    """On a notebook without the cells (as after a merge that dropped them) the script puts each
    back at its anchor, and a second run changes nothing."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("insert_cells", REPO / "tools" / "insert_prediction_cells.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = json.loads((REPO / "book" / "convpool" / "convpool.ipynb").read_text())
    stripped = dict(committed, cells=[c for c in committed["cells"] if "gpulab_cell" not in c.get("metadata", {})])
    assert len(stripped["cells"]) < len(committed["cells"])
    (tmp_path / "convpool").mkdir()
    target = tmp_path / "convpool" / "convpool.ipynb"
    target.write_text(json.dumps(stripped, indent=1, ensure_ascii=False) + "\n")
    monkeypatch.setattr(module, "BOOK", tmp_path)
    assert module.apply("convpool") is True
    assert module.apply("convpool") is False
    assert json.loads(target.read_text()) == committed


def test_a_step_is_compared_with_the_step_its_file_says_it_changes(tmp_path):
    files = {}
    for n, changed in ((1, None), (2, 1), (3, 1), (4, None)):
        f = tmp_path / f"{n:02d}.cu"
        f.write_text(f"// Step {n}.\n" + (f"// What changed from step {changed}: something.\n" if changed else "")
                     + "// Prediction: faster.\n__global__ void k() {}\n")
        files[n] = f
    assert p.builds_on(files[3]) == 1 and p.builds_on(files[1]) is None
    steps = [(n, f"step {n}", str(f)) for n, f in files.items()]
    measured = pd.DataFrame({"step": [1, 2, 3, 4], "median_ms": [1.0, 0.5, 0.8, 0.4]})
    table = p.table(steps, measured, {}).set_index("step")
    assert table.loc["3", "builds on"] == "1" and table.loc["3", "vs the step it builds on"] == pytest.approx(1 / 0.8)
    assert table.loc["3", "vs previous"] == pytest.approx(0.5 / 0.8)
    assert table.loc["4", "builds on"] == "3"                        # no file says: the row above
    assert table.loc["1", "builds on"] == ""


# ------------------------------------------------------------------------- the one rule: judge
def test_judge_holds_only_inside_the_band_its_edges_included_and_gives_the_margin():
    """predictions.judge is the rule every verdict and target uses: inside [low, high] (edges
    included) it holds, with the distance to the nearer edge as a positive margin; outside it
    does not, with a negative margin; a value that was not measured is not judged at all."""
    assert p.judge(1.0, 1.0, 2.0).held and p.judge(2.0, 1.0, 2.0).held           # the edges
    assert p.judge(1.5, 1.0, 2.0).margin == pytest.approx(min(0.5, 0.25))
    below, above = p.judge(0.9, 1.0, 2.0), p.judge(2.2, 1.0, 2.0)
    assert (below.side, below.held, below.margin) == ("below", False, pytest.approx(-0.1))
    assert (above.side, above.held, above.margin) == ("above", False, pytest.approx(-0.1))
    assert p.judge(3.0, low=2.0).margin == pytest.approx(0.5) and not p.judge(1.9, low=2.0).held
    assert p.judge(0.9, high=1.0).margin == pytest.approx(0.1) and not p.judge(1.01, high=1.0).held
    for bad in (dict(), dict(low=2.0, high=1.0)):
        with pytest.raises(ValueError):
            p.judge(1.0, **bad)
    for missing in (float("nan"), float("inf"), None):
        with pytest.raises(ValueError, match="not measured"):
            p.judge(missing, 1.0, 2.0)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_declared_claim_is_judged_by_the_one_rule(chapter):
    """Each claim a chapter declares, tried on values across and at its band's edges: its verdict
    reads "held" exactly where judge holds, never 11-20% outside its band, and always shows its
    margin and the band."""
    _, expected = _ladders()[chapter]
    claims = [c for v in expected.values() for c in (v if isinstance(v, tuple) else (v,)) if c.judged]
    assert claims, chapter
    for e in claims:
        ms = e.than == p.TIME
        edges = [x for x in (e.low, e.high) if x is not None]
        values = sorted({x * f for x in edges for f in (0.8, 0.89, 0.999, 1.0, 1.001, 1.11, 1.2)})
        for value in values:
            outcome, line = p.verdict(e, value, "step 1", unit="ms" if ms else "x")
            assert (outcome == "held") == p.judge(value, e.low, e.high).held, (chapter, e.claim, value, line)
            assert line.startswith(outcome + ":") and "accepted: " in line and "%" in line or \
                "inside the predicted" in line, (chapter, e.claim, value, line)


def test_a_target_is_met_only_inside_its_bound_with_the_margin_in_words():
    assert p.target_verdict(1.0, at_most=1.18, unit="ms") == (True, "met by 15%: 1.000 ms, under 1.18 ms")
    assert p.target_verdict(1.2, at_most=1.18, unit="ms") == (False, "missed by 1.7%: 1.200 ms, over 1.18 ms")
    assert p.target_verdict(1.93, at_least=2.0, unit="x") == (False, "missed by 3.5%: 1.930x, short of 2x")
    assert p.target_verdict(1.18, at_most=1.18, unit="ms")[0]                        # the edge is met
    assert p.target_verdict(float("nan"), at_most=1.0) == (False, p.NOT_MEASURED)


def _target_tables(gpu):
    """Every chapter's targets table from its recorded run on ``gpu``."""
    from gpulab.workloads import alexnet, fcnet
    from gpulab.workloads.convpool import views as convpool_views
    from gpulab.workloads.lenet import views as lenet_views
    from gpulab.workloads.training import views as training_views
    from gpulab.workloads.multigpu import views as multigpu_views
    lenet_run = load_run("lenet", gpu)
    totals = alexnet.layer_totals(load_run("alexnet", gpu).experiment("ladder"))
    yield "alexnet", alexnet.targets_table(totals, 1.0, 0.5, 0.7)
    yield "fcnet", fcnet.targets(load_run("fcnet", gpu))
    yield "convpool", convpool_views.targets(load_run("convpool", gpu))
    yield "lenet", lenet_views.targets_table(lenet_views.step_labels(lenet_run.experiment("ladder")),
                                             lenet_views.step_labels(lenet_run.experiment("forward")), 10_000)
    yield "training", training_views.targets(load_run("training", gpu))
    multigpu_run = multigpu_views.recorded()
    assert multigpu_run is not None, "the recorded two-GPU run is missing"
    yield "multigpu", multigpu_views.targets(multigpu_run)


@pytest.mark.parametrize("gpu", ["H100"])
def test_every_target_table_says_met_only_with_a_margin_that_says_so(gpu):
    """A target's ``met`` is the one rule's (predictions.target_verdict) and its ``margin`` column
    says by how much it was met or missed."""
    for chapter, table in _target_tables(gpu):
        assert "margin" in table.columns, chapter
        for _, row in table.iterrows():
            if row["met"] is None or row["margin"] in (p.NOT_MEASURED,):
                continue
            parts = [s.split(" ", 1)[1] if s.startswith(("time ", "speedup ", "target ", "cuDNN ")) else s
                     for s in str(row["margin"]).split("; ")]
            assert all(re.match(r"(met|missed) by (<0\.1|[\d.]+)%: ", s) or s.startswith("no batch") for s in parts), \
                (chapter, row["target"], row["margin"])
            assert bool(row["met"]) == all(s.startswith(("met", "no batch")) for s in parts), \
                (chapter, row["target"], row["met"], row["margin"])
