"""The multigpu chapter's ladder (gpulab.workloads.multigpu.scaling): each step's prediction stated
before its time, judged on the recorded runs by gpulab.predictions' rules with its margin; and the
notebook's order (the prediction before the time, the model before the measurement it explains)."""
import json
import re
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from gpulab import predictions
from gpulab.errors import CheckFailed
from gpulab.runs import load_run
from gpulab.workloads.multigpu import scaling, views

REPO = Path(__file__).resolve().parent.parent
GPUS = ["H100", "H200"]
KEYS = [k for k, _, _ in scaling.STEPS]

# One judged claim as a verdict line states it (as tests/test_predictions.py reads every chapter's).
_CLAIM = re.compile(r"(?P<outcome>held|did not hold): (?P<x>x)?(?P<value>[0-9.]+)(?P<ms> ms)?"
                    r"(?P<margin>.*?)\(predicted: .*?accepted: (?:(?P<side>at least|at most) )?"
                    r"(?P<a>[0-9.]+)(?:-(?P<b>[0-9.]+))?(?: ms|x)\)", re.S)


@pytest.fixture(scope="module", params=GPUS)
def run(request):
    return load_run("multigpu", request.param)


def _claims(declared):
    return declared if isinstance(declared, tuple) else (declared,)


def test_every_step_but_the_baseline_declares_judged_claims_at_both_batches(run):
    claims = scaling.predicted(run)
    assert list(claims) == KEYS
    assert not any(c.judged for c in _claims(claims["1"]))
    for key in KEYS[1:]:
        judged = [c for c in _claims(claims[key]) if c.judged]
        assert {c.case for c in judged} == {scaling.SMALL_CASE, scaling.LARGE_CASE}, key
        assert all(c.claim for c in judged)


def test_each_verdict_is_the_rule_applied_to_the_run_with_its_margin(run):
    """The table's verdict for each claim is recomputed here from the run's times: "held" exactly
    when the measured value lies in the band the claim's rule accepts, and every judged line shows
    the value, the margin (a percentage) and the band."""
    table = scaling.prediction_table(run).set_index("step")
    times = scaling.measured(run).set_index(["step", "case"])["median_ms"]
    claims = scaling.predicted(run)
    assert list(table.index) == KEYS
    for key in KEYS[1:]:
        judged = [c for c in _claims(claims[key]) if c.judged]
        found = list(_CLAIM.finditer(table.loc[key, "verdict"]))
        assert len(found) == len(judged), table.loc[key, "verdict"]
        outcomes = []
        for claim, m in zip(judged, found):
            mine = times[(key, claim.case)]
            value = mine if claim.than == predictions.TIME else times[(str(claim.than), claim.case)] / mine
            inside = (claim.low is None or value >= claim.low) and (claim.high is None or value <= claim.high)
            assert (m["outcome"] == "held") == inside, (key, claim.claim, value, m.group(0))
            assert "%" in m["margin"] or "inside the predicted" in m["margin"], m.group(0)
            assert float(m["value"]) == pytest.approx(value, rel=0.006), m.group(0)
            outcomes.append("held" if inside else "did not hold")
        want = "did not hold" if "did not hold" in outcomes else "held"
        assert table.loc[key, "outcome"] == want
        assert "no reason written yet" not in table.loc[key, "verdict"]


def test_step_3s_prediction_is_step_2_plus_the_allreduce_measured_alone(run, monkeypatch):
    times = scaling.measured(run).set_index(["step", "case"])["median_ms"]
    alone = scaling.allreduce_alone_ms(run)
    assert 0.02 < alone < 0.5                      # the lab's 16.8 MB all-reduce in a CUDA graph, ms
    for c in _claims(scaling.predicted(run)["3"]):
        assert c.than == predictions.TIME and c.center == pytest.approx(times[("2", c.case)] + alone)
    # An all-reduce three times as long alone predicts a step 3 the run did not measure at B = 1,024.
    monkeypatch.setattr(scaling, "allreduce_alone_ms", lambda r: 3 * alone)
    row = scaling.prediction_table(run).set_index("step").loc["3"]
    assert row["outcome"] == "did not hold" and "shorter than" in row["verdict"]


