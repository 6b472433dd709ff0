"""Predictions against measurements: did each ladder step do what its kernel file said it would?

Every ladder step's kernel file (``kernels/<chapter>/NN_*.cu``) opens with a comment saying what
changed and, in a sentence starting "Prediction", what that should buy. This module reads that
sentence, pairs it with the step's time in a recorded (or live) run, and writes a verdict.

A verdict is computed, never typed: each chapter declares next to its steps (a ``PREDICTED``
dict: step -> :class:`Expect`) what the prediction claims in numbers, and :func:`verdict` compares
that claim with the run. The rules, shown under every table (:data:`RULES`):

- "faster" / "slower": the step takes at most 1/1.05 (at least 1.05) times the time it is
  compared with -- a 5% margin, so that run-to-run noise is not called a gain;
- "about the same" ("no change", "little", "within a few percent"): the ratio lies in
  [1/1.1, 1.1];
- "several times faster": at least 3x;
- "about N x" : within 25% of N on a log scale (N^0.75 to N^1.25: about 2x accepts 1.68-2.38x);
- "N-M x faster": between N and M, each end moved outwards by 10% of its distance from 1 on a
  log scale (2-3x accepts 1.87x to 3.35x; "10-25% faster" accepts 1.09x to 1.28x): a prediction
  of "2-3x" that measures 1.9x held, one that measures 1.5x did not.

Every verdict shows its margin beside it: how far the measurement lies from the claim's own
number (or inside or outside its own range, or past or short of a threshold), and the band the
rule accepts ("held: 0.551 ms, 20% longer than the 0.458 ms predicted (predicted: about 0.458 ms;
accepted: 0.344-0.573 ms)"), so that a "held" near the edge of its band is not read as exact.
"held" is written only for a measurement inside the band the line states.

A prediction a run's times cannot judge (one about a profiler counter, or about a different
experiment than the ladder) is declared with :func:`unjudged` and a note, which the table shows
as it is. A failed prediction shows the reason the chapter declares for that direction
(``because``: slower than predicted; ``because_faster``: faster), so the verdict says why.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from . import paths

#: "faster"/"slower": at least this ratio.
FASTER = 1.05
#: "about the same": the ratio within [1/SAME, SAME].
SAME = 1.10
#: "several times faster": at least this ratio.
SEVERAL = 3.0
#: "about N x": within this fraction of N.
ABOUT = 0.25
#: "N-M x": this much slack at each end of the range.
SLACK = 0.10

RULES = (f"How a verdict is reached: \"faster\" means at least {FASTER:.2f}x; \"about the same\" "
         f"a ratio between 1/{SAME:g} and {SAME:g}; \"several times\" at least {SEVERAL:g}x; "
         f"\"about N x\" within {ABOUT:.0%} of N on a log scale (about 2x accepts {2 ** (1 - ABOUT):.2f}-"
         f"{2 ** (1 + ABOUT):.2f}x); \"about T ms\" within {ABOUT:.0%} of T; a range \"N-M x\" widened by {SLACK:.0%} of each end's "
         f"distance from 1 on a log scale (2-3x accepts {2 ** (1 - SLACK):.2f}-{3 ** (1 + SLACK):.2f}x); "
         f"a time range \"N-M ms\" by {SLACK:.0%} of each end.")

NO_PREDICTION = "no prediction written"
#: ``Expect.than`` for a claim about the step's own time (ms) rather than a speedup.
TIME = "time"
NOT_MEASURED = "not measured in this run"


@dataclass(frozen=True)
class Expect:
    """What one step's prediction claims, in numbers a run can check: the speedup of this
    step over step ``than`` (None: the previous step of the ladder) lies in [low, high]
    (either end open), measured on ``case`` (None: the ladder's main case)."""

    low: float | None = None
    high: float | None = None
    than: object = None
    case: str | None = None
    claim: str = ""
    because: str = ""          # why, when the step came out slower than predicted
    because_faster: str = ""   # why, when it came out faster than predicted
    note: str = ""             # the verdict of a prediction the times cannot judge
    # The claim's own numbers, before the rule's band around them, for the margin the verdict
    # shows: ``center`` a single value ("about 2x", "about 0.9 ms"; 1 for "about the same"),
    # ``nominal`` a range (low, high), either end None ("2-3x", "0.6-0.7 ms").
    center: float | None = None
    nominal: tuple | None = None

    def __post_init__(self):
        if not self.note and self.low is None and self.high is None:
            raise ValueError("an Expect needs a range (low and/or high) or a note (use unjudged())")
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"Expect: low {self.low} is above high {self.high}")

    @property
    def judged(self) -> bool:
        return not self.note


