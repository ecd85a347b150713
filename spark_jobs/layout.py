"""The history store's file layout, shared by its writer (``operator/store/history.py``) and the Spark job.

No pyspark here: the operator's store imports it without starting a JVM.

    <kind>/date=YYYY-MM-DD/hour=HH/part-<epoch ms>-<id>.parquet    one cycle's samples
    <kind>/date=YYYY-MM-DD/hour=HH/compacted-<epoch ms>.parquet    a closed hour, compacted
    bundle_hours/date=YYYY-MM-DD/compacted-<epoch ms>.parquet      per bundle and hour, one file a day

A file's stamp is the newest sample time it holds (a cycle's samples all have its time; a compacted file
takes its newest input's), so the newest sample of a history is read from its names.

A reader takes, in each partition, the files :func:`visible` names: the newest compacted file and the
cycle files stamped after it. Compaction's rename is its one atomic step, so a reader sees the cycle
files or the compacted file, never both, never neither.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable

HOUR_MS = 3_600_000
DAY_MS = 86_400_000
_STAMP = re.compile(r"^(part|compacted)-(\d+)")
_PARTITION = re.compile(r"/date=(\d{4}-\d{2}-\d{2})(?:/hour=(\d{2}))?(?:/|$)")


def stamp_of(name: str) -> int:
    """The epoch-ms stamp in a data file's name (``part-<ms>-…``, ``compacted-<ms>``); 0 for any other name."""
    match = _STAMP.match(name)
    return int(match.group(2)) if match else 0


def is_data_file(name: str) -> bool:
    return name.endswith(".parquet") and not name.startswith((".", "_"))


def visible(names: Iterable[str]) -> list[str]:
    """The data files of one partition a reader takes: the newest compacted file and the files stamped after
    it, or every data file when nothing is compacted yet."""
    names = [n for n in names if is_data_file(n)]
    compacted = [n for n in names if n.startswith("compacted-")]
    if not compacted:
        return sorted(names)
    newest = max(compacted, key=stamp_of)
    upto = stamp_of(newest)
    return sorted([newest, *(n for n in names if not n.startswith("compacted-") and stamp_of(n) > upto)])


def partition_span(path: str) -> tuple[int, int] | None:
    """[start, end) in epoch ms (UTC) of the date or date/hour partition a path lies in; None outside any."""
    match = _PARTITION.search(path)
    if match is None:
        return None
    day = datetime.datetime.strptime(match.group(1), "%Y-%m-%d").replace(tzinfo=datetime.UTC)
    start = int(day.timestamp() * 1000)
    if match.group(2) is None:
        return start, start + DAY_MS
    start += int(match.group(2)) * HOUR_MS
    return start, start + HOUR_MS


def partition_of(time_ms: int) -> str:
    """The date/hour partition a sample taken at ``time_ms`` goes to."""
    when = datetime.datetime.fromtimestamp(time_ms / 1000, tz=datetime.UTC)
    return f"date={when:%Y-%m-%d}/hour={when:%H}"


def overlaps(path: str, since_ms: int | None, until_ms: int | None) -> bool:
    """Whether the partition of ``path`` may hold a sample with since < time ≤ until (a path outside any
    partition always may)."""
    span = partition_span(path)
    if span is None:
        return True
    start, end = span
    return (since_ms is None or end > since_ms + 1) and (until_ms is None or start <= until_ms)
