"""The per-bundle state — TimeAverageMessageData's averages and the windows' histograms — folded forward.

One function serves both modes: a full recompute folds every sample into an empty state, an incremental
run folds the samples since the last run into the last state (and takes out of each window the samples
that left it). The state is one row per bundle, its windows' histograms and their read-out included:

    bundle, samples, first_time, last_time, short_<m>, long_<m>    m: msg_rate_in/out, msg_throughput_in/out
    h<W>_<k>_z, h<W>_<k>_lo, h<W>_<k>_c     window W (minutes), k rate/thr: samples at 0, lowest bucket, counts
    h<W>_samples, h<W>_msg_rate_p50, …      what the last run read from them (``bundle_windows``)

**Averages.** TimeAverageMessageData updates avg ← avg + (x − avg)/m with m = min(samples, N): a running
mean up to N samples, then an EMA of weight 1/N. Over samples 1..n in time order that is a weighted sum
with closed-form weights (:func:`time_average_weights`). Its state (count, average) is exactly a run of
min(count, N) samples all equal to the average — every one of them inside the first N, where weights are
equal — so the last state enters the same sum as one row standing for that many samples, and the fold
is exact: incremental and full give the same averages (to floating-point rounding) and the same counts.

**Windows.** A window of W minutes holds the samples after ``latest − W``. Its histogram
(``digest.py``) gains the new samples inside it and loses the ones that left it since the last run:
counts are exact and p50/p95/max within the digest's 1%. The change is summed per bundle and bucket
(``changes``) and merged into each histogram in one pass over its buckets (``_merged``): a run reads and
writes one row per bundle, where histograms kept as a row per bucket (17M rows at 100,000 bundles) were
shuffled and sorted whole by every run.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pulsar_lb_operator.spark_jobs import digest

SHORT_SAMPLES = 10
LONG_SAMPLES = 1000
AVERAGED = ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out")
PREFIXES = (("short", SHORT_SAMPLES), ("long", LONG_SAMPLES))
RATE, THR = 0, 1  # a histogram row's metric: msg rate (in + out), msg throughput (in + out)
QUANTILES = (0.5, 0.95)


def time_average_weights(n_samples: int, k: Column, n: Column) -> Column:
    """Weight of sample k (1-based, by time) among n in TimeAverageMessageData with ``n_samples`` slots.

    The running mean is exact until n_samples, then an EMA with weight 1/N: sample k ≤ N ends up with
    (1/N)·r^(n−N) and k > N with (1/N)·r^(n−k), where r = 1 − 1/N; with n ≤ N every sample has 1/n.
    """
    big_n = float(n_samples)
    r = 1 - 1 / big_n
    return (
        F.when(n <= big_n, 1 / n)
        .when(k <= big_n, (1 / big_n) * F.pow(F.lit(r), n - big_n))
        .otherwise((1 / big_n) * F.pow(F.lit(r), n - k))
    )


def averages(samples: DataFrame, state: DataFrame | None) -> DataFrame:
    """bundle, samples, first and last time, and the short and long averages after folding ``samples`` (all newer than
    the state's) into ``state`` (None: from nothing). One shuffle and sort by (bundle, time)."""
    rows = samples.select(
        "bundle",
        "time",
        F.col("time").alias("first_time"),
        F.lit(1).cast("long").alias("count"),
        *(F.lit(1).cast("long").alias(f"{p}_mult") for p, _ in PREFIXES),
        *(F.col(m).alias(f"{p}_{m}") for p, _ in PREFIXES for m in AVERAGED),
    )
    if state is not None:  # the last state: one row standing for min(samples, N) samples at its averages
        rows = rows.unionByName(
            state.select(
                "bundle",
                F.col("last_time").alias("time"),
                "first_time",
                F.col("samples").alias("count"),
                *(F.least(F.col("samples"), F.lit(slots)).cast("long").alias(f"{p}_mult") for p, slots in PREFIXES),
                *(F.col(f"{p}_{m}") for p, _ in PREFIXES for m in AVERAGED),
            )
        )
    by_time = Window.partitionBy("bundle").orderBy("time")
    so_far = by_time.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    whole = by_time.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)  # same sort as by_time
    aggregates = [
        F.sum("count").alias("samples"),
        F.min("first_time").alias("first_time"),
        F.max("time").alias("last_time"),
    ]
    for prefix, slots in PREFIXES:
        mult = F.col(f"{prefix}_mult")
        rows = rows.withColumn(f"{prefix}_k", F.sum(mult).over(so_far)).withColumn(
            f"{prefix}_n", F.sum(mult).over(whole)
        )
        weight = mult * time_average_weights(slots, F.col(f"{prefix}_k"), F.col(f"{prefix}_n"))
        rows = rows.withColumn(f"{prefix}_weight", weight)  # once per row, not per sum
        aggregates += [
            F.sum(F.col(f"{prefix}_{m}") * F.col(f"{prefix}_weight")).alias(f"{prefix}_{m}") for m in AVERAGED
        ]
    return rows.groupBy("bundle").agg(*aggregates)