def _step_name(key) -> str:
    """ "01" -> "1" (runs and step lists write numbers with a leading zero, prose does not)."""
    text = str(key)
    return str(int(text)) if text.isdigit() else text


def _against(than) -> str:
    return "the previous step" if than is None else f"step {_step_name(than)}"


def _where(text: str, case) -> str:
    return f"{text} on {case}" if case else text


def faster(than=None, case=None, claim: str = "", **why) -> Expect:
    """Prediction: faster than step ``than`` (at least :data:`FASTER`)."""
    return Expect(FASTER, None, than, case, claim or _where(f"faster than {_against(than)}", case), **why)


def slower(than=None, case=None, claim: str = "", **why) -> Expect:
    """Prediction: slower than step ``than`` (at most 1/:data:`FASTER`)."""
    return Expect(None, 1 / FASTER, than, case, claim or _where(f"slower than {_against(than)}", case), **why)


def same(than=None, case=None, claim: str = "", **why) -> Expect:
    """Prediction: about the time of step ``than`` (within :data:`SAME`)."""
    return Expect(1 / SAME, SAME, than, case, claim or _where(f"about the time of {_against(than)}", case),
                  center=1.0, **why)


def several(than=None, case=None, claim: str = "", **why) -> Expect:
    """Prediction: several times faster than step ``than`` (at least :data:`SEVERAL`)."""
    return Expect(SEVERAL, None, than, case, claim or _where(f"several times faster than {_against(than)}", case), **why)


def about(x: float, than=None, case=None, claim: str = "", **why) -> Expect:
    """Prediction: about ``x`` times faster than step ``than``: within :data:`ABOUT` of ``x`` on a
    log scale (x^(1-ABOUT) to x^(1+ABOUT): "about 2x" accepts 1.68-2.38x, "about 1.2x" 1.15-1.26x)."""
    low, high = sorted((x ** (1 - ABOUT), x ** (1 + ABOUT)))
    return Expect(low, high, than, case, claim or _where(f"about {x:g}x faster than {_against(than)}", case),
                  center=x, **why)


def _widen(bound: float, lower: bool) -> float:
    """A range end moved outwards by :data:`SLACK` of its distance from 1 on a log scale: 2x -> 1.87x
    (lower) or 2.14x (upper); 0.5x -> 0.47x (lower) -- a small predicted gain gets a small slack."""
    outward = (bound < 1) == lower
    return bound ** (1 + SLACK if outward else 1 - SLACK)


def times(low: float, high: float | None, than=None, case=None, claim: str = "", **why) -> Expect:
    """Prediction: ``low``-``high`` times faster than step ``than`` (``high`` None: at least
    ``low``; below 1: slower), each end widened by :func:`_widen`; ``claim`` words it."""
    text = f"{low:g}-{high:g}x" if high is not None else f"at least {low:g}x"
    where = f" on {case}" if case else ""
    return Expect(_widen(low, True), None if high is None else _widen(high, False), than, case,
                  claim or f"{text} faster than {_against(than)}{where}", nominal=(low, high), **why)


