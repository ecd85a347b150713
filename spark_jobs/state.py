"""The job's own state, kept beside the profile: what an incremental run starts from.

    <out>/_state/gen-<latest>-<first>-<shape>/bundles     one row per bundle (fold.py): the averages, the
                                                          windows' histograms and what was read from them
    <out>/_state/gen-<latest>-<first>-<shape>/costs       per broker, resource and day: the cost model's sums
    <out>/_state/gen-<latest>-<first>-<shape>/_COMPLETE   written last: {"brokers_latest": <ms>}

``latest`` and ``first`` are the newest and the oldest bundle sample folded in (epoch ms), ``brokers_latest``
the newest broker sample in the cost models' sums: the next run adds the ones after it, without a Spark
job to find it.

A run writes a new generation and marks it complete only after the profile is written, then deletes the
older ones; a run that dies half way leaves an incomplete generation that the next run ignores (and
deletes). ``shape`` names the windows and the digest: a state of another shape is not used (the next run
is a full recompute). ``p`` marks a bundle's histograms and averages packed into one binary value
(``partition_fold``; earlier states kept them as maps, as rows of their own: ``h``, as a column per part: ``d``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from pulsar_lb_operator.spark_jobs import digest, partition_fold
from pulsar_lb_operator.spark_jobs.session import hadoop_filesystem

PREFIX = "gen-"


def shape_of(windows: tuple[int, ...]) -> str:
    return "w" + "_".join(str(w) for w in windows) + f"-a{digest.ALPHA:g}-p"


def read_bundles(spark: SparkSession, path: str, windows: tuple[int, ...]) -> DataFrame:
    """A state's bundle rows, with the schema the fold writes (Spark would run a job to infer it)."""
    return spark.read.schema(from_arrow_schema(partition_fold.state_schema(windows))).parquet(path)


@dataclass(frozen=True)
class Generation:
    latest: int  # the newest bundle sample folded in
    first: int  # the oldest
    path: str
    windows: tuple[int, ...]
    brokers_latest: int | None = None  # the newest broker sample in the costs (None: not recorded)

    def bundles(self, spark: SparkSession) -> DataFrame:
        return read_bundles(spark, f"{self.path}/bundles", self.windows)

    def costs(self, spark: SparkSession) -> DataFrame:
        return spark.read.parquet(f"{self.path}/costs")


class StateStore:
    def __init__(self, spark: SparkSession, out: str, windows: tuple[int, ...]) -> None:
        self.spark = spark
        self.root = f"{out.rstrip('/')}/_state"
        self.windows = windows
        self.shape = shape_of(windows)
        self._fs, self._path = hadoop_filesystem(spark, self.root)

    def _generations(self) -> list[tuple[int, int, str, bool]]:
        """(latest, first, path, complete) of every generation on disk, oldest first."""
        root = self._path(self.root)
        if not self._fs.exists(root):
            return []
        out = []
        for status in self._fs.listStatus(root):
            name = status.getPath().getName()
            latest, _, rest = name.removeprefix(PREFIX).partition("-")
            first, _, shape = rest.partition("-")
            if not name.startswith(PREFIX) or not latest.isdigit() or not first.isdigit():
                continue
            path = f"{self.root}/{name}"
            complete = shape == self.shape and bool(self._fs.exists(self._path(f"{path}/_COMPLETE")))
            out.append((int(latest), int(first), path, complete))
        return sorted(out)

    def current(self) -> Generation | None:
        """The newest complete generation of this shape, if any."""
        complete = [(latest, first, path) for latest, first, path, done in self._generations() if done]
        if not complete:
            return None
        latest, first, path = complete[-1]
        return Generation(latest, first, path, self.windows, self._brokers_latest(path))

    def _brokers_latest(self, path: str) -> int | None:
        """What the generation's ``_COMPLETE`` says of the broker samples (None: an empty or unreadable one)."""
        jvm = self.spark.sparkContext._jvm
        if jvm is None:
            raise RuntimeError("the Spark session is stopped")
        stream = self._fs.open(self._path(f"{path}/_COMPLETE"))
        try:
            text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()
        try:
            value = json.loads(text).get("brokers_latest")
        except (ValueError, AttributeError):
            return None
        return value if isinstance(value, int) else None

    def others(self) -> bool:
        """Whether a complete generation of another shape is on disk (an earlier version's, other windows')."""
        return any(
            self._fs.exists(self._path(f"{path}/_COMPLETE")) and not done for _, _, path, done in self._generations()
        )

    def size(self, generation: Generation) -> int:
        """The bytes a generation's files take."""
        return int(self._fs.getContentSummary(self._path(generation.path)).getLength())

    def scratch(self) -> str:
        """Where a run writes its state before it knows the generation's name."""
        path = f"{self.root}/_writing"
        self._fs.delete(self._path(path), True)  # a half-written one of an earlier try
        return path

    def commit(self, scratch: str, latest: int, first: int, brokers_latest: int) -> Generation:
        """Name the state written at ``scratch`` as a generation, mark it complete, delete every other one."""
        path = f"{self.root}/{PREFIX}{latest}-{first}-{self.shape}"
        generation = Generation(latest, first, path, self.windows, brokers_latest)
        self._fs.delete(self._path(generation.path), True)
        if not self._fs.rename(self._path(scratch), self._path(generation.path)):
            raise OSError(f"cannot rename {scratch} to {generation.path}")
        marker = self._fs.create(self._path(f"{generation.path}/_COMPLETE"), True)
        try:
            marker.write(bytearray(json.dumps({"brokers_latest": brokers_latest}).encode()))
        finally:
            marker.close()
        for _, _, path, _ in self._generations():
            if path != generation.path:
                self._fs.delete(self._path(path), True)
        return generation
