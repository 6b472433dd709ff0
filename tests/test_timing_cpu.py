"""The timing module's statistics, without a GPU."""
import numpy as np
import pytest

from gpulab import timing


def test_median_ci_uses_order_statistics():
    # n = 100: ranks 50 -/+ 1.96 * 5 -> the 40th and 60th smallest (0-based 40 and 59).
    lo, hi = timing.median_ci(np.arange(100.0))
    assert (lo, hi) == (40.0, 59.0)
    assert np.isnan(timing.median_ci([1.0, 2.0, 3.0])[0]), "too few samples for a 95% interval"


def test_ci_half_width_is_relative_to_the_median():
    samples = np.full(50, 2.0)
    assert timing.ci_half_width(samples) == 0.0
    spread = np.linspace(0.9, 1.1, 101)
    assert 0.0 < timing.ci_half_width(spread) < 0.05
    assert np.isnan(timing.ci_half_width([1.0]))


def test_rows_say_whether_l2_was_flushed():
    row = timing.Timing([1.0, 1.1, 0.9], l2_flushed=True).row("ladder", "k", 10)
    assert row["l2_flushed"] is True
    assert list(row)[:len(timing.TIMING_COLUMNS)] == timing.TIMING_COLUMNS
    assert timing.Timing([1.0]).row("ladder", "k", 10)["l2_flushed"] is False


def test_the_stop_rule_is_stated():
    text = timing.STOP_RULE.describe()
    assert "95% confidence interval" in text and "±1%" in text
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        timing._rule(0, 3, None, 0.01, 0.95)