def about_ms(x: float, case=None, **why) -> Expect:
    """Prediction: the step itself takes about ``x`` ms on ``case`` (within :data:`ABOUT`)."""
    return Expect(x * (1 - ABOUT), x * (1 + ABOUT), TIME, case,
                  f"about {x:g} ms" + (f" on {case}" if case else ""), center=x, **why)


def ms_between(low: float, high: float, case=None, **why) -> Expect:
    """Prediction: the step itself takes ``low``-``high`` ms on ``case``, each end moved out by
    :data:`SLACK` of itself (as :data:`RULES` says: 2-2.5 ms accepts 1.8-2.75 ms)."""
    return Expect(low * (1 - SLACK), high * (1 + SLACK), TIME, case,
                  f"{low:g}-{high:g} ms" + (f" on {case}" if case else ""), nominal=(low, high), **why)


def unjudged(note: str) -> Expect:
    """A prediction the ladder's times cannot judge; ``note`` is the table's verdict."""
    return Expect(note=note, claim="not judged from the ladder's times")


# ---------------------------------------------------------------------------------------------
# Reading the prediction from the kernel file

_PREDICTION = re.compile(r"prediction", re.IGNORECASE)


def header(path: Path) -> list[str]:
    """The kernel file's opening comment, one string per paragraph (``//`` lines up to the
    first line of code). A blank comment line ends a paragraph; so does a line that opens a
    parenthetical aside after a finished sentence ("(Measured before ...", "(Tried ..."), which
    is a paragraph of its own: history, not the prediction."""
    paragraphs, current = [], []

    def close():
        if current:
            paragraphs.append(" ".join(current))
            current.clear()

    for line in Path(path).read_text().splitlines():
        stripped = line.strip()
        if not stripped.startswith("//"):
            if stripped and not stripped.startswith("#"):
                break
            close()
            continue
        text = stripped[2:].strip()
        if not text:
            close()
        elif text.startswith("(") and (not current or current[-1].rstrip().endswith((".", ":", ";"))):
            close()
            current.append(text)
        elif current and current[0].startswith("(") and current[-1].rstrip().endswith((".", ")")):
            close()        # the aside ended; what follows is a new paragraph
            current.append(text)
        else:
            current.append(text)
    close()
    return paragraphs


#: A sentence starting so is history (what was tried), not the prediction: the prediction ends there.
_HISTORY = re.compile(r"\s(?=\(?(Tried|Measured before|Measured on)\b)")


def prediction_text(path: Path) -> str | None:
    """The prediction a kernel file states: from the word "Prediction" (after its colon, when
    one follows within a few words) to the end of its paragraph; None if it states none."""
    for paragraph in header(path):
        if paragraph.startswith("("):
            continue
        m = _PREDICTION.search(paragraph)
        if m is None:
            continue
        rest = paragraph[m.end():]
        colon = rest.find(":")
        if 0 <= colon <= 40 and ". " not in rest[:colon]:   # "Prediction (batch 10,000): ..."
            text = rest[colon + 1:]
        else:      # "..., so the prediction there is no change." : the sentence from its start
            start = max(paragraph.rfind(". ", 0, m.start()) + 2, 0) if ". " in paragraph[:m.start()] else 0
            text = paragraph[start:]
        text = _HISTORY.split(text, maxsplit=1)[0].strip()
        return text[:1].upper() + text[1:]
    return None


_BUILDS_ON = re.compile(r"What changed from step (\d+)", re.IGNORECASE)


def builds_on(path: Path) -> int | None:
    """The step a kernel file says it changes ("What changed from step 6: ..."), or None when
    it names none. A branching ladder (lenet's steps 3, 4 and 6 each change step 1) is compared
    with that step, not with the row above it."""
    m = _BUILDS_ON.search(" ".join(header(path)))
    return int(m.group(1)) if m else None


def kernel_path(file: str | Path) -> Path:
    """A step's kernel file, given as "chapter/NN_name.cu" (relative to ``kernels/``) or a path."""
    path = Path(file)
    return path if path.is_absolute() else paths.KERNELS / path


