"""broker_profile's numpy arithmetic without Spark: the exact p95 (the sample of rank ⌈0.95·n⌉), the mean
over the window and the population std and CV over the short window, per broker."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pyarrow as pa
import pytest

from pulsar_lb_operator.spark_jobs.broker_usage import profile_table


def test_per_broker_mean_p95_and_short_window_jitter():
    rng = np.random.default_rng(3)
    rows = [(b, t, float(rng.uniform(0, 100))) for b in ("b1", "b2") for t in range(1, 101)]
    rows += [("idle", t, 0.0) for t in range(1, 11)] + [("b1", 50, None)]  # a null usage is skipped
    table = pa.table({"broker": [r[0] for r in rows], "time": [r[1] for r in rows], "usage": [r[2] for r in rows]})
    out = {r["broker"]: r for r in profile_table(table, short_since=70).to_pylist()}
    for broker in ("b1", "b2"):
        usage = [u for b, _, u in rows if b == broker and u is not None]
        short = [u for b, t, u in rows if b == broker and u is not None and t > 70]
        assert out[broker]["samples"] == 100
        assert out[broker]["usage_mean"] == pytest.approx(statistics.fmean(usage))
        assert out[broker]["usage_p95"] == sorted(usage)[math.ceil(0.95 * len(usage)) - 1]
        assert out[broker]["usage_std_short"] == pytest.approx(statistics.pstdev(short))
        assert out[broker]["usage_cv_short"] == pytest.approx(statistics.pstdev(short) / statistics.fmean(short))
    assert out["idle"]["usage_p95"] == 0.0 and out["idle"]["usage_cv_short"] is None  # no samples in the short window
