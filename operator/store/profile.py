"""Read the load profile the Spark job wrote (small Parquet datasets) into the strategies' LoadProfile."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import structlog

from pulsar_lb_operator.store.history import _filesystem
from pulsar_lb_operator.strategies import NUM_LONG_SAMPLES as LONG_SAMPLES_CAP
from pulsar_lb_operator.strategies import CostModel, HotBundle, LoadProfile, MessageAverage

log = structlog.get_logger(__name__)


def read_profile(uri: str) -> LoadProfile | None:
    """The profile at ``uri``, or None (logged) when there is none yet or it cannot be read."""
    fs, root = _filesystem(uri)
    root = root.rstrip("/")

    def rows(name: str) -> list[dict[str, Any]]:
        path = f"{root}/{name}"
        if fs.get_file_info(path).type == pafs.FileType.NotFound:
            raise FileNotFoundError(path)
        table: list[dict[str, Any]] = pq.read_table(path, filesystem=fs).to_pylist()
        return table

    try:
        averages = rows("bundle_averages")
        hot = rows("hot_bundles")
        models = rows("cost_model")
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
                    r["samples"],
                    tuple(r.get("centred") or ()),  # a profile written before the sums were kept has none
                )
                for r in models
            }
        ),
        generated_at=int(stamp // 1_000_000),
    )
