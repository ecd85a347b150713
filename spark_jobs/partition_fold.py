"""The fold's per-bundle arithmetic over one partition's rows, in numpy: what runs on the executors.

``fold.fold`` sends every row a bundle's next state needs — its state row, its new samples, the histograms
of the samples that left each window (``leaving_table``, counted before the shuffle), the older samples a
rebuilt window needs — to one partition (hashed by bundle), and
``mapInArrow`` hands each partition's Arrow batches to :func:`fold_partition`. There the rows become numpy
columns and every bundle of the partition is done at once, whole arrays at a time: one sort by (bundle,
time), the averages' weights and segment sums (``np.add.reduceat``), each histogram merged with its change
in one dense array (``np.bincount``) and its percentiles read from cumulative counts (``np.searchsorted``).
Spark's expressions did the same per bundle in interpreted lambdas — laying a histogram out one array
element per *sample* to read a rank — which is what made a run at 100,000 bundles slow.

A partition is held whole in the worker's memory (its rows as numpy columns, ~60 bytes a row): the caller
sizes the partitions to the input so that stays bounded.

Imports numpy and pyarrow only (and the digest): the executors' Python needs both (docs/history.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pulsar_lb_operator.spark_jobs.digest import bucket, rank, value_of

RATE, THR = 0, 1  # a histogram's metric: msg rate (in + out), msg throughput (in + out)
METRICS = ("msg_rate", "msg_throughput")  # by index: RATE, THR
QUANTILES = (0.5, 0.95)
AVERAGED = ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out")
PREFIXES = (("short", 10), ("long", 1000))  # TimeAverageMessageData's sample counts
STATE, NEW = 0, 1  # a row's kind (``Plan`` names the others)


@dataclass(frozen=True)
class Plan:
    """What one run folds: the windows (minutes), each one's start (its samples are newer than it), and
    which of them grow from the state's histogram (``kept``); the others are rebuilt from their samples."""

    windows: tuple[int, ...]
    starts: tuple[int, ...]
    kept: tuple[bool, ...]

    def leaving(self, i: int) -> int:
        """The kind of a row of histograms of samples that left window i since the last run (taken out of it)."""
        return 2 + i

    def older(self, i: int) -> int:
        """The kind of a row older than the new samples that window i, rebuilt, holds."""
        return 2 + len(self.windows) + i


def stat(w: int, m: int, s: str) -> str:
    return f"h{w}_{'msg_rate' if m == RATE else 'msg_throughput'}_{s}"


def state_schema(windows: tuple[int, ...]) -> pa.Schema:
    """The state's columns, one row per bundle (``fold.py`` describes them)."""
    fields = [
        pa.field("bundle", pa.string()),
        pa.field("samples", pa.int64()),
        pa.field("first_time", pa.int64()),
        pa.field("last_time", pa.int64()),
        *(pa.field(f"{p}_{m}", pa.float64()) for p, _ in PREFIXES for m in AVERAGED),
    ]
    for w in windows:
        fields += [pa.field(stat(w, m, s), pa.float64()) for m in (RATE, THR) for s in ("p50", "p95", "max")]
        fields.append(pa.field(f"h{w}_samples", pa.int64()))
    fields.append(pa.field(PACKED, pa.binary()))
    return pa.schema(fields)


# ---------------------------------------------------------------------------------------------- packed


# A bundle's state as the next fold reads it, in one binary value of little-endian 32-bit words: samples and
# first time (int64, two words each), the averages (float64, two words each), then each window's histograms
# (windows in order, rate then throughput): count at 0 (int64), lowest bucket, length, the counts. One value
# instead of a column per part keeps the rows the fold shuffles narrow: a sample row carries one null
# where it carried the state's ~20 columns, each a null that still took its 8 bytes in the shuffle and
# its slot in every Arrow batch to the Python workers.
PACKED = "packed"
_FIXED = 2 + len(PREFIXES) * len(AVERAGED)  # int64 / float64 values before the histograms


@dataclass
class _Packed:
    """The state rows' packed values, decoded: ``fixed`` one row of int64 per state row (``_FIXED`` values;
    the averages are float64 bit patterns), ``histograms`` per window and metric in ``pack``'s order."""

    fixed: np.ndarray
    histograms: list[_Histograms]