# ---------------------------------------------------------------------------------------------
# Verdicts

def _fmt_ratio(r: float) -> str:
    return f"x{r:.2f}"


def _pct(fraction: float) -> str:
    """A margin as a percentage: one decimal below 10% (a 0.2% margin is not "0%")."""
    fraction = abs(fraction)
    if fraction < 0.0005:
        return "<0.1%"
    return f"{fraction:.1%}" if fraction < 0.095 else f"{fraction:.0%}"


#: A margin as the verdicts write it (for the chapters' own targets, e.g. alexnet's).
percent = _pct


def accepted(expect: Expect, ms: bool = False) -> str:
    """The band the rule accepts, as the verdict writes it: "0.344-0.573 ms", "1.44-2.14x",
    "at least 1.05x"."""
    number = (lambda v: f"{v:.3g}") if ms else (lambda v: f"{v:.2f}")   # noqa: E731
    unit = " ms" if ms else "x"
    low, high = expect.low, expect.high
    if low is not None and high is not None:
        return f"{number(low)}-{number(high)}{unit}"
    return f"at least {number(low)}{unit}" if low is not None else f"at most {number(high)}{unit}"


def margin(expect: Expect, value: float, ms: bool = False) -> str:
    """How far ``value`` (a speedup, or with ``ms`` a time) lies from what ``expect`` claims, in
    words: from the claim's own number ("20% longer than the 0.458 ms predicted"), inside or
    outside its own range ("4.0% above the predicted 2-2.5 ms"), or past or short of the rule's
    threshold ("4.8% past the 1.05x needed"). :func:`accepted` gives the band beside it."""
    unit = " ms" if ms else "x"
    if expect.center is not None:
        c = expect.center
        off = value / c - 1
        if ms:
            return f"{_pct(off)} {'longer' if off > 0 else 'shorter'} than the {c:.3g} ms predicted"
        if c == 1:
            return f"{_pct(off)} off the same time"
        return f"{_pct(off)} {'above' if off > 0 else 'below'} the {c:.3g}x predicted"
    if expect.nominal is not None:
        a, b = expect.nominal
        own = f"{a:.3g}{unit}" if b is None else f"{a:.3g}-{b:.3g}{unit}"
        if (a is None or value >= a) and (b is None or value <= b):
            return f"inside the predicted {own}" if b is not None else f"{_pct(value / a - 1)} past the predicted {own}"
        if b is None:
            return f"{_pct(value / a - 1)} short of the predicted {own}"
        over = value > b
        return f"{_pct(value / (b if over else a) - 1)} {'above' if over else 'below'} the predicted {own}"
    low, high = expect.low, expect.high
    fmt = (lambda v: f"{v:.3g}{unit}") if ms else (lambda v: f"{v:.2f}{unit}")   # noqa: E731
    if low is not None and high is not None:
        if low <= value <= high:
            return f"{_pct(min(value / low - 1, 1 - value / high))} inside the band's nearer end"
        over = value > high
        return f"{_pct(value / (high if over else low) - 1)} {'above' if over else 'below'} the band"
    if low is not None:
        return f"{_pct(value / low - 1)} {'past' if value >= low else 'short of'} the {fmt(low)} needed"
    return f"{_pct(value / high - 1)} {'under' if value <= high else 'over'} the {fmt(high)} allowed"


@dataclass(frozen=True)
class Judgement:
    """Where a measured value lies against the band a claim or a target accepts: ``side`` is
    "inside", "below" (under ``low``) or "above" (over ``high``); ``margin`` is its relative
    distance to the band's nearer edge, positive inside ("met by 3%") and negative outside
    ("missed by 3%"); ``held`` is true only inside the band, its edges included."""

    side: str
    margin: float

    @property
    def held(self) -> bool:
        return self.side == "inside"


