"""The hopper chapter's prediction exercise: the reader's guesses for step 3, made before its time
is shown, beside the run. (The chapter's kernel exercise, step 3's producer, is a step of
``hopper.CHAPTER``: ``CHAPTER.step("E3")``, checked as the chapter checks its steps.)
"""
from __future__ import annotations

import pandas as pd


def your_prediction(numbers: dict, blocks_02=None, blocks_03=None, speedup_03=None) -> pd.DataFrame:
    """The reader's prediction for step 3 (made before its time is shown) beside the run:
    blocks of steps 2 and 3 per SM (from the run's resources, by the SM's limits) and step 2's
    time over step 3's. ``numbers`` is the chapter's ``views.numbers(run)``; a prediction not
    made (None) reads "not made"."""
    rows = [("blocks of step 2 per SM", blocks_02, numbers["blocks02"]),
            ("blocks of step 3 per SM", blocks_03, numbers["blocks03"]),
            ("step 2's time / step 3's", speedup_03, numbers["t02"] / numbers["t03"])]
    out = pd.DataFrame([{"": what, "your prediction": "not made" if mine is None else mine,
                         "the run": round(float(run), 2) if isinstance(run, float) else run}
                        for what, mine, run in rows]).set_index("")
    return out
