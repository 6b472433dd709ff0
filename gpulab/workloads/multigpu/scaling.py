"""The chapter's ladder as the reader climbs it: from one GPU to the bucketed, overlapped step on
two, one change per step, each with the prediction the notebook states before its time and the
verdict the recorded run gives (:mod:`gpulab.predictions`: the same rules, margins and table as
every other chapter's ladder).

The steps are launch forms of the chapter's kernels rather than kernels of their own, so each
step's prediction is its declared claims (no kernel file: :func:`gpulab.predictions.table`). Each
is judged at two batches: the smallest the run times, where a step is a few tens of microseconds
and the all-reduce is as long as the computation, and the largest, where the computation is a
millisecond. Step 3's claim is a sum of two things the reader has already seen measured (step 2's
time and the all-reduce's time alone), so it is built from the run (:func:`predicted`); the others'
numbers are fixed.

Every time comes from the run's ``step`` rows (each two-GPU step at the faster of its CUDA-graph
and eager timings, as the scaling table takes it), except step 3's: the run's final timing keeps
the plain step's fastest form, which the recorded runs fuse with the update, so the plain step
through NCCL comes from the sweep of NCCL's settings, under the setting the all-reduce curve was
measured under (:func:`.views.nccl_plain`).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from ... import predictions as expect
from ...runs import RecordedRun
from ..training.data import VOCAB
from . import views
from .record import BATCHES
from .replicas import Layout

#: The two batches every claim is judged at (the smallest and the largest the run times).
SMALL, LARGE = min(BATCHES), max(BATCHES)


def case(batch: int) -> str:
    """A batch as the table and the verdicts name it."""
    return f"B = {batch:,}"


SMALL_CASE, LARGE_CASE = case(SMALL), case(LARGE)
#: The case the table's time column shows.
MAIN_CASE = LARGE_CASE


#: (key, what changed, kernel file: None, each step is a launch form) in ladder order.
STEPS = [
    ("1", "one GPU: the training chapter's fastest step (step 10, or the replicas' form of it)", None),
    ("2", "two GPUs, each on half the batch, nothing summed: the computation alone (a timing, not a training "
          "step: the copies drift apart)", None),
    ("3", "one all-reduce of the whole gradient through NCCL after the backward pass, then the update "
          "(02_update_and_zero.cu): the plain step", None),
    ("4", "the all-reduce fused with the update, each GPU reading the other's gradient over NVLink "
          "(06_peer_update.cu)", None),
    ("5", "the gradient in buckets, the rare words' reduced beside the frequent words' scatter "
          "(01, 04, 05; the configuration the sweep kept)", None),
]

#: What each step's title says in the notebook (short).
TITLES = {"1": "one GPU", "2": "two GPUs, the computation alone", "3": "one all-reduce through NCCL",
          "4": "the all-reduce fused with the update over NVLink", "5": "the bucketed, overlapped step"}

_FIXED = {
    "1": expect.unjudged("the baseline: the fastest one-GPU step at each batch, which two GPUs must beat"),
    "2": (expect.about(2, than="1", case=LARGE_CASE,
                       claim=f"about 2x faster than one GPU at {LARGE_CASE}: each GPU does half the documents",
                       because="each GPU's half of the step still pays its launches and the small parameters' "
                               "gradient over its whole half in full"),
          expect.same(than="1", case=SMALL_CASE,
                      claim=f"about one GPU's time at {SMALL_CASE}: a step of a few tens of µs is mostly launches "
                            "and per-step work, which each GPU pays in full",
                      because_faster="the documents' work was a larger share of the small step than its launches")),
    "4": (expect.faster(than="3", case=SMALL_CASE,
                        claim=f"faster than step 3 at {SMALL_CASE}: one kernel reads the other GPU's gradient and "
                              "writes the update, in place of NCCL's all-reduce and the update pass after it",
                        because="reading the other GPU's gradient over NVLink, block by block behind flags, took "
                                "as long as NCCL's all-reduce and the update pass together"),
          expect.same(than="3", case=LARGE_CASE,
                      claim=f"about step 3's time at {LARGE_CASE}: what the fusion can save (the update pass and "
                            "NCCL's launch, tens of µs) is a few percent of a millisecond step")),
    "5": (expect.faster(than="4", case=SMALL_CASE,
                        claim=f"faster than step 4 at {SMALL_CASE}: the rare words' all-reduce runs beside the "
                              "frequent words' scatter",
                        because="the all-reduce beside the scatter shares the SMs, L2 and memory bandwidth with "
                                "it, and the buckets add launches and dependencies to a step of tens of µs"),
          expect.same(than="4", case=LARGE_CASE,
                      claim=f"about step 4's time at {LARGE_CASE}: the all-reduce the overlap can hide is a few "
                            "percent of the step",
                      because="splitting W1's scatter into buckets slowed the computation by more than the "
                              "all-reduce it hid")),
}


def allreduce_alone_ms(run: RecordedRun) -> float:
    """The lab's all-reduce of the chapter's gradient alone, in a CUDA graph (the curve's point at
    the gradient's size), ms."""
    curve = views.allreduce_table(run, views.LAB_ALLREDUCE + ", CUDA graph")
    grad = 4 * Layout(VOCAB).size
    return float(curve.iloc[(curve["bytes"] - grad).abs().argsort().iloc[0]]["median_ms"])


def measured(run: RecordedRun) -> pd.DataFrame:
    """The ladder's times: columns ``step``, ``case``, ``median_ms``, at the two judged batches
    (a step the run did not time at a batch is left out there: not measured)."""
    s, t = views.scaling_table(run), views.step_table(run)
    plain_nccl = views.nccl_plain(run)
    kept, forms = views.kept(run), views.forms_table(run)
    rows = []
    for b in (SMALL, LARGE):
        if b not in s.index:
            continue
        # The plain step the run kept, where it is the fused form; else the sweep's fused form.
        fused = (float(s.loc[b, views.PLAIN]) if kept is not None and views.PEER in str(kept.loc[b, "plain"])
                 else float(forms.loc[b, views.FUSED]) if forms is not None and views.FUSED in forms else np.nan)
        times = {"1": s.loc[b, "1 GPU (fastest)"], "2": t.loc[b, views.COMPUTE_ONLY],
                 "3": plain_nccl.get(b, np.nan), "4": fused, "5": s.loc[b, views.BUCKETED]}
        rows += [{"step": k, "case": case(b), "median_ms": float(v)} for k, v in times.items() if np.isfinite(v)]
    return pd.DataFrame(rows)


def predicted(run: RecordedRun) -> dict:
    """Every step's claims (:mod:`gpulab.predictions`), step 3's built from the run: step 2's time
    plus the all-reduce's time alone, at each judged batch."""
    out = dict(_FIXED)
    m = measured(run).set_index(["step", "case"])["median_ms"]
    a = allreduce_alone_ms(run)
    claims = []
    for c in (SMALL_CASE, LARGE_CASE):
        if ("2", c) in m.index:
            two = float(m.loc[("2", c)])
            claim = expect.about_ms(two + a, case=c, because="the step lost time around the all-reduce that "
                                                             "neither it alone nor the computation alone has",
                                    because_faster="the all-reduce ran faster after the backward pass than alone")
            claims.append(replace(claim, claim=f"about {two + a:.3g} ms at {c}: step 2's {two:.3g} ms plus the "
                                               f"all-reduce alone ({a * 1e3:.0f} µs), which nothing hides"))
    out["3"] = tuple(claims) if claims else expect.unjudged("this run has no computation-alone timing to add to")
    return {k: out[k] for k, _, _ in STEPS}          # in ladder order


def prediction_table(run: RecordedRun) -> pd.DataFrame:
    """Each step's prediction against the run (:func:`gpulab.predictions.table`), times at
    :data:`MAIN_CASE`."""
    return expect.table(STEPS, measured(run), predicted(run), main_case=MAIN_CASE)


def prediction_styled(run: RecordedRun):
    return expect.styled(prediction_table(run), f"Times at {MAIN_CASE}; each claim names its batch. " + run.caption)


def show_table(run: RecordedRun | None) -> None:
    """:func:`prediction_styled`, or what to run without a run."""
    from IPython.display import display
    if run is None:
        print(f"No two-GPU run recorded yet: the ladder's predictions are judged here once `{views.RECORD_COMMAND}` "
              "has run.")
        return
    display(prediction_styled(run))


def step_row(run: RecordedRun, key: str) -> pd.DataFrame:
    """One step against the step it builds on, at both judged batches (ms): what the notebook shows
    after each step's prediction."""
    m = measured(run).pivot_table(index="case", columns="step", values="median_ms", sort=False)
    k = str(key)
    base = str(int(k) - 1)
    cols = {f"step {k}: {TITLES[k]} (ms)": m[k]}
    if base in m:
        cols[f"step {base}: {TITLES[base]} (ms)"] = m[base]
        cols[f"step {base} / step {k}"] = m[base] / m[k]
    return pd.DataFrame(cols).rename_axis(index="batch")


def show_step(run: RecordedRun | None, key: str) -> None:
    """:func:`step_row`, styled with the run's caption (or what to run without a run)."""
    from IPython.display import display
    if run is None:
        print(f"No two-GPU run recorded yet: step {key}'s time appears here once `{views.RECORD_COMMAND}` has run.")
        return
    row = step_row(run, key)
    ratio = [c for c in row.columns if " / " in c]
    display(row.style.format({c: "{:.4f}" for c in row.columns if c not in ratio} | {c: "x{:.2f}" for c in ratio})
            .set_caption(f"Step {key}, {TITLES[str(key)]}; " + run.caption))


def numbers(run: RecordedRun | None) -> dict:
    """What the notebook glues: each step's claim (``mg_claim_N``, shown before its time), its
    verdict and outcome (``mg_verdict_N``, ``mg_outcome_N``) and the counts (``mg_held`` ...)."""
    keys = [k for k, _, _ in STEPS]
    if run is None:
        return {**{f"mg_{w}_{k}": "no run recorded yet" for k in keys for w in ("claim", "verdict", "outcome")},
                **dict.fromkeys(("mg_held", "mg_did_not_hold", "mg_not_judged", "mg_judged"), 0)}
    table = prediction_table(run).set_index("step")
    claims = predicted(run)
    out = {}
    for k in keys:
        declared = claims[k] if isinstance(claims[k], tuple) else (claims[k],)
        out[f"mg_claim_{k}"] = "; ".join(e.claim for e in declared if e.judged) or declared[0].note
        out[f"mg_verdict_{k}"] = table.loc[k, "verdict"]
        out[f"mg_outcome_{k}"] = table.loc[k, "outcome"]
    out.update({f"mg_{k}": v for k, v in expect.summary(table.reset_index()).items()})
    return out
