"""Splits planned with the unloads: the split trigger's, and a bundle too big to move without overshooting.

A split keeps its halves on the owner (``unload=false``) and the halves are placed in the same cycle, by the
same forecast, as any bundle. A bundle that alone is more than its broker's excess over the balanced level (and
twice the band) is split, range_equally_divide, when moving a half helps more than any plain move; where either
half would still overshoot, the larger half is split again in the same cycle and a quarter moves (a broker
holding only a hot half would otherwise stay over the level for good). A broker below the band that every bundle
on offer would carry past it (a small machine among big ones) would stay under it for good: the smallest bundle
that overshoots it is split the same way, and a half moves to it. Each split counts against the caps.

Where the snapshot lists no topics of the bundle, a half's traffic is a guess: each of the bundle's t topics falls
in either half at random, so a half carries ½ ± ½/√t of it (a bundle of two topics: none, half or all). A bundle is
split to move a half only where that miss, on the broker the half leaves or fills, is within the band: moved on a
guess of two topics, a half left its receiver past the band, and then two halves that carried nothing moved. Where
nothing else helps a broker above the band, its too-big bundle is split with no move (``split_to_measure``): the
next report measures the halves, and the cycle after moves one or splits the larger again.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.loaddata import LoadData
from pulsar_lb_operator.strategies.plans import Split
from pulsar_lb_operator.strategies.shedding.predictive.forecast import Forecast, Traffic, bundle_traffic
from pulsar_lb_operator.strategies.shedding.predictive.pairing import Move, best_move, gain
from pulsar_lb_operator.strategies.splitting import algorithms

TOPICS_PER_QUARTER = 2  # a half split again must leave each quarter two topics at least, or it cannot spread


def split_halves(
    load: LoadData, source: str, bundle: str, cuts: Sequence[int], total: Traffic | None = None
) -> dict[str, Traffic]:
    """The bundles a split at ``cuts`` makes, with the traffic each is expected to carry: from the snapshot's
    topic stats when it has them (topics go to the range their CRC-32 falls in), else the bundle's shared
    evenly. The next report shows the truth, and the prediction error says how far off this was."""
    namespace, bundle_range = bundle_names.split_bundle_name(bundle)
    edges = [bundle_range.lower, *sorted(c for c in cuts if bundle_range.lower < c < bundle_range.upper)]
    edges.append(bundle_range.upper)
    ranges = [bundle_names.BundleRange(lo, hi) for lo, hi in itertools.pairwise(edges)]
    total = total or bundle_traffic(load, source, bundle)
    topics = load.snapshot.topics.get(bundle)
    shares: list[Traffic]
    if topics:
        sums = [[0.0, 0.0, 0.0] for _ in ranges]
        for topic, stats in topics.items():
            position = bundle_names.topic_hash(topic)
            index = next((i for i, r in enumerate(ranges) if r.lower <= position < r.upper), len(ranges) - 1)
            for k, value in enumerate(stats.traffic):
                sums[index][k] += value
        shares = [(a, b, c) for a, b, c in sums]
    else:
        shares = [(total[0] / len(ranges), total[1] / len(ranges), total[2] / len(ranges))] * len(ranges)
    return {bundle_names.bundle_name(namespace, r): share for r, share in zip(ranges, shares)}


@dataclass
class Pieces:
    """This cycle's splits and what they made: the pieces' traffic and topics, the actions per source."""

    halves: dict[str, Traffic] = field(default_factory=dict)
    topics: dict[str, int] = field(default_factory=dict)  # a piece planned this cycle: its estimated topic count
    splits: list[Split] = field(default_factory=list)
    per_source: dict[str, int] = field(default_factory=dict)  # splits and unloads from each broker this cycle

    def copy(self) -> Pieces:
        return Pieces(dict(self.halves), dict(self.topics), list(self.splits), dict(self.per_source))

    def count(self, source: str) -> None:
        self.per_source[source] = self.per_source.get(source, 0) + 1

    def topics_of(self, load: LoadData, source: str, bundle: str) -> int:
        stats = load.snapshot.brokers[source].lastStats
        return self.topics.get(bundle, stats[bundle].topics if bundle in stats else 0)

    def add(self, split: Split, parts: dict[str, Traffic], topics: int) -> None:
        """A split planned this cycle, with the pieces it makes (their traffic) and each piece's topic count."""
        self.splits.append(split)
        self.count(split.source)
        self.halves.update(parts)
        self.topics.update(dict.fromkeys(parts, topics))

    def add_trigger_split(self, load: LoadData, split: Split, reason: str) -> dict[str, Traffic]:
        """One of the split trigger's splits (range_equally_divide, boundaries known): kept on its owner, its
        halves placed like any bundle."""
        parts = split_halves(load, split.source, split.bundle, split.boundaries)
        topics = self.topics_of(load, split.source, split.bundle)
        self.add(replace(split, unload=False, reason=reason), parts, topics // len(parts))
        return parts


def bundles_after_splits(load: LoadData, namespace: str, splits: Sequence[Split]) -> int:
    """The namespace's bundles once this cycle's planned splits are made: each split adds one."""
    return load.snapshot.bundle_count(namespace) + sum(
        1 for sp in splits if bundle_names.namespace_of(sp.bundle) == namespace
    )


def _splittable(load: LoadData, source: str, bundle: str, pieces: Pieces, config: LoadBalancerConfig) -> bool:
    """Whether ``source``'s ``bundle`` can be split: two topics at least (a piece: its parent's share), a range that
    can be halved, and room for one more bundle in its namespace under loadBalancerNamespaceMaximumBundles."""
    namespace, bundle_range = bundle_names.split_bundle_name(bundle)
    return (
        pieces.topics_of(load, source, bundle) >= 2
        and bundle_range.can_split()
        and bundles_after_splits(load, namespace, pieces.splits) < config.loadBalancerNamespaceMaximumBundles
    )


def split_to_move(
    load: LoadData,
    forecast: Forecast,
    source: str,
    movable: list[str],
    takers: set[str],
    level: float,
    band: float,
    config: LoadBalancerConfig,
    pieces: Pieces,
    room: int,
    receiving: bool = False,
) -> tuple[list[Move], list[str]]:
    """Split ``source``'s biggest bundle that alone exceeds its excess over ``level`` (and twice the band),
    range_equally_divide with the halves kept on ``source``, and move the half that helps most; ([], movable) if
    none can move without overshooting. ``receiving``: the split is for the coolest of ``takers``, below the band,
    which every bundle of ``source`` would carry past it (a small machine among big ones: a bundle that costs a big
    broker 2 points costs it 17); the smallest bundle that overshoots it is split instead. A piece planned this
    cycle (the split trigger's) may be split again: the split runs after its parent's. Only a bundle of at least two
    topics (a piece: its parent's share), whose range can be split, in a namespace under
    loadBalancerNamespaceMaximumBundles; the splits and the unload count against the caps. ``pieces`` is updated;
    the source's movable bundles after the splits come back with the moves."""
    cap = load.rails.max_unloads_per_broker
    if room < 2 or pieces.per_source.get(source, 0) + 2 > cap:
        return [], movable
    usage = forecast.usage(source)
    excess = usage - level
    coolest = min(sorted(takers), key=forecast.usage, default=source) if receiving else source
    coolest_at = forecast.usage(coolest)
    sizes = []
    for bundle in movable:
        if not _splittable(load, source, bundle, pieces, config):
            continue
        topics = pieces.topics_of(load, source, bundle)
        traffic = bundle_traffic(load, source, bundle, pieces.halves)
        # how far off an even share may be: a half of t topics dealt at random carries ½ ± ½/√t of them
        guessed = 0.5 / math.sqrt(topics) if not load.snapshot.topics.get(bundle) else 0
        if receiving:
            arrival = forecast.usage_with(coolest, traffic, +1) - coolest_at
            if arrival > level + band - coolest_at and arrival * guessed <= band:
                sizes.append((-arrival, bundle))
            continue
        drop = usage - forecast.usage_with(source, traffic, -1)
        if drop > max(excess, 2 * band) and drop * guessed <= band:
            sizes.append((drop, bundle))
    if not sizes:
        return [], movable
    bundle = max(sizes)[1]
    topics = pieces.topics_of(load, source, bundle)
    namespace, bundle_range = bundle_names.split_bundle_name(bundle)
    cuts = algorithms.range_equally_divide(bundle_range)
    parts = split_halves(load, source, bundle, cuts, pieces.halves.get(bundle))
    best = best_move(load, forecast, source, sorted(parts), takers, level, config, {**pieces.halves, **parts}, band)
    split_cuts = {bundle: cuts}  # each bundle split, in order (a half after its parent), and its cuts
    quarters: set[str] = set()
    if best is None and _may_split_again(load, source, namespace, topics, pieces, room, config):
        # both halves still overshoot: the larger half is split again, and a quarter moves
        half = max(parts, key=lambda b: (usage - forecast.usage_with(source, parts[b], -1), b))
        half_cuts = algorithms.range_equally_divide(bundle_names.split_bundle_name(half)[1])
        if load.snapshot.topics.get(bundle):  # the quarters' traffic from the topics' stats, by their hashes
            finer = split_halves(load, source, bundle, sorted([*cuts, *half_cuts]), pieces.halves.get(bundle))
        else:  # a half planned this cycle: its halves share its traffic evenly, as split_halves has it
            finer = {**parts, **split_halves(load, source, half, half_cuts, parts[half])}
            del finer[half]
        halves = {**pieces.halves, **finer}
        best = best_move(load, forecast, source, sorted(finer), takers, level, config, halves, band)
        parts, split_cuts, quarters = finer, {bundle: cuts, half: half_cuts}, set(finer) - set(parts)
    if best is None:
        return [], movable
    pieces.halves.update(parts)
    pieces.topics.update({piece: topics // (4 if piece in quarters else 2) for piece in parts})
    why = (
        f"{bundle} would carry {coolest} past the band and no bundle of {source}'s fills it without overshooting"
        if receiving
        else f"{bundle} alone is more than {source}'s {excess:.1f} points over the balanced level and no bundle can "
        "move without overshooting"
    )
    reasons = [
        f"{why}: split, the halves stay on {source}, "
        + ("one moves now" if len(split_cuts) == 1 else "and one is split again"),
        f"either half of {bundle} would overshoot: {next(reversed(split_cuts))} split again, a quarter moves now",
    ]
    for (split_bundle, at), reason in zip(split_cuts.items(), reasons):
        pieces.count(source)
        pieces.splits.append(Split(split_bundle, source, algorithms.RANGE_EQUALLY_DIVIDE, tuple(at), reason, False))
    return [(source, *best)], sorted([*(b for b in movable if b != bundle), *parts])


def split_to_measure(
    load: LoadData,
    forecast: Forecast,
    source: str,
    movable: list[str],
    takers: set[str],
    level: float,
    band: float,
    config: LoadBalancerConfig,
    pieces: Pieces,
    room: int,
    split_last: frozenset[str] = frozenset(),
) -> list[str]:
    """Where ``source`` is above the band and nothing it has helps this cycle — no move, split, relay or swap — split
    its biggest bundle that alone is more than its excess over ``level`` (and twice the band), range_equally_divide,
    the halves kept on ``source`` and none moved: without the bundle's topics in the snapshot (the daemon does not
    read them), how its traffic divides is a guess too wide to move a half on (``split_to_move``), but the next report
    measures each half, and the next cycle moves one, or splits the larger again. Left whole, the bundle would hold
    ``source`` above the band for good. Only where a taker is below the band to take a piece, and for a bundle of at
    least two topics that was not split this cycle, within loadBalancerNamespaceMaximumBundles; the split counts
    against the caps; not a bundle holding a piece of last cycle's splits (``split_last``): a report that still
    shows it was read before the split was made. ``pieces`` is updated; the source's movable bundles after the split
    come back (``movable`` as it was where there is none to make)."""
    if room < 1 or pieces.per_source.get(source, 0) + 1 > load.rails.max_unloads_per_broker:
        return movable
    if not any(level - forecast.usage(t) > band for t in takers if t != source):
        return movable
    usage = forecast.usage(source)
    sizes = []
    for bundle in movable:
        if bundle in pieces.halves or not _splittable(load, source, bundle, pieces, config):
            continue
        if any(_within(piece, *bundle_names.split_bundle_name(bundle)) for piece in split_last):
            continue
        drop = usage - forecast.usage_with(source, bundle_traffic(load, source, bundle), -1)
        if drop > max(usage - level, 2 * band):
            sizes.append((drop, bundle))
    if not sizes:
        return movable
    drop, bundle = max(sizes)
    cuts = algorithms.range_equally_divide(bundle_names.split_bundle_name(bundle)[1])
    topics = pieces.topics_of(load, source, bundle)
    reason = (
        f"{bundle} alone is {drop:.1f} points of {source}'s, more than its {usage - level:.1f} over the balanced "
        "level, and nothing it has can move without overshooting: split, the halves stay on it until a report "
        "measures them"
    )
    parts = split_halves(load, source, bundle, cuts)
    pieces.add(Split(bundle, source, algorithms.RANGE_EQUALLY_DIVIDE, tuple(cuts), reason, False), parts, topics // 2)
    return sorted([*(b for b in movable if b != bundle), *parts])


def _within(piece: str, namespace: str, bundle_range: bundle_names.BundleRange) -> bool:
    """Whether ``piece`` is a bundle of ``namespace`` inside ``bundle_range``."""
    if not bundle_names.is_bundle_name(piece):
        return False
    own, inside = bundle_names.split_bundle_name(piece)
    return own == namespace and bundle_range.lower <= inside.lower and inside.upper <= bundle_range.upper


def _may_split_again(
    load: LoadData, source: str, namespace: str, topics: int, pieces: Pieces, room: int, config: LoadBalancerConfig
) -> bool:
    """Whether a half may be split again in the same cycle: room for the two splits and the unload under both
    caps, ``TOPICS_PER_QUARTER`` topics per quarter, and two bundles more within loadBalancerNamespaceMaximumBundles."""
    return (
        room >= 3
        and pieces.per_source.get(source, 0) + 3 <= load.rails.max_unloads_per_broker
        and topics >= 4 * TOPICS_PER_QUARTER
        and bundles_after_splits(load, namespace, pieces.splits) + 2 <= config.loadBalancerNamespaceMaximumBundles
    )


def gains_more(candidate: list[Move], plain: list[Move], level: float) -> bool:
    """Whether a split's move helps more than the best plain move (or there is none)."""
    return bool(candidate) and (not plain or gain(candidate[0], level) > gain(plain[0], level))
