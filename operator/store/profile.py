"""Read the load profile the Spark job wrote (small Parquet datasets) into the strategies' LoadProfile."""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import structlog

from pulsar_lb_operator.store.history import _filesystem
from pulsar_lb_operator.strategies import NUM_LONG_SAMPLES as LONG_SAMPLES_CAP
from pulsar_lb_operator.strategies import CostModel, HotBundle, LoadProfile, MessageAverage

log = structlog.get_logger(__name__)


AVERAGES = ("samples", "long_msg_rate_in", "long_msg_rate_out", "long_msg_throughput_in", "long_msg_throughput_out")
HOT = ("hot_share", "boundary")
MODEL = ("intercept", "per_msg_rate", "per_byte_in", "per_byte_out", "r2", "samples")
CENTRED = 9  # CostModel.centred: six traffic sums and three traffic × usage sums


def read_profile(uri: str) -> LoadProfile | None:
    """The profile at ``uri``, or None (logged) when there is none yet or it cannot be read.

    A file is anyone's to write: a table without a column the planner needs makes the whole profile unreadable
    (planning goes on from the snapshot), and a row with a null, NaN or a non-number where a number belongs is left
    out with a warning (its bundle or broker is planned as if the profile said nothing of it)."""
    fs, root = _filesystem(uri)
    root = root.rstrip("/")

    def rows(name: str, keys: tuple[str, ...], numbers: tuple[str, ...]) -> list[dict[str, Any]]:
        path = f"{root}/{name}"
        if fs.get_file_info(path).type == pafs.FileType.NotFound:
            raise FileNotFoundError(path)
        table = pq.read_table(path, filesystem=fs)
        missing = [c for c in (*keys, *numbers) if c not in table.column_names]
        if missing:
            raise ValueError(f"{name} has no column {', '.join(missing)}")
        kept = [
            r
            for r in table.to_pylist()
            if all(isinstance(r[k], str) for k in keys) and _finite([r[n] for n in numbers])
        ]
        if len(kept) < table.num_rows:
            log.warning(
                "load profile rows left out: a null or a non-number where a number belongs",
                table=name,
                rows=table.num_rows - len(kept),
            )
        return kept

    try:
        averages = rows("bundle_averages", ("bundle",), AVERAGES)
        hot = rows("hot_bundles", ("bundle",), HOT)
        models = rows("cost_model", ("broker", "resource"), MODEL)
        stamp = fs.get_file_info(f"{root}/cost_model").mtime_ns or 0
    except (FileNotFoundError, OSError, ValueError) as exc:
        log.info("no load profile; planning on the latest snapshot only", uri=uri, reason=str(exc))
        return None
    long_term = {
        r["bundle"]: MessageAverage(
            LONG_SAMPLES_CAP,
            min(int(r["samples"]), LONG_SAMPLES_CAP),
            r["long_msg_rate_in"],
            r["long_msg_rate_out"],
            r["long_msg_throughput_in"],
            r["long_msg_throughput_out"],
        )
        for r in averages
    }
    return LoadProfile(
        long_term=MappingProxyType(long_term),
        hot=MappingProxyType({r["bundle"]: HotBundle(r["hot_share"], int(r["boundary"])) for r in hot}),
        cost_models=MappingProxyType(
            {
                (r["broker"], r["resource"]): CostModel(
                    r["intercept"],
                    r["per_msg_rate"],
                    r["per_byte_in"],
                    r["per_byte_out"],
                    r["r2"],
                    int(r["samples"]),
                    _centred(r.get("centred")),  # a profile written before the sums were kept has none
                )
                for r in models
            }
        ),
        generated_at=int(stamp // 1_000_000),
    )


def _finite(values: Sequence[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values)


def _centred(values: Any) -> tuple[float, ...]:
    """The fit's sums to pool (``CostModel.centred``); none — the fit is then used alone — unless all nine are
    finite numbers."""
    if isinstance(values, list | tuple) and len(values) == CENTRED and _finite(values):
        return tuple(float(v) for v in values)
    return ()