def judge(value: float, low: float | None = None, high: float | None = None) -> Judgement:
    """The one rule every verdict of the book is reached by: a prediction "held" and a target is
    "met" only when ``value`` lies in [``low``, ``high``] (either end open), the band its line
    states; the margin is ``value`` against the nearer edge (``value / low - 1`` above a lower
    edge, ``1 - value / high`` under an upper one), so that a "held" at a band's edge reads as
    one. A value that is not a finite number raises: a step not measured is not judged."""
    if low is None and high is None:
        raise ValueError("judge needs a band: low and/or high")
    if low is not None and high is not None and low > high:
        raise ValueError(f"judge: low {low} is above high {high}")
    if value is None or not np.isfinite(value):
        raise ValueError(f"judge: the measured value is {value!r}, not a number (not measured: not judged)")
    if low is not None and value < low:
        return Judgement("below", value / low - 1)
    if high is not None and value > high:
        return Judgement("above", 1 - value / high)
    edges = ([value / low - 1] if low is not None else []) + ([1 - value / high] if high is not None else [])
    return Judgement("inside", min(edges))


def target_verdict(value: float, *, at_most: float | None = None, at_least: float | None = None,
                   unit: str = "", bound: str = "") -> tuple[bool, str]:
    """(met, text) for a target of at most ``at_most`` or at least ``at_least`` (:func:`judge`'s
    rule): "met by 3.1%: 1.143 ms, under 1.18 ms" or "missed by 2.0%: ...", the value and the bound
    with ``unit`` ("ms", "x"), or ``bound`` written out in its place."""
    if value is None or not np.isfinite(value):
        return False, NOT_MEASURED
    j = judge(value, at_least, at_most)
    limit = at_most if at_most is not None else at_least
    bound = bound or f"{limit:.4g}{' ' if unit and unit != 'x' else ''}{unit}"
    shown = f"{value:#.4g}{' ' if unit and unit != 'x' else ''}{unit}"
    if j.held:
        return True, f"met by {_pct(j.margin)}: {shown}, {'under' if at_most is not None else 'past'} {bound}"
    return False, f"missed by {_pct(-j.margin)}: {shown}, {'over' if at_most is not None else 'short of'} {bound}"


def verdict(expect: Expect | None, ratio: float, against_label: str, unit: str = "x",
            where: str = "") -> tuple[str, str]:
    """(outcome, text) for one claim: outcome is "held", "did not hold", "not judged" or
    "not measured"; text is the one-line verdict, with the measured ratio (``unit`` "x") or
    time (``unit`` "ms", for :func:`about_ms` claims) in it and its :func:`margin` beside it."""
    if expect is None:
        return "not judged", "no checkable claim declared"
    if not expect.judged:
        return "not judged", expect.note
    if ratio is None or not np.isfinite(ratio):
        return "not measured", f"{NOT_MEASURED} (this step or the one it is compared with)"
    ms = unit == "ms"
    side = judge(ratio, expect.low, expect.high).side
    below, above = side == "below", side == "above"
    if ms:
        measured = f"{ratio:#.3g} ms{where}"
        below, above = above, below        # a time above the range is slower than predicted
    else:
        measured = f"{_fmt_ratio(ratio)} vs {against_label}"
    measured = f"{measured}, {margin(expect, ratio, ms)}"
    band = f"accepted: {accepted(expect, ms)}"
    predicted = f" (predicted: {expect.claim}; {band})" if expect.claim else f" ({band})"
    if below:
        why = expect.because or "no reason written yet"
        return "did not hold", f"did not hold: {measured}, slower than predicted{predicted}, because {why}"
    if above:
        why = expect.because_faster or "no reason written yet"
        return "did not hold", f"did not hold: {measured}, faster than predicted{predicted}, because {why}"
    return "held", f"held: {measured}{predicted}"


def _row_times(measured: pd.DataFrame, case) -> dict:
    rows = measured if case is None else measured[measured["case"] == case]
    return {str(k): float(v) for k, v in zip(rows["step"], rows["median_ms"])}