def _rate(frame: DataFrame) -> Column:
    return frame["msg_rate_in"] + frame["msg_rate_out"]


def _thr(frame: DataFrame) -> Column:
    return frame["msg_throughput_in"] + frame["msg_throughput_out"]


def _slot(windows: tuple[int, ...], w: int | None, m: int) -> int:
    """A change's slot: window w's histogram of metric m, or (w None) the new samples' of metric m — they go
    into every window the state keeps, since all of them are inside it."""
    return (0 if w is None else 1 + windows.index(w)) * 2 + m


def _key(slot: int, offset: Column | int) -> Column:
    """(slot, bucket) as one int, a key of a bundle's change map: offset 0 is the zero bucket, SPAN + b the
    bucket b of a value above 0 (``digest.bucket`` keeps it within ±(SPAN − 1))."""
    return F.lit(slot * 2 * digest.SPAN) + offset


def _offset(bucket: Column) -> Column:
    return F.when(bucket == digest.ZERO, F.lit(0)).otherwise(bucket + F.lit(digest.SPAN))


def changes(
    windows: tuple[int, ...],
    samples: DataFrame | None,
    leaving: dict[int, DataFrame],
    rebuilt: dict[int, DataFrame],
) -> DataFrame | None:
    """Per bundle, the change to the windows' histograms as a map per slot, ``d<slot>``: bucket offset
    (``_offset``) → samples, and the lowest and highest bucket above 0 each slot gains (``lo<slot>``,
    ``hi<slot>``): ``samples`` into the new samples' slots, ``rebuilt[W]`` into window W's, ``leaving[W]``
    out of window W's.

    Spark adds the +1/−1 rows up by (bundle, key) before it shuffles them, then gathers a bundle's few dozen
    keys into its maps: no histogram is touched here, and a run's work grows with its new samples only. A map
    per slot, not one per bundle: a lookup walks its map's keys, so small maps keep the merge's lookups short."""
    parts: list[tuple[DataFrame, int | None, int]] = [(samples, None, 1)] if samples is not None else []
    parts += [(frame, w, 1) for w, frame in rebuilt.items()]
    parts += [(frame, w, -1) for w, frame in leaving.items()]
    rows: DataFrame | None = None
    for frame, w, sign in parts:
        keys = F.array(
            _key(_slot(windows, w, RATE), _offset(digest.bucket(_rate(frame)))),
            _key(_slot(windows, w, THR), _offset(digest.bucket(_thr(frame)))),
        )
        part = frame.select("bundle", F.explode(keys).alias("key"), F.lit(sign).alias("c"))
        rows = part if rows is None else rows.unionByName(part)
    if rows is None:
        return None
    summed = rows.groupBy("bundle", "key").agg(F.sum("c").cast("int").alias("c")).where(F.col("c") != 0)
    slot = F.floor(F.col("key") / F.lit(2 * digest.SPAN)).cast("int")
    offset = F.col("key") - slot * F.lit(2 * digest.SPAN)
    gains = [_slot(windows, None, m) for m in (RATE, THR)] if samples is not None else []
    gains += [_slot(windows, w, m) for w in rebuilt for m in (RATE, THR)]
    maps = [
        F.map_from_entries(F.collect_list(F.when(slot == s, F.struct(offset.alias("o"), "c")))).alias(f"d{s}")
        for s in sorted({_slot(windows, w, m) for _, w, _ in parts for m in (RATE, THR)})
    ]
    bounds = []
    for s in gains:
        bucket = F.when((slot == s) & (offset > 0) & (F.col("c") > 0), offset - F.lit(digest.SPAN))
        bounds += [F.min(bucket).alias(f"lo{s}"), F.max(bucket).alias(f"hi{s}")]
    return summed.groupBy("bundle").agg(*maps, *bounds)


