"""What the job reads: the history's data files, listed through Spark's own Hadoop filesystem (so ``s3a://``,
``hdfs://`` and local paths list alike, with the job's credentials), pruned to the partitions a time range
needs, and taken by the store's rule (``layout.visible``: a compacted hour is one file, never both).

Listing walks date, then hour directories and enters only those the time range needs, so an incremental
run lists a handful of directories, not the retention's thousands of files.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from pulsar_lb_operator.spark_jobs.layout import is_data_file, overlaps, partition_span, visible
from pulsar_lb_operator.spark_jobs.session import hadoop_filesystem


def _share(folder: str, since_ms: int | None, until_ms: int | None) -> float:
    """The share of a partition's time span that since < time ≤ until covers (1 outside any partition)."""
    span = partition_span(folder + "/")
    if span is None:
        return 1.0
    start, end = span
    low = start if since_ms is None else max(start, since_ms + 1)
    high = end if until_ms is None else min(end, until_ms + 1)
    return min(1.0, max(0.0, (high - low) / (end - start)))


class HistoryFiles:
    """The data files under one history root, through the session's Hadoop configuration."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.root = root.rstrip("/")
        self.read_paths: set[str] = set()  # every file this run read
        self.sizes: dict[str, int] = {}  # bytes of every file listed
        self.shares: dict[str, float] = {}  # the share of each file listed a read may take (``files``)
        self._schemas: dict[str, StructType] = {}  # per kind: the schema its first read took
        self._fs, self._path = hadoop_filesystem(spark, self.root)

    def _names(self, path: str) -> list[str]:
        """The names in one directory (none when it does not exist); their sizes go into ``sizes``."""
        jpath = self._path(path)
        if not self._fs.exists(jpath):
            return []
        names = []
        for status in self._fs.listStatus(jpath):
            name = status.getPath().getName()
            self.sizes[f"{path}/{name}"] = int(status.getLen())
            names.append(name)
        return names

    def bytes_read(self) -> int:
        """The bytes the reads so far take: a file's size, or its share for a slice of a compacted hour."""
        return int(sum(self.sizes.get(path, 0) * self.shares.get(path, 1.0) for path in self.read_paths))

    def exists(self, kind: str) -> bool:
        return bool(self._fs.exists(self._path(f"{self.root}/{kind}")))

    def files(self, kind: str, since_ms: int | None = None, until_ms: int | None = None) -> list[str]:
        """The visible data files of one kind that may hold a sample with since < time ≤ until, oldest first."""
        out: list[str] = []
        self._walk(f"{self.root}/{kind}", since_ms, until_ms, out)
        return out

    def _walk(self, folder: str, since_ms: int | None, until_ms: int | None, out: list[str]) -> None:
        names = [n for n in self._names(folder) if not n.startswith((".", "_"))]
        found = [f"{folder}/{n}" for n in visible(names)]
        share = _share(folder, since_ms, until_ms)
        for path in found:  # a compacted hour is sorted by time: a read of part of it skips the rest
            self.shares[path] = max(self.shares.get(path, 0.0), share if "/compacted-" in path else 1.0)
        out += found
        for name in sorted(n for n in names if not is_data_file(n) and "=" in n):
            child = f"{folder}/{name}"
            if overlaps(child + "/", since_ms, until_ms):
                self._walk(child, since_ms, until_ms, out)

    def edge(self, kind: str, newest: bool) -> list[str]:
        """The visible data files of the oldest (``newest``: the newest) partition holding any: the walk enters
        that edge of the tree only, where ``files`` lists every partition of the retention."""
        return self._edge(f"{self.root}/{kind}", newest)

    def _edge(self, folder: str, newest: bool) -> list[str]:
        names = [n for n in self._names(folder) if not n.startswith((".", "_"))]
        own = [f"{folder}/{n}" for n in visible(names)]
        if own and not newest:  # a folder's own files come before its partitions' (``files``' order)
            return own
        for name in sorted((n for n in names if not is_data_file(n) and "=" in n), reverse=newest):
            found = self._edge(f"{folder}/{name}", newest)
            if found:
                return found
        return own

    def read(self, files: list[str]) -> DataFrame:
        """The files (at least one) as one DataFrame, with the schema of the newest one: inferring it from every
        file would cost a job per read, so a kind's later reads in the run take the schema its first one did."""
        self.read_paths.update(files)
        kind = files[0].removeprefix(f"{self.root}/").split("/", 1)[0]
        if kind in self._schemas:
            return self.spark.read.schema(self._schemas[kind]).parquet(*files)
        for newest in reversed(files[-3:]):
            try:
                schema = self.spark.read.parquet(newest).schema
            except Exception:  # AnalysisException: that file is unreadable (damaged): try an older one
                continue
            self._schemas[kind] = schema
            return self.spark.read.schema(schema).parquet(*files)
        return self.spark.read.parquet(*files)