def table(steps, measured: pd.DataFrame, expected: dict, *, main_case: str | None = None) -> pd.DataFrame:
    """The prediction-against-measurement table of one ladder.

    ``steps``: (key, what changed, kernel file) per ladder step, in ladder order (key: the step
    number or label the run and ``expected`` use; kernel file None: the prediction is the step's
    declared claims, for a step that is a launch form or a baseline rather than a kernel). ``measured``: the run's times, columns
    ``step`` (the key), ``median_ms`` and, when the ladder has several cases, ``case``.
    ``expected``: key -> :class:`Expect` (a step without one is shown, not judged).
    ``main_case``: the case whose times the table shows.
    """
    for column in ("step", "median_ms"):
        if column not in measured.columns:
            raise ValueError(f"the measured rows need a '{column}' column; they have {list(measured.columns)}")
    measured = measured.assign(step=measured["step"].map(str))
    if "case" in measured.columns and main_case is None:
        raise ValueError(f"the measured rows have several cases {sorted(measured['case'].unique())}: "
                         "name the main_case the table shows")
    main = _row_times(measured, main_case if "case" in measured.columns else None)
    keys = [str(k) for k, _, _ in steps]
    unknown = sorted(set(map(str, expected)) - set(keys))
    if unknown:
        raise ValueError(f"predictions declared for steps {unknown}, which are not in the ladder {keys}")
    shown = [k for k in keys if k in main]
    out = []
    for key, what, file in steps:
        key = str(key)
        declared = expected.get(key, expected.get(_number(key)))
        claims = () if declared is None else (declared if isinstance(declared, tuple) else (declared,))
        # A step without a kernel file of its own (file None: a baseline, a launch form) states its
        # prediction in its declared claims.
        text = (prediction_text(kernel_path(file)) if file else
                "; ".join(e.claim for e in claims if e.judged)) or NO_PREDICTION
        t = main.get(key, np.nan)
        pos = shown.index(key) if key in shown else None
        prev = main[shown[pos - 1]] if pos else np.nan
        # The step this one changes, as its file says; else (or when that step is not in the
        # table) the row above.
        named = builds_on(kernel_path(file)) if pos and file else None
        base = next((k for k in shown[:pos] if _number(k) == named), None) if named is not None else None
        base = base if base is not None else (shown[pos - 1] if pos else None)
        first = main[shown[0]] if shown else np.nan
        judged = [_judge(e, key, keys, measured, main_case) for e in claims]
        if not claims:
            outcome, line, ratio = "not judged", (NO_PREDICTION if text == NO_PREDICTION
                                                  else "no checkable claim declared"), np.nan
        else:
            outcomes = [o for o, _, _ in judged]
            outcome = ("did not hold" if "did not hold" in outcomes else "not measured" if "not measured" in outcomes
                       else "held" if "held" in outcomes else "not judged")
            line = "; ".join(l for _, l, _ in judged)
            ratio = judged[0][2]
        out.append({"step": key, "what changed": what, "prediction (kernel file)": text,
                    "claim checked": "; ".join(e.claim for e in claims),
                    "time (ms)": t, "vs previous": prev / t if pos else np.nan,
                    "builds on": _step_name(base) if base is not None else "",
                    "vs the step it builds on": main[base] / t if base is not None else np.nan,
                    "vs first": first / t if pos is not None else np.nan,
                    "ratio judged": ratio, "outcome": outcome, "verdict": line})
    return pd.DataFrame(out)