def hist(w: int, m: int, part: str) -> str:
    """A state column of window w's histogram of metric m: ``z`` samples at 0, ``lo`` the lowest bucket above
    0 (null: none), ``c`` samples per bucket from lo on (first and last > 0)."""
    return f"h{w}_{'rate' if m == RATE else 'thr'}_{part}"


def _merged(windows: tuple[int, ...], w: int, m: int, kept: bool, gains: set[int], changed: set[int]) -> list[Column]:
    """Window w's histogram of metric m after the change, not yet trimmed: its zero count, lowest bucket and
    counts (``_z``, ``_lo``, ``_m``). ``kept``: the state's histogram is the base, the new samples are added."""
    z, lo, c = (F.col(hist(w, m, p)) for p in ("z", "lo", "c"))
    slots = [s for s in ([_slot(windows, None, m)] if kept else []) + [_slot(windows, w, m)] if s in changed]
    lows = [F.col(f"lo{s}") for s in slots if s in gains] + ([lo] if kept else [])
    highs = [F.col(f"hi{s}") for s in slots if s in gains] + ([lo + F.size(c) - 1] if kept else [])
    if not lows:  # nothing above 0 can be in it
        low = high = F.lit(None).cast("int")
    else:
        low, high = (F.least(*lows), F.greatest(*highs)) if len(lows) > 1 else (lows[0], highs[0])

    def delta(offset: Column) -> Column:
        return sum((F.coalesce(F.try_element_at(f"d{s}", offset), F.lit(0)) for s in slots), F.lit(0))

    def count(i: Column) -> Column:
        return (F.coalesce(F.get(c, i - lo), F.lit(0)) if kept else F.lit(0)) + delta(i + F.lit(digest.SPAN))

    zero = (F.coalesce(z, F.lit(0)) if kept else F.lit(0)) + delta(F.lit(0))
    counts = F.coalesce(F.transform(F.sequence(low, high), count), F.array().cast("array<int>"))
    return [zero.cast("long").alias(f"_z{w}_{m}"), low.alias(f"_lo{w}_{m}"), counts.alias(f"_m{w}_{m}")]


def _spread(w: int, m: int) -> Column:
    """The merged histogram's buckets laid out one per sample, lowest first (``_s``)."""
    low = F.col(f"_lo{w}_{m}")
    return F.flatten(
        F.transform(F.col(f"_m{w}_{m}"), lambda c, j: F.array_repeat(low + j, F.greatest(c, F.lit(0))))
    ).alias(f"_s{w}_{m}")


def _trimmed(w: int, m: int) -> list[Column]:
    """The merged histogram's state columns and its read-out: trimmed to its first and last bucket holding a
    sample, and p50/p95/max read from its buckets laid out one per sample (``_s``, in order)."""
    z, lo, merged, spread = (F.col(f"{p}{w}_{m}") for p in ("_z", "_lo", "_m", "_s"))
    above = F.size(spread)
    first, last = F.element_at(spread, 1), F.element_at(spread, -1)
    n = z + above
    name = "msg_rate" if m == RATE else "msg_throughput"

    def at_rank(rank: Column) -> Column:
        return F.when(rank <= z, F.lit(0.0)).otherwise(digest.value_of(F.element_at(spread, (rank - z).cast("int"))))

    return [
        z.alias(hist(w, m, "z")),
        F.when(above > 0, first).alias(hist(w, m, "lo")),
        F.when(above > 0, F.slice(merged, first - lo + 1, last - first + 1))
        .otherwise(F.array().cast("array<int>"))
        .alias(hist(w, m, "c")),
        *(F.when(n > 0, at_rank(digest.rank(n, q))).alias(f"h{w}_{name}_p{round(q * 100)}") for q in QUANTILES),
        F.when(n > 0, F.when(above > 0, digest.value_of(last)).otherwise(F.lit(0.0))).alias(f"h{w}_{name}_max"),
        *([n.alias(f"h{w}_samples")] if m == RATE else []),
    ]


