"""The timing module's statistics, without a GPU."""
import numpy as np
import pytest

from gpulab import timing


def test_median_ci_uses_order_statistics():
    # n = 100: 1 - 2 P(B <= 39) = 0.965 and 1 - 2 P(B <= 40) = 0.943 for B ~ Binomial(100, 1/2),
    # so the 95% interval is the 40th and 61st smallest (0-based 39 and 60).
    lo, hi = timing.median_ci(np.arange(100.0))
    assert (lo, hi) == (39.0, 60.0)
    # Four or five samples span the median 87.5% and 93.75% of the time: no 95% interval yet.
    for n in (3, 4, 5):
        assert np.isnan(timing.median_ci(np.arange(float(n)))[0]), f"too few samples ({n}) for a 95% interval"
    assert timing.median_ci(np.arange(6.0)) == (0.0, 5.0)


@pytest.mark.parametrize("n", [6, 9, 20, 41])
def test_the_median_ci_covers_the_true_median_as_often_as_it_says(n):
    # Skewed samples with a known median (ln 2 for the unit exponential): the interval must hold it
    # in at least 95% of draws (4,000 draws: the estimate's own standard error is about 0.35%).
    rng = np.random.default_rng(n)
    draws = rng.exponential(size=(4000, n))
    cis = np.array([timing.median_ci(d) for d in draws])
    covered = ((cis[:, 0] <= np.log(2)) & (np.log(2) <= cis[:, 1])).mean()
    assert covered >= 0.94, covered


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
