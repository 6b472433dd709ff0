"""Numbers the book's prose quotes, handed to myst-nb's ``glue``.

A markdown cell never types a measured number: a code cell computes it from
the run it loaded and calls :func:`glue`, and the text writes
``{glue:text}`name:.2f```. The same goes for datasheet facts
(:mod:`gpulab.datasheet`), so each is typed once.
"""
from __future__ import annotations

import numbers

import numpy as np


def plain(value):
    """``value`` as a plain Python int, float or str (glue stores the repr,
    and ``np.float64(1.5)`` would not format as a number)."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        return value
    raise TypeError(f"glue takes numbers and strings, got {type(value).__name__}: {value!r}")


class Glued(dict):
    """The plain values :func:`glue` stored, for asserts and prints. A notebook
    shows nothing for it when a ``glue(...)`` call ends a cell: the values are
    for the prose, which quotes them formatted, not for a raw dict of reprs."""

    def _ipython_display_(self):
        pass


def glue(**values) -> Glued:
    """Glue every ``name=value`` (numbers and strings) for ``{glue:text}`` roles,
    without displaying them; return the plain values (for asserts and prints)."""
    from myst_nb import glue as _glue
    out = Glued()
    for name, value in values.items():
        out[name] = plain(value)
        _glue(name, out[name], display=False)
    return out


#: What the prose says in place of a number the run could not measure (a step or batch a
#: smaller GPU skipped).
NOT_MEASURED = "not measured on this GPU"


def known(**values) -> dict:
    """``values`` for :func:`glue`, each missing number (None or NaN) replaced by :data:`NOT_MEASURED`."""
    return {k: NOT_MEASURED if v is None or (isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral)
                                             and np.isnan(v)) else v
            for k, v in values.items()}


def number(value, spec: str, unit: str = "") -> str:
    """``value`` formatted with ``spec`` and followed by ``unit``, or :data:`NOT_MEASURED` when it is
    missing (None or NaN): for a number the prose quotes from a run that may lack it, glued as text
    (``{glue:text}`name``` with no format: myst-nb cannot format a string as a number)."""
    if value is None or (isinstance(value, numbers.Real) and value != value):
        return NOT_MEASURED
    return f"{plain(value):{spec}}{unit}"


def first(rows, column: str) -> float:
    """The first ``column`` value of ``rows`` (a DataFrame, or one row as a Series) as a float, or
    NaN when there is none (None or no row: the run skipped that step or batch)."""
    if rows is None or not len(rows):
        return float("nan")
    return float(rows[column].iloc[0] if hasattr(rows, "columns") else rows[column])


def whole(value):
    """``value`` rounded to an int, or NaN when it is missing (for :func:`known`)."""
    return float("nan") if value is None or value != value else int(round(value))