def test_a_step_slower_than_its_claim_is_not_held_and_says_why(run, monkeypatch):
    """Step 5 made 20% slower at B = 1,024 (a made-up run): its "faster than step 4" no longer holds,
    and the verdict gives the reason the chapter declares for that direction."""
    real = scaling.measured(run)

    def slower(r):
        m = real.copy()
        hit = (m["step"] == "5") & (m["case"] == scaling.SMALL_CASE)
        m.loc[hit, "median_ms"] = float(m.loc[(m["step"] == "4") & (m["case"] == scaling.SMALL_CASE), "median_ms"].iloc[0]) * 1.2
        return m

    monkeypatch.setattr(scaling, "measured", slower)
    row = scaling.prediction_table(run).set_index("step").loc["5"]
    assert row["outcome"] == "did not hold"
    assert "slower than predicted" in row["verdict"] and "shares the SMs" in row["verdict"]


def test_steps_without_a_kernel_file_show_their_claims_as_their_prediction(run):
    """predictions.table with file None: the prediction column is the step's claims, and the step
    builds on the row above (no kernel file to name another)."""
    table = scaling.prediction_table(run).set_index("step")
    claims = scaling.predicted(run)
    for key in KEYS[1:]:
        assert table.loc[key, "prediction (kernel file)"] == "; ".join(c.claim for c in _claims(claims[key]))
        assert table.loc[key, "builds on"] == str(int(key) - 1)
    assert table.loc["1", "prediction (kernel file)"] == predictions.NO_PREDICTION


def test_step_4_is_the_fused_form_in_both_runs_or_the_sweeps(run, monkeypatch):
    """Step 4's time is the plain step the run kept where that is the all-reduce fused with the
    update over NVLink (both recorded runs, at both batches); where the run kept another form, the
    sweep's fused form."""
    kept = views.kept(run)
    for b in (scaling.SMALL, scaling.LARGE):
        assert views.PEER in kept.loc[b, "plain"]
    m = scaling.measured(run).set_index(["step", "case"])["median_ms"]
    s = views.scaling_table(run)
    assert m[("4", scaling.LARGE_CASE)] == pytest.approx(s.loc[scaling.LARGE, views.PLAIN])
    other = kept.assign(plain="step 9's gradient kernel")
    monkeypatch.setattr(views, "kept", lambda r: other)
    m = scaling.measured(run).set_index(["step", "case"])["median_ms"]
    assert m[("4", scaling.LARGE_CASE)] == pytest.approx(views.forms_table(run).loc[scaling.LARGE, views.FUSED])


def test_the_glued_numbers_and_the_step_tables(run):
    n = scaling.numbers(run)
    table = scaling.prediction_table(run).set_index("step")
    for key in KEYS:
        assert n[f"mg_verdict_{key}"] == table.loc[key, "verdict"]
    assert n["mg_judged"] == n["mg_held"] + n["mg_did_not_hold"] == 4
    row = scaling.step_row(run, "3")
    assert list(row.index) == [scaling.SMALL_CASE, scaling.LARGE_CASE]
    assert (row["step 2 / step 3"] == row.iloc[:, 1] / row.iloc[:, 0]).all()
    none = scaling.numbers(None)
    assert none["mg_verdict_3"] == "no run recorded yet" and none["mg_held"] == 0


def test_the_link_is_inferred_from_the_peer_updates_bandwidth(run):
    from gpulab import datasheet
    text = views.link_numbers(run)["link_text"]
    gbs = float(re.search(r"at least (\d+) GB/s", text).group(1))
    assert gbs > datasheet.LINKS["pcie5"].gbs_per_direction and "NVLink" in text
    no_peer = replace(run, tables={**run.tables, "topology": run.tables["topology"].assign(peer_access=False)})
    assert views.link_numbers(no_peer)["link_text"] == ""


def test_the_crossover_is_the_smallest_batch_that_meets_the_target(run):
    s = views.scaling_table(run)
    b = min(int(x) for x in s.index if s.loc[x, "2 GPUs / 1 GPU"] <= views.SCALING_TARGET)
    assert views.crossover_numbers(run)["crossover"].startswith(f"B = {b:,} (")