def pack(fixed: np.ndarray, histograms: list[_Histograms]) -> pa.Array:
    """One binary value per row of ``fixed`` (int64: ``_FIXED`` columns in a state, none in the histograms of
    samples leaving a window) and of every histogram."""
    n, width = fixed.shape
    sizes = 2 * width + sum(4 + h.length for h in histograms) if histograms else np.full(n, 2 * width)
    ends = np.cumsum(sizes, dtype=np.int64)
    if n and ends[-1] * 4 >= 2**31:  # a binary array's offsets are int32: the fold's partitions keep far below
        raise ValueError(f"{n} bundles' state is over 2 GiB in one partition: spread the fold over more")
    starts = ends - sizes
    words = np.empty(int(ends[-1]) if n else 0, "<i4")
    words[starts[:, None] + np.arange(2 * width)] = np.ascontiguousarray(fixed, "<i8").view("<i4")
    at = starts + 2 * width
    for h in histograms:
        words[at[:, None] + np.arange(2)] = np.ascontiguousarray(h.zero, "<i8").reshape(n, 1).view("<i4")
        words[at + 2] = h.low
        words[at + 3] = h.length
        words[_ranges(at + 4, h.length)] = h.counts
        at = at + 4 + h.length
    offsets = np.r_[0, ends * 4].astype("<i4")
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(words)])


def unpack(packed: pa.Array, n_histograms: int, width: int = _FIXED) -> _Packed:
    """``pack``'s values (none null; ``width`` fixed values each) back into their parts."""
    packed = packed.take(pa.array(np.arange(len(packed))))  # its own buffers, from offset 0
    offsets = np.frombuffer(packed.buffers()[1], "<i4", count=len(packed) + 1)
    words = np.frombuffer(packed.buffers()[2], "<i4") if len(packed) else np.zeros(0, "<i4")
    at = offsets[:-1].astype(np.int64) // 4
    fixed = np.ascontiguousarray(words[at[:, None] + np.arange(2 * width)]).view("<i8")
    at += 2 * width
    histograms = []
    for _ in range(n_histograms):
        zero = np.ascontiguousarray(words[at[:, None] + np.arange(2)]).view("<i8")[:, 0]
        length = words[at + 3].astype(np.int64)
        counts = words[_ranges(at + 4, length)].astype(np.int64)
        histograms.append(_Histograms(zero.astype(np.int64), words[at + 2].astype(np.int64), length, counts))
        at = at + 4 + length
    return _Packed(fixed.reshape(len(packed), width).astype(np.int64), histograms)