def fold(
    windows: tuple[int, ...],
    samples: DataFrame,
    state: DataFrame | None,
    leaving: dict[int, DataFrame],
    rebuilt: dict[int, DataFrame],
) -> DataFrame:
    """The next state, one row per bundle: ``samples`` (all newer than ``state``) folded into the averages
    and into every window the state keeps (all of them are inside it), less the samples that left it
    (``leaving[W]``); a window in ``rebuilt`` (every one, without a state) is built from the samples given
    for it alone. Read out: each window's sample count and p50/p95/max.

    A histogram is merged with its change in one pass over its buckets (``transform``) and read in another
    (one bucket per sample, ``array_repeat``): the two lambdas a histogram costs, at 100,000 bundles a few
    million steps, where a row per bucket had the whole state's buckets (17M rows) shuffled and sorted
    every run."""
    kept = tuple(w for w in windows if w not in rebuilt) if state is not None else ()
    if set(windows) != {*kept, *rebuilt}:
        raise ValueError("without a state's histogram, every window must be rebuilt from its samples")
    leaving = {w: frame for w, frame in leaving.items() if w in kept}
    delta = changes(windows, samples if kept else None, leaving, rebuilt)
    out = averages(samples, state)
    if kept and state is not None:
        parts = [hist(w, m, p) for w in kept for m in (RATE, THR) for p in ("z", "lo", "c")]
        out = out.join(state.select("bundle", *parts), "bundle", "left")
    gains: set[int] = set()
    changed: set[int] = set()
    if delta is not None:
        out = out.join(delta, "bundle", "left")
        gains = {int(c[2:]) for c in delta.columns if c.startswith("lo")}
        changed = {int(c[1:]) for c in delta.columns if c.startswith("d")}
    keep = [
        F.col(c)
        for c in ("bundle", "samples", "first_time", "last_time", *(f"{p}_{m}" for p, _ in PREFIXES for m in AVERAGED))
    ]
    merged = out.select(
        *keep, *(col for w in windows for m in (RATE, THR) for col in _merged(windows, w, m, w in kept, gains, changed))
    )
    spread = merged.select("*", *(_spread(w, m) for w in windows for m in (RATE, THR)))
    return spread.select(*keep, *(col for w in windows for m in (RATE, THR) for col in _trimmed(w, m)))


def averages_view(state: DataFrame) -> DataFrame:
    """``bundle_averages``: the state's averages."""
    return state.select("bundle", "samples", "last_time", *(f"{p}_{m}" for p, _ in PREFIXES for m in AVERAGED))


WINDOW_STATS = tuple(f"{n}_{s}" for n in ("msg_rate", "msg_throughput") for s in ("p50", "p95", "max"))


def windows_view(state: DataFrame, windows: tuple[int, ...]) -> DataFrame:
    """``bundle_windows``: per bundle and window holding samples, the count and p50/p95/max of msg rate and
    throughput, as the fold read them out."""
    per_window = F.array(
        *(
            F.struct(
                F.lit(w).alias("window_minutes"),
                F.col(f"h{w}_samples").alias("samples"),
                *(F.col(f"h{w}_{s}").alias(s) for s in WINDOW_STATS),
            )
            for w in windows
        )
    )
    return state.select("bundle", F.explode(per_window).alias("w")).select("bundle", "w.*").where(F.col("samples") > 0)
