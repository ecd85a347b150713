"""The windows' percentile digest: per bundle and window, a histogram of log-spaced buckets (DDSketch's).

Why this digest: a window slides, so what leaves it must come out of the digest. A histogram's counts
subtract exactly, where a merged quantile summary (Spark's percentile_approx, KLL, t-digest) cannot take
samples back; so an incremental run adds the new samples' buckets and subtracts those of the samples
that left the window, and gets exactly the histogram a full recompute builds from the window's samples.

Error bound: bucket i holds the values in (γ^(i−1), γ^i] with γ = (1 + α)/(1 − α) and reports
2·γ^i/(γ + 1), within a relative ``ALPHA`` (1%) of every value it holds. A percentile is read as the
bucket holding the sample of rank ⌈q·n⌉ — the sample percentile_approx names — so p50, p95 and max
are within 1% of the exact sample value (0 stays 0); the counts are exact.

A histogram is kept in its bundle's state row as the count at 0 and the counts of the buckets from its
lowest (``fold.py``); ``partition_fold.py`` merges and reads them. numpy only: this runs on the executors.
"""

from __future__ import annotations

import math

import numpy as np

ALPHA = 0.01
GAMMA = (1 + ALPHA) / (1 - ALPHA)
SPAN = 2048  # a bucket above 0 is within ±(SPAN − 1): 1e-9 is bucket −1036, SPAN − 1 holds values up to 6e17


def bucket(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each value's bucket, and whether it is the bucket of 0 (a value at or below 1e-9, or NaN)."""
    zero = ~(values > 1e-9)
    index = np.ceil(np.log(np.where(zero, 1.0, values)) / math.log(GAMMA))
    return np.minimum(index, SPAN - 1).astype(np.int64), zero


def value_of(buckets: np.ndarray) -> np.ndarray:
    """The value a bucket above 0 reports: within ALPHA of every value in it."""
    return 2 * np.power(GAMMA, buckets.astype(np.float64)) / (GAMMA + 1)


def rank(samples: np.ndarray, q: float) -> np.ndarray:
    """The rank max(1, ⌈q·n⌉) of the sample percentile q names (percentile_approx's)."""
    return np.maximum(1, np.ceil(samples * q)).astype(np.int64)