def _judge(expect: Expect, key: str, keys: list, measured: pd.DataFrame, main_case):
    """(outcome, verdict line, measured ratio or time) of one claim about step ``key``."""
    if not expect.judged:
        outcome, line = verdict(expect, np.nan, "")
        return outcome, line, np.nan
    several_cases = "case" in measured.columns
    case = expect.case if expect.case is not None else (main_case if several_cases else None)
    times_ = _row_times(measured, case if several_cases else None)
    where = f" ({case})" if case is not None and case != main_case else ""
    if expect.than == TIME:
        value = times_.get(key, np.nan)
        return (*verdict(expect, value, "", unit="ms", where=where), value)
    if expect.than is None:
        case_keys = [k for k in keys if k in times_]
        j = case_keys.index(key) if key in case_keys else None
        base = times_[case_keys[j - 1]] if j else np.nan
        against = f"step {_step_name(case_keys[j - 1])}" if j else "the previous step"
    else:
        base = times_.get(str(expect.than), np.nan)
        against = f"step {_step_name(expect.than)}"
    ratio = base / times_[key] if key in times_ else np.nan
    return (*verdict(expect, ratio, against + where), ratio)


def _number(key: str):
    try:
        return int(float(key))
    except ValueError:
        return key


OUTCOME_COLORS = {"held": "#DFF0D8", "did not hold": "#F8D7DA", "not judged": "#F2F2F2",
                  "not measured": "#F2F2F2"}


def styled(frame: pd.DataFrame, caption: str = ""):
    """The table as the notebook shows it: prediction, time, ratios, verdict; rows coloured by
    outcome; the rules and the run's caption under it."""
    shown = frame[["step", "what changed", "prediction (kernel file)", "time (ms)", "builds on",
                   "vs the step it builds on", "verdict"]]
    colors = frame["outcome"].map(OUTCOME_COLORS).fillna("")

    def color_rows(_):
        return pd.DataFrame({c: "background-color: " + colors if c == "verdict" else "" for c in shown.columns},
                            index=shown.index)

    return (shown.style.format({"time (ms)": "{:.4g}", "vs the step it builds on": "x{:.2f}"}, na_rep="")
            .apply(color_rows, axis=None).hide(axis="index")
            .set_properties(subset=["prediction (kernel file)", "verdict"],
                            **{"text-align": "left", "white-space": "normal", "min-width": "16em"})
            .set_caption(f"{RULES} {caption}".strip()))


def summary(frame: pd.DataFrame) -> dict:
    """Counts of each outcome, for the prose: held, did_not_hold, not_judged."""
    counts = frame["outcome"].value_counts()
    return {"held": int(counts.get("held", 0)), "did_not_hold": int(counts.get("did not hold", 0)),
            "not_judged": int(counts.get("not judged", 0) + counts.get("not measured", 0)),
            "judged": int(counts.get("held", 0) + counts.get("did not hold", 0))}


def glue_verdicts(frame: pd.DataFrame, prefix: str) -> dict:
    """Glue each step's verdict line as ``{prefix}_verdict_{step}`` and its outcome as
    ``{prefix}_outcome_{step}``, and the outcome counts as ``{prefix}_held`` etc."""
    from .prose import glue
    values = {}
    for _, row in frame.iterrows():
        key = re.sub(r"\W", "_", str(row["step"]))
        values[f"{prefix}_verdict_{key}"] = row["verdict"]
        values[f"{prefix}_outcome_{key}"] = row["outcome"]
    values.update({f"{prefix}_{k}": v for k, v in summary(frame).items()})
    return glue(**values)


def ladder_steps(step_list, chapter_files: dict | None = None, key=lambda step: step.number):
    """(key, what changed, kernel file) for a ladder's declared steps (objects with ``number``,
    ``title`` and ``file``); one entry per number (the first). ``key(step)``: the step as the
    measured rows name it."""
    seen, out = set(), []
    for s in step_list:
        key_ = str(key(s))
        if key_ in seen:
            continue
        seen.add(key_)
        out.append((key_, s.title, s.file))
    return out


__all__ = ["Expect", "faster", "slower", "same", "several", "about", "times", "unjudged", "header",
           "prediction_text", "verdict", "margin", "accepted", "percent", "table", "styled", "summary", "glue_verdicts", "RULES",
           "NO_PREDICTION"]
