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
lowest (``fold.py``). DataFrame API only: nothing of ours runs on the executors.
"""

from __future__ import annotations

import math

from pyspark.sql import Column
from pyspark.sql import functions as F

ALPHA = 0.01
GAMMA = (1 + ALPHA) / (1 - ALPHA)
ZERO = -(2**30)  # the bucket of 0 (and of anything below 1e-9)
SPAN = 2048  # a bucket above 0 is within ±(SPAN − 1): 1e-9 is bucket −1036, SPAN − 1 holds values up to 6e17


def bucket(value: Column) -> Column:
    index = F.least(F.ceil(F.log(value) / math.log(GAMMA)), F.lit(SPAN - 1)).cast("int")
    return F.when(value > 1e-9, index).otherwise(F.lit(ZERO))


def value_of(index: Column) -> Column:
    """The value a bucket reports: within ALPHA of every value in it."""
    return F.when(index == ZERO, F.lit(0.0)).otherwise(2 * F.pow(F.lit(GAMMA), index) / (GAMMA + 1))


def rank(samples: Column, q: float) -> Column:
    """The rank max(1, ⌈q·n⌉) of the sample percentile q names (percentile_approx's)."""
    return F.greatest(F.lit(1), F.ceil(samples * F.lit(q)))