def _segments(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each run of equal codes starts in a sorted non-empty array, and each run's length."""
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    return starts, np.diff(np.r_[starts, len(codes)])


class _Rows:
    """One partition's rows as numpy columns (nulls as 0), each row's bundle as a small int, and its state rows'
    packed values decoded."""

    def __init__(self, table: pa.Table, n_histograms: int) -> None:
        self.table = table
        encoded = table.column("bundle").combine_chunks().dictionary_encode()
        self.names = encoded.dictionary
        self.codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        self.n_bundles = len(self.names)
        self.kind = self.column("kind", np.int64)
        self.time = self.column("time", np.int64)
        self.states = np.flatnonzero(self.kind == STATE)
        self.has_state = PACKED in table.column_names and len(self.states) > 0
        self._decoded: dict[int, tuple[np.ndarray, list[_Histograms]]] = {}  # ``histograms``' by kind
        if self.has_state:
            self.state = unpack(table.column(PACKED).combine_chunks().take(pa.array(self.states)), n_histograms)

    def histograms(self, kind: int) -> tuple[np.ndarray, list[_Histograms]]:
        """The rows of ``kind`` that carry packed histograms (``leaving_table``'s): their codes and histograms,
        decoded once (a window asks for each of its metrics)."""
        if kind not in self._decoded:
            which = np.flatnonzero(self.kind == kind)
            if PACKED not in self.table.column_names or not len(which):
                self._decoded[kind] = which, []
            else:
                packed = self.table.column(PACKED).combine_chunks().take(pa.array(which))
                self._decoded[kind] = self.codes[which], unpack(packed, len(METRICS), width=0).histograms
        return self._decoded[kind]

    def column(self, name: str, dtype: type, fill: float = 0) -> np.ndarray:
        return np.asarray(self.table.column(name).fill_null(fill).to_numpy(), dtype=dtype)

    def at_state(self, index: int, dtype: type = np.int64) -> np.ndarray:
        """The state rows' fixed value ``index`` (``pack``'s order) in a column as long as the rows (0 elsewhere)."""
        out: np.ndarray = np.zeros(len(self.kind), dtype)
        out[self.states] = self.state.fixed[:, index].view(dtype)
        return out


def _averages(rows: _Rows) -> dict[str, np.ndarray]:
    """Per bundle (by code): samples, first and last time, and TimeAverageMessageData's short and long averages
    over its state row — standing for min(samples, N) samples at its averages, before all of its new samples
    (``fold.py`` says why that is exact) — and its new samples in time order."""
    which = np.flatnonzero(rows.kind <= NEW)
    order = which[np.lexsort((rows.time[which], rows.kind[which], rows.codes[which]))]
    code, time = rows.codes[order], rows.time[order]
    starts, lengths = _segments(code)
    present = code[starts]
    is_state = rows.kind[order] == STATE
    count = np.ones(len(order), np.int64)
    first = time.copy()
    if rows.has_state:
        count[is_state] = rows.at_state(0)[order][is_state]
        first[is_state] = rows.at_state(1)[order][is_state]
    out: dict[str, np.ndarray] = {}

    def per_bundle(values: np.ndarray, reduce: np.ufunc = np.add) -> np.ndarray:
        full = np.zeros(rows.n_bundles, values.dtype)
        full[present] = reduce.reduceat(values, starts)
        return full

    out["samples"] = per_bundle(count)
    out["first_time"] = per_bundle(first, np.minimum)
    out["last_time"] = per_bundle(time, np.maximum)
    values = {m: rows.column(m, np.float64)[order] for m in AVERAGED}
    for p, (prefix, slots) in enumerate(PREFIXES):
        mult = np.where(is_state, np.minimum(count, slots), 1).astype(np.float64)
        k = np.cumsum(mult)
        k -= np.repeat(k[starts] - mult[starts], lengths)  # rank by time within the bundle, counting multiplicity
        n = np.repeat(np.add.reduceat(mult, starts), lengths)
        big_n, r = float(slots), 1 - 1 / slots
        weight = mult * np.where(
            n <= big_n, 1 / n, np.where(k <= big_n, np.power(r, n - big_n), np.power(r, n - k)) / big_n
        )
        for a, m in enumerate(AVERAGED):
            value = values[m].copy()
            if rows.has_state:
                value[is_state] = rows.at_state(2 + p * len(AVERAGED) + a, np.float64)[order][is_state]
            out[f"{prefix}_{m}"] = per_bundle(value * weight)
    return out


@dataclass
class _Histograms:
    """Every bundle's histogram of one window and metric: count at 0, lowest bucket above 0 (valid where
    ``length`` > 0), and the counts from it laid end to end (``offsets``: where each bundle's start)."""

    zero: np.ndarray
    low: np.ndarray
    length: np.ndarray
    counts: np.ndarray

    @property
    def offsets(self) -> np.ndarray:
        return np.r_[0, np.cumsum(self.length)[:-1]] if len(self.length) else self.length


def _entries(
    n_bundles: int, codes: np.ndarray, h: _Histograms, sign: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Histograms of rows (their bundles' ``codes``) as entries (code, bucket, ±count), and ±their count at 0 per
    bundle (a bundle may have several rows: the histograms of its leaving samples from several partitions)."""
    zero = np.rint(np.bincount(codes, weights=h.zero, minlength=n_bundles)).astype(np.int64)
    within = np.arange(len(h.counts)) - np.repeat(np.cumsum(h.length) - h.length, h.length)
    return np.repeat(codes, h.length), np.repeat(h.low, h.length) + within, sign * h.counts, sign * zero


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices start..start + length − 1 of every range, end to end."""
    return np.arange(int(lengths.sum())) + np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)


def _merged(
    n_bundles: int, codes: np.ndarray, buckets: np.ndarray, counts: np.ndarray, zero: np.ndarray
) -> _Histograms:
    """Histograms from entries (code, bucket above 0, count ±), summed per bundle and bucket, trimmed to
    their first and last bucket holding a sample (a count below 0 — data that never went in — is 0)."""
    low = np.full(n_bundles, np.iinfo(np.int64).max)
    high = np.full(n_bundles, np.iinfo(np.int64).min)
    np.minimum.at(low, codes, buckets)
    np.maximum.at(high, codes, buckets)
    length = np.where(high >= low, high - low + 1, 0)
    offsets = np.r_[0, np.cumsum(length)[:-1]]
    dense = np.bincount(offsets[codes] + buckets - low[codes], weights=counts, minlength=int(length.sum()))
    dense = np.maximum(np.rint(dense).astype(np.int64), 0)
    held = np.flatnonzero(dense > 0)
    owner = np.repeat(np.arange(n_bundles), length)[held]
    bundles, first_at = np.unique(owner, return_index=True)
    first, last = held[first_at], held[np.r_[first_at[1:], len(held)] - 1]
    trimmed = np.zeros(n_bundles, np.int64)
    trimmed[bundles] = last - first + 1
    new_low = np.zeros(n_bundles, np.int64)
    new_low[bundles] = low[bundles] + first - offsets[bundles]
    take = _ranges(first, trimmed[bundles])
    return _Histograms(np.maximum(zero, 0), new_low, trimmed, dense[take])


def _read_out(h: _Histograms) -> dict[str, np.ndarray]:
    """Samples, p50, p95 and max of every histogram (NaN where it holds none): a quantile is the bucket of the
    sample of rank max(1, ⌈q·n⌉), found by a binary search in the cumulative counts."""
    offsets = h.offsets
    cumulative = np.r_[0, np.cumsum(h.counts)]  # [i]: the samples above 0 in counts[:i]
    above = cumulative[offsets + h.length] - cumulative[offsets]
    n = h.zero + above
    out = {"samples": n}
    for q in QUANTILES:
        at_rank = rank(n, q)
        inside = (n > 0) & (at_rank > h.zero)
        # the first bucket where the samples so far reach the rank (``cumulative`` counts from index 1)
        at = np.searchsorted(cumulative, cumulative[offsets] + at_rank - h.zero, side="left") - 1
        bucket = np.where(inside, h.low + np.clip(at - offsets, 0, np.maximum(h.length - 1, 0)), 0)
        out[f"p{round(q * 100)}"] = np.where(inside, value_of(bucket), np.where(n > 0, 0.0, np.nan))
    highest = np.where(above > 0, h.low + h.length - 1, 0)
    out["max"] = np.where(n > 0, np.where(above > 0, value_of(highest), 0.0), np.nan)
    return out


def _window(rows: _Rows, plan: Plan, i: int, m: int, buckets: np.ndarray, zero: np.ndarray) -> _Histograms:
    """Window i's histograms of metric m after this run: the state's (when the window is kept) with the new
    samples added and the histograms of those that left it taken out, or rebuilt from the new and older
    samples inside it."""
    if plan.kept[i]:
        adds = rows.kind == NEW
    else:
        adds = ((rows.kind == NEW) & (rows.time > plan.starts[i])) | (rows.kind == plan.older(i))
    codes = [rows.codes[adds & ~zero]]
    found = [buckets[adds & ~zero]]
    counts = [np.ones(len(codes[0]), np.int64)]
    at_zero = np.bincount(rows.codes[adds & zero], minlength=rows.n_bundles).astype(np.int64)
    parts = []
    if plan.kept[i] and rows.has_state:
        parts.append(_entries(rows.n_bundles, rows.codes[rows.states], rows.state.histograms[2 * i + m], 1))
    if plan.kept[i]:
        left_codes, left = rows.histograms(plan.leaving(i))
        if left:
            parts.append(_entries(rows.n_bundles, left_codes, left[m], -1))
    for part_codes, part_buckets, part_counts, part_zero in parts:
        codes.append(part_codes)
        found.append(part_buckets)
        counts.append(part_counts)
        at_zero += part_zero
    return _merged(rows.n_bundles, np.concatenate(codes), np.concatenate(found), np.concatenate(counts), at_zero)


# ---------------------------------------------------------------------------------------------- leaving

LEAVING_SCHEMA = pa.schema(
    [pa.field("bundle", pa.string()), pa.field("kind", pa.int32()), pa.field(PACKED, pa.binary())]
)


def leaving_table(table: pa.Table, kind: int) -> pa.Table:
    """The histograms (rate, then throughput) per bundle of samples leaving a window, packed, one row per bundle.

    What a window loses when samples slide out of it is their bucket counts, not their rows: counted where
    the samples are read (``mapInArrow`` on the scan, before the shuffle), the fold receives one row per
    bundle and scan partition — 15 minutes of samples at 100,000 bundles are 1.5M rows, their histograms
    100,000 — and subtracts counts. ``table``: bundle, msg_rate and msg_throughput (each in + out, nulls 0,
    as the fold sums them), so the buckets are those the samples went in with."""
    encoded = table.column("bundle").combine_chunks().dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    n = len(encoded.dictionary)
    histograms = []
    for name in METRICS:
        buckets, zero = bucket(np.asarray(table.column(name).to_numpy(zero_copy_only=False), np.float64))
        at_zero = np.bincount(codes[zero], minlength=n).astype(np.int64)
        histograms.append(_merged(n, codes[~zero], buckets[~zero], np.ones(int((~zero).sum()), np.int64), at_zero))
    columns = [encoded.dictionary, pa.array(np.full(n, kind, np.int32)), pack(np.zeros((n, 0), np.int64), histograms)]
    return pa.table(columns, schema=LEAVING_SCHEMA)


def leaving_partition(batches: Iterator[pa.RecordBatch], kind: int) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``'s function on the samples leaving a window: their histograms per bundle."""
    received = [b for b in batches if b.num_rows]
    if received:
        yield from leaving_table(pa.Table.from_batches(received), kind).to_batches(max_chunksize=20_000)


# ---------------------------------------------------------------------------------------------- fold


def fold_table(table: pa.Table, plan: Plan) -> pa.Table:
    """The next state of every bundle with a state row or a new sample among ``table``'s rows."""
    schema = state_schema(plan.windows)
    if not pc.any(pc.less_equal(table.column("kind"), NEW)).as_py():
        return schema.empty_table()  # only samples that left a window: no bundle to write
    rows = _Rows(table, 2 * len(plan.windows))
    columns: dict[str, pa.Array] = {}
    averages = _averages(rows)
    keep = np.zeros(rows.n_bundles, bool)
    keep[rows.codes[rows.kind <= NEW]] = True
    chosen = np.flatnonzero(keep)
    columns["bundle"] = rows.names.take(pa.array(chosen))
    for name, values in averages.items():
        columns[name] = pa.array(values[chosen])
    rate = rows.column("msg_rate_in", np.float64) + rows.column("msg_rate_out", np.float64)
    thr = rows.column("msg_throughput_in", np.float64) + rows.column("msg_throughput_out", np.float64)
    metric = {RATE: bucket(rate), THR: bucket(thr)}
    histograms = []
    for i, w in enumerate(plan.windows):
        for m in (RATE, THR):
            h = _window(rows, plan, i, m, *metric[m])
            length = h.length[chosen]
            histograms.append(
                _Histograms(h.zero[chosen], h.low[chosen], length, h.counts[_ranges(h.offsets[chosen], length)])
            )
            read = _read_out(h)
            for s in ("p50", "p95", "max"):
                values = read[s][chosen]
                columns[stat(w, m, s)] = pa.array(values, mask=np.isnan(values))
            if m == RATE:
                columns[f"h{w}_samples"] = pa.array(read["samples"][chosen])
    fixed = [averages["samples"], averages["first_time"]]
    fixed += [averages[f"{p}_{m}"].view(np.int64) for p, _ in PREFIXES for m in AVERAGED]
    columns[PACKED] = pack(np.column_stack([f[chosen] for f in fixed]), histograms)
    return pa.table([columns[f.name].cast(f.type) for f in schema], schema=schema)


def fold_partition(batches: Iterator[pa.RecordBatch], plan: Plan) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``'s function: one partition's rows in, its bundles' next states out."""
    received = list(batches)
    if not received or not any(b.num_rows for b in received):
        return
    yield from fold_table(pa.Table.from_batches(received), plan).to_batches(max_chunksize=20_000)
