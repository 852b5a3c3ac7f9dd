"""Intervals for the course's claims: a sentence that says "A beats B" or "about 2" is asserted
against an interval, not a point estimate.

Three tools, each small and each backed by ``scipy.stats`` (no hand-written resampling):

- :func:`bootstrap_ci` — a confidence interval for a statistic of one sample (default: the mean),
  by ``scipy.stats.bootstrap`` (BCa, seeded, so a notebook rerun prints the same interval).
- :func:`paired_diff_ci` — the interval of ``mean(a - b)`` for paired measurements (the same seed,
  window or repeat measured under both settings): a bootstrap over the pairs.
- :func:`loglog_slope` — the slope of ``log y`` against ``log x`` (how a cost grows with size:
  2 for N², 1 for N) with its t-interval from ``scipy.stats.linregress``; pass every repeat
  (``x`` repeated) so the interval carries the timing noise.
- :func:`k_of_n` — "k of n seeds" with the exact (Clopper-Pearson) interval of the success rate,
  for claims such as "two heads solve the task" that hold in some runs and not in others.

Each returns a small frozen dataclass whose ``str`` is the sentence a notebook prints, and whose
fields (``low``, ``high``, ``k``, ``n``) a notebook asserts on, e.g.
``assert paired_diff_ci(mqa, mha).low > 0``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _scipy_stats

__all__ = ["Interval", "KOfN", "bootstrap_ci", "k_of_n", "loglog_slope", "paired_diff_ci"]

# scipy >= 1.15 names the generator `rng`; 1.10-1.14 call it `random_state`.
_BOOTSTRAP_TAKES_RNG = "rng" in inspect.signature(_scipy_stats.bootstrap).parameters


@dataclass(frozen=True)
class Interval:
    """A point estimate with its two-sided confidence interval ``[low, high]``."""

    estimate: float
    low: float
    high: float
    confidence: float
    n: int

    def excludes(self, value: float = 0.0) -> bool:
        """True when ``value`` lies outside ``[low, high]`` (e.g. a difference is not zero)."""
        return not (self.low <= value <= self.high)

    def __str__(self) -> str:
        return (
            f"{self.estimate:.4g} [{self.confidence:.0%} CI {self.low:.4g}, {self.high:.4g}]"
            f" (n={self.n})"
        )


@dataclass(frozen=True)
class KOfN:
    """``k`` successes out of ``n`` runs, with the exact interval ``[low, high]`` of the rate."""

    k: int
    n: int
    low: float
    high: float
    confidence: float

    @property
    def rate(self) -> float:
        return self.k / self.n

    def __str__(self) -> str:
        return (
            f"{self.k} of {self.n} ({self.confidence:.0%} CI of the rate "
            f"{self.low:.2f}-{self.high:.2f})"
        )


def _sample(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    """1-D float64 array of at least 2 finite values, or a ValueError naming the argument."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(
            f"{name} must be a 1-D sequence of at least 2 numbers (shape (N,)), "
            f"got shape {tuple(x.shape)}"
        )
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} must be finite, got {x.tolist()}")
    return x


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    statistic: Callable[..., float] = np.mean,
    *,
    confidence: float = 0.95,
    n_resamples: int = 9999,
    seed: int = 0,
    method: str = "BCa",
) -> Interval:
    """Bootstrap confidence interval of ``statistic(values)``.

    Shape: values (N,) -> an :class:`Interval` (``estimate`` = ``statistic(values)``).

    ``statistic`` must accept ``axis=`` (numpy reductions do), as ``scipy.stats.bootstrap``
    vectorises over resamples. Seeded: the same input gives the same interval. When every value is
    equal the interval is that value (the bootstrap distribution is degenerate).
    """
    x = _sample(values, "values")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    estimate = float(statistic(x))
    if np.all(x == x[0]):
        return Interval(estimate, estimate, estimate, confidence, x.size)
    generator = np.random.default_rng(seed)
    seeding = {"rng": generator} if _BOOTSTRAP_TAKES_RNG else {"random_state": generator}
    result = _scipy_stats.bootstrap(
        (x,),
        statistic,
        confidence_level=confidence,
        n_resamples=n_resamples,
        method=method,
        **seeding,
    )
    low, high = result.confidence_interval
    return Interval(estimate, float(low), float(high), confidence, x.size)


def paired_diff_ci(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    n_resamples: int = 9999,
    seed: int = 0,
) -> Interval:
    """Interval of the mean paired difference ``mean(a - b)``.

    Shape: a (N,), b (N,) -> an :class:`Interval`. ``a[i]`` and ``b[i]`` are the same unit (seed,
    window, interleaved repeat) measured two ways; pairing removes what the unit shares.
    ``.low > 0`` says "a is larger than b" at that confidence; ``.excludes(0)`` says "they differ".
    """
    x, y = _sample(a, "a"), _sample(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"a and b must pair up, both shape (N,): got a {x.shape} and b {y.shape}")
    return bootstrap_ci(x - y, confidence=confidence, n_resamples=n_resamples, seed=seed)


def k_of_n(successes: Sequence[bool] | np.ndarray, *, confidence: float = 0.95) -> KOfN:
    """ "k of n seeds" with the exact Clopper-Pearson interval of the success rate.

    Shape: successes (N,) booleans (one per seed) -> a :class:`KOfN`.
    """
    s = np.asarray(successes)
    if s.ndim != 1 or s.size < 1 or s.dtype != np.bool_:
        raise ValueError(
            f"successes must be a 1-D sequence of booleans (shape (N,)), "
            f"got dtype {s.dtype} and shape {tuple(s.shape)}"
        )
    k, n = int(s.sum()), int(s.size)
    ci = _scipy_stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return KOfN(k, n, float(ci.low), float(ci.high), confidence)


def loglog_slope(
    x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, *, confidence: float = 0.95
) -> Interval:
    """Slope of ``log(y)`` against ``log(x)`` with its t-interval (least squares).

    Shape: x (N,), y (N,) positive -> an :class:`Interval` of the exponent ``p`` in ``y ~ x**p``.
    Give every repeat as its own point (sizes repeated), not their means, so the interval
    reflects the scatter; at least 3 points.
    """
    lx, ly = _sample(x, "x"), _sample(y, "y")
    if lx.shape != ly.shape or lx.size < 3:
        raise ValueError(f"x and y must be (N,) with N >= 3, got x {lx.shape} and y {ly.shape}")
    if np.any(lx <= 0) or np.any(ly <= 0):
        raise ValueError("x and y must be positive (a log-log fit)")
    fit = _scipy_stats.linregress(np.log(lx), np.log(ly))
    half = float(_scipy_stats.t.ppf(0.5 + confidence / 2, lx.size - 2)) * float(fit.stderr)
    slope = float(fit.slope)
    return Interval(slope, slope - half, slope + half, confidence, lx.size)