def test_the_replica_check_raises_on_a_form_outside_its_tolerance(monkeypatch):
    from gpulab.workloads.multigpu import replicas
    good = pd.DataFrame([{"variant": v, "loss after 3 steps": 1.0, "update vs float64 reference": 1e-6,
                          "update vs 1 replica": 1e-7, "replicas bit-identical": True} for v in views.CHECK_FORMS])

    class Backend:
        caption = "a test backend"

    monkeypatch.setattr(views, "_display", lambda *a: None)
    monkeypatch.setattr(replicas, "compare_forms", lambda *a, **k: good)
    assert views.replica_check(Backend())["worst_replica"] == pytest.approx(1e-7)
    bad = good.copy()
    bad.loc[bad["variant"] == "2 replicas, bucketed all-reduce", "update vs 1 replica"] = 3e-5
    monkeypatch.setattr(replicas, "compare_forms", lambda *a, **k: bad)
    with pytest.raises(CheckFailed, match="bucketed all-reduce: update vs 1 replica 3.00e-05"):
        views.replica_check(Backend())
    drift = good.assign(**{"replicas bit-identical": [True, False, True, True]})
    monkeypatch.setattr(replicas, "compare_forms", lambda *a, **k: drift)
    with pytest.raises(CheckFailed, match="one all-reduce: the replicas' parameters differ"):
        views.replica_check(Backend())


# ------------------------------------------------------------------------------------ the notebook
def _cells():
    nb = json.loads((REPO / "book" / "multigpu" / "multigpu.ipynb").read_text())
    return [("".join(c["source"]), c["cell_type"]) for c in nb["cells"]]


def _first(cells, pattern, kind=None):
    for i, (text, t) in enumerate(cells):
        if (kind is None or t == kind) and re.search(pattern, text):
            return i
    raise AssertionError(f"no {kind or ''} cell matches {pattern!r}")


def test_each_steps_prediction_comes_before_its_time_and_its_verdict_after():
    cells = _cells()
    for key in KEYS[1:]:
        claim = _first(cells, rf"\{{glue:text\}}`mg_claim_{key}`", "markdown")
        shown = _first(cells, rf'scaling\.show_step\(run, "{key}"\)', "code")
        verdict = _first(cells, rf"\{{glue:text\}}`mg_verdict_{key}`", "markdown")
        assert claim < shown < verdict, (key, claim, shown, verdict)
        assert claim > _first(cells, rf'scaling\.show_step\(run, "{int(key) - 1}"\)', "code")


def test_the_model_comes_before_the_bus_bandwidth_and_the_exercises_before_the_timings():
    cells = _cells()
    model = _first(cells, r"\$\$T\(S, p\)", "markdown")
    busbw = _first(cells, r"\*bus bandwidth\*", "markdown")
    measured = _first(cells, r"^## Measured on two GPUs", "markdown")
    assert model < busbw < _first(cells, r"show_allreduce", "code") < measured
    for exercise in ("multigpu.1", "multigpu.2"):
        assert _first(cells, rf'exercises\.check\("{exercise}"', "code") < measured
    assert "(the ring model below)" not in "".join(t for t, _ in cells)
    assert _first(cells, r"NCCL in one box", "markdown") < _first(cells, r"^## The idea", "markdown")


def test_the_host_code_shown_is_the_step_the_workers_run():
    import inspect
    from gpulab.workloads.multigpu.gpustep import GpuStep
    text = views.host_step_source()
    source = inspect.getsource(GpuStep._in_forward).splitlines()
    assert text.startswith("def _in_forward(") and [l.strip() for l in text.splitlines()] == [l.strip() for l in source]
    for call in ("self.ready[k].record(main)", "self.side.wait_event(self.ready[k])", "self.allreduce("):
        assert call in text
    cells = _cells()
    assert _first(cells, r"show_host_step\(\)", "code") < _first(cells, r"^## Measured on two GPUs", "markdown")


TOPO = """\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tSYS\t0-51\t0\t\tN/A
GPU1\tNV18\t X \tPIX\t0-51\t0\t\tN/A
NIC0\tSYS\tPIX\t X

Legend:

  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def test_the_recorded_link_is_read_from_nvidia_smis_matrix(run):
    from gpulab.workloads.multigpu.record import topo_links
    assert topo_links(TOPO) == {(0, 1): "NV18", (1, 0): "NV18"}
    assert topo_links(TOPO.replace("NV18", "SYS")) == {(0, 1): "SYS", (1, 0): "SYS"}
    assert topo_links("nothing here") == {}
    # A run that recorded the link says so instead of inferring it; a PCIe path is not called NVLink.
    topo = run.tables["topology"]
    recorded = replace(run, tables={**run.tables, "topology": topo.assign(link="NV18")})
    assert views.link_numbers(recorded)["link_text"].startswith("The run records the GPUs' link as NV18")
    pcie = replace(run, tables={**run.tables, "topology": topo.assign(link="SYS")})
    assert "at least" in views.link_numbers(pcie)["link_text"]
