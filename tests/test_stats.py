"""mha_course.analysis.stats against known cases: intervals that must cover the truth, exact binomial
bounds from their closed forms, slopes of exact power laws, and errors that name the argument."""

from __future__ import annotations

import numpy as np
import pytest

from mha_course.analysis import stats
from mha_course.analysis.stats import bootstrap_ci, k_of_n, loglog_slope, paired_diff_ci


def test_bootstrap_mean_interval_covers_and_matches_the_normal_theory_width():
    rng = np.random.default_rng(1)
    x = rng.normal(3.0, 1.0, size=400)
    ci = bootstrap_ci(x)
    assert ci.low < 3.0 < ci.high
    assert ci.estimate == pytest.approx(x.mean())
    # the 95 % t-interval of a mean has half-width 1.96 s / sqrt(n); the bootstrap agrees
    half = 1.96 * x.std(ddof=1) / np.sqrt(x.size)
    assert (ci.high - ci.low) / 2 == pytest.approx(half, rel=0.1)
    assert bootstrap_ci(x) == ci  # seeded: a rerun prints the same interval


def test_bootstrap_of_a_constant_is_that_constant_and_median_works():
    assert bootstrap_ci([2.0, 2.0, 2.0]).low == bootstrap_ci([2.0, 2.0, 2.0]).high == 2.0
    ci = bootstrap_ci(np.arange(101.0), np.median, method="percentile")
    assert ci.estimate == 50.0 and ci.low < 50.0 < ci.high


def test_paired_difference_sees_what_unpaired_noise_hides():
    rng = np.random.default_rng(0)
    unit = rng.normal(0.0, 10.0, size=30)  # large shared per-seed effect
    a, b = unit + 0.5 + rng.normal(0, 0.1, 30), unit + rng.normal(0, 0.1, 30)
    ci = paired_diff_ci(a, b)
    assert ci.low > 0 and ci.excludes(0.0)
    assert ci.low < 0.5 < ci.high
    assert not paired_diff_ci(b + rng.normal(0, 1e-3, 30), b).low > 0.01


def test_k_of_n_exact_bounds():
    r = k_of_n([True] * 5 + [False])
    assert (r.k, r.n) == (5, 6) and r.rate == pytest.approx(5 / 6)
    # Clopper-Pearson closed forms: k = n -> low = (alpha/2)^(1/n), high = 1
    full = k_of_n(np.ones(6, dtype=bool))
    assert full.low == pytest.approx(0.025 ** (1 / 6)) and full.high == 1.0
    none = k_of_n(np.zeros(6, dtype=bool))
    assert none.low == 0.0 and none.high == pytest.approx(1 - 0.025 ** (1 / 6))
    assert str(r).startswith("5 of 6")


def test_loglog_slope_of_exact_and_noisy_power_laws():
    n = np.array([64, 128, 256, 512, 1024] * 3, dtype=float)
    exact = loglog_slope(n, 3e-9 * n**2)
    assert exact.estimate == pytest.approx(2.0) and exact.high - exact.low < 1e-6
    rng = np.random.default_rng(0)
    noisy = loglog_slope(n, n**1.5 * np.exp(rng.normal(0, 0.2, n.size)))
    assert noisy.low < 1.5 < noisy.high and noisy.high - noisy.low < 0.5


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: bootstrap_ci([1.0]), "values"),
        (lambda: bootstrap_ci([[1.0, 2.0]]), "values"),
        (lambda: bootstrap_ci([1.0, np.nan]), "values"),
        (lambda: paired_diff_ci([1.0, 2.0], [1.0, 2.0, 3.0]), "a and b"),
        (lambda: k_of_n([1, 0, 1]), "successes"),
        (lambda: loglog_slope([1.0, 2.0, 3.0], [1.0, -2.0, 3.0]), "positive"),
    ],
)
def test_errors_name_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_exported_from_the_package():
    import mha_course

    assert mha_course.bootstrap_ci is stats.bootstrap_ci
    assert mha_course.k_of_n is stats.k_of_n
