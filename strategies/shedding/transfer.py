"""TransferShedder (PIP-192, the extensible load manager's shedder), as Pulsar master's TransferShedder.java decides:
move top bundles from the most to the least loaded brokers until the std of broker load is under
loadBalancerBrokerLoadTargetStd; with loadBalancerTransferEnabled the destination is chosen here (a transfer),
with swaps back when a bundle is too large to move alone.

**Inputs.** On a cluster running the extensible load manager (ELM) every figure is the one its brokers published
(``BrokerLoad.published``, see snapshots.PublishedLoad): BrokerLoadData's ``weightedMaxEMA`` and
``msgThroughputEMA`` — each broker's average over its own 5-second samples, which the operator cannot rebuild
from what is published — its throughput, ``topics`` and ``updatedAt``, and its TopBundlesLoadData in the order
published. Where a figure is not published (a LocalBrokerData report of the modular load manager, planned with
TransferShedder as the operator's own choice, or a first 3.0 release without ``msgThroughputEMA``) the operator's
own average stands in, advanced once per new report, and a note says so.

**Rules**, each as the Java has it:

* LoadStats.update: a broker whose ``updatedAt`` is older than loadBalancerBrokerLoadDataTTLInSeconds is left out
  of the average (OutDatedData when none is left); a broker in recentlyUnloadedBrokers whose data is not
  loadBalanceSheddingDelayInSeconds newer than its unload stops the cycle (CoolDown); then any available broker
  without load data stops it (NoLoadData; ``snapshot.missing`` names them: no BrokerLoadData heard, a tombstone,
  an unusable document, or one past the TTL — the collector leaves such a broker out, so it counts here as
  missing where Pulsar would keep an outdated one in the sorted list);
* the hit count, the under/overloaded tests, the max/min walk, the swaps and ``LoadStats.offload``;
* for each of the max broker's top bundles: ``channel.isOwner`` (the ownership the cycle read; a top bundle its
  broker no longer owns is skipped), loadBalancerSheddingExcludedNamespaces, the grace period, isTransferable,
  at most all but one of its top bundles, and no bundle without throughput;
* isTransferable: the namespace's policies (loadBalancerSheddingBundlesWithPoliciesEnabled), then the broker
  filters over the available brokers — BrokerMaxTopicCountFilter (``topics`` >= loadBalancerBrokerMaxTopics),
  BrokerVersionFilter (with preferLaterVersions: only the newest version; a broker whose version is unknown
  makes the filter fail, so nothing is transferable) and the isolation and anti-affinity filters
  (strategies/policies.py). BrokerLoadManagerClassFilter needs nothing here: a broker of another load manager
  publishes no BrokerLoadData, which stops the cycle (NoLoadData);
* arithmetic as Java's doubles: a division by zero gives infinity or NaN, never an error, and NaN compares false.

A swap's bundle is decided as Pulsar decides it (the min broker's top bundles are not checked for ownership), and
then dropped when its broker does not own it: ELM's state channel refuses that unload (an Unload whose source is
not the owner, ServiceUnitStateDataConflictResolver), and the operator must not send it to the wrong broker.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.documents import one_more
from pulsar_lb_operator.strategies.loaddata import LoadData
from pulsar_lb_operator.strategies.plans import Unload
from pulsar_lb_operator.strategies.policies import shedding_allowed, transfer_filter
from pulsar_lb_operator.strategies.shedding.common import SheddingResult
from pulsar_lb_operator.strategies.snapshots import BrokerLoad, BundleStats, ClusterSnapshot
from pulsar_lb_operator.strategies.state import StrategyState, TransferBrokerEma
from pulsar_lb_operator.strategies.units import fmt_bytes

NAME = "TransferShedder"


def compare_bundle_stats(a: BundleStats, b: BundleStats) -> int:
    """NamespaceBundleStats.compareTo: lexicographic with dead-bands."""
    for x, y, band in (
        (a.msgThroughputIn, b.msgThroughputIn, 1e5),
        (a.msgThroughputOut, b.msgThroughputOut, 1e5),
        (a.msg_rate, b.msg_rate, 100),
        (a.topics + a.consumerCount + a.producerCount, b.topics + b.consumerCount + b.producerCount, 500),
        (a.cacheSize, b.cacheSize, 100000),
    ):
        if abs(x - y) > band:
            return -1 if x < y else 1
    return 0


def _compare_entries(a: tuple[str, BundleStats], b: tuple[str, BundleStats]) -> int:
    return compare_bundle_stats(a[1], b[1])


def top_bundles(
    load: BrokerLoad, k: int, sheddable: Callable[[str], bool] | None = None
) -> list[tuple[str, BundleStats]]:
    """TopKBundles: the k largest bundles with traffic, not of a system namespace, stored smallest first;
    ``sheddable`` (of a namespace) leaves out namespaces with policies (unless
    loadBalancerSheddingBundlesWithPoliciesEnabled) and those of loadBalancerSheddingExcludedNamespaces."""
    eligible = [
        (name, stats)
        for name, stats in sorted(load.lastStats.items())
        if stats.msg_throughput > 0
        and not bundle_names.is_system_namespace(bundle_names.namespace_of(name))
        and (sheddable is None or sheddable(bundle_names.namespace_of(name)))
    ]
    by_stats = functools.cmp_to_key(_compare_entries)
    eligible.sort(key=by_stats, reverse=True)
    return sorted(eligible[:k], key=by_stats)


def update_emas(load: LoadData, config: LoadBalancerConfig, state: StrategyState) -> dict[str, TransferBrokerEma]:
    """The operator's own BrokerLoadData EMAs, for brokers that publish none: advanced once per new report."""
    history = config.loadBalancerHistoryResourcePercentage
    emas = dict(state.transfer_ema)
    for broker, data in load.snapshot.brokers.items():
        weighted = data.max_resource_usage_with_weight(config.weights)
        previous = emas.get(broker)
        if previous is None:
            emas[broker] = TransferBrokerEma(weighted, data.msg_throughput, data.lastUpdate)
        elif data.lastUpdate != previous.updated_at:
            emas[broker] = TransferBrokerEma(
                previous.weighted_max_ema * history + (1 - history) * weighted,
                previous.msg_throughput_ema * history + (1 - history) * data.msg_throughput,
                data.lastUpdate,
            )
    return {b: e for b, e in emas.items() if b in load.snapshot.brokers}


# ------------------------------------------------------------------------------------------ Java's doubles


def _div(a: float, b: float) -> float:
    """``a / b`` with Java's doubles: x/0 is ±infinity, 0/0 (or NaN/0) is NaN."""
    if b != 0:
        return a / b
    if a == 0 or math.isnan(a):
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _max(a: float, b: float) -> float:
    """Math.max: NaN when either is NaN (Python's max keeps the first argument)."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


def _square(x: float) -> float:
    """x², as infinity rather than OverflowError when a (state-given) load is beyond 1e154."""
    return x * x


@dataclass
class _LoadStats:
    """LoadStats: running avg/std of broker load; ``offload`` moves load from the max to the min broker."""

    n: int
    total: float
    squares: float
    std: float = 0.0

    def __post_init__(self) -> None:
        self.std = math.sqrt(max(self.squares / self.n - _square(self.avg), 0.0))

    @property
    def avg(self) -> float:
        return self.total / self.n

    def offload(self, max_load: float, min_load: float, amount: float) -> None:
        self.squares -= _square(max_load) + _square(min_load)
        new_max, new_min = _max(0.0, max_load - amount), min_load + amount
        self.squares += _square(new_max) + _square(new_min)
        self.std = math.sqrt(abs(self.squares / self.n - _square(self.avg)))


# ------------------------------------------------------------------------------------------ the brokers' figures


@dataclass(frozen=True)
class _Figures:
    """What TransferShedder reads of one broker's BrokerLoadData."""

    weighted_max_ema: float
    msg_throughput_ema: float
    throughput: float  # msgThroughputIn + msgThroughputOut
    updated_at: int
    topics: int
    version: str | None


def _figures(
    load: LoadData, config: LoadBalancerConfig, state: StrategyState
) -> tuple[dict[str, _Figures], dict[str, TransferBrokerEma], list[str]]:
    """(broker → figures, the operator's own EMAs to keep, notes): published figures where there are some."""
    brokers = load.snapshot.brokers
    own_needed = {b for b, d in brokers.items() if d.published is None or d.published.msgThroughputEMA is None}
    own = update_emas(load, config, state) if own_needed else {}
    figures: dict[str, _Figures] = {}
    for broker, data in brokers.items():
        published = data.published
        if published is not None:
            throughput_ema = published.msgThroughputEMA
            if throughput_ema is None:
                throughput_ema = own[broker].msg_throughput_ema
            figures[broker] = _Figures(
                published.weightedMaxEMA,
                throughput_ema,
                data.msg_throughput,
                data.lastUpdate,
                published.topics,
                published.brokerVersion,
            )
        else:
            topics = data.raw.get("numTopics")
            version = data.raw.get("brokerVersionString")
            figures[broker] = _Figures(
                own[broker].weighted_max_ema,
                own[broker].msg_throughput_ema,
                data.msg_throughput,
                data.lastUpdate,
                topics if isinstance(topics, int) and not isinstance(topics, bool) else 0,
                version if isinstance(version, str) else None,
            )
    notes = []
    without = sorted(b for b in own_needed if brokers[b].published is not None)
    if without:
        notes.append(
            f"{NAME}: {', '.join(without)} publish no msgThroughputEMA (a first 3.0 release): the operator's own "
            "average of their reports stands in"
        )
    if len(without) < len(own_needed):
        notes.append(f"{NAME}: no published BrokerLoadData: the operator's own averages of the load reports")
    return figures, {b: e for b, e in own.items() if b in own_needed}, notes


# ------------------------------------------------------------------------------------------ broker filters

_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
)


def _identifiers(text: str | None) -> tuple[tuple[int, int | str], ...]:
    """SemVer 2.0 identifiers: a numeric one sorts before an alphanumeric one, numbers by value."""
    if not text:
        return ()
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in text.split("."))


def _version_key(version: str) -> tuple[object, ...]:
    """Version.BUILD_AWARE_ORDER (jsemver): the normal version, then the pre-release (none is highest), then the
    build metadata (none is lowest)."""
    match = _SEMVER.fullmatch(version.strip())
    if match is None:
        raise ValueError(f"Invalid version string {version!r}")
    major, minor, patch, pre, build = match.groups()
    return (int(major), int(minor), int(patch), (1,) if pre is None else (0, _identifiers(pre)), _identifiers(build))


def broker_filters(figures: Mapping[str, _Figures], config: LoadBalancerConfig) -> tuple[list[str], str | None]:
    """(brokers BrokerMaxTopicCountFilter and BrokerVersionFilter keep, why the version filter failed or None)."""
    kept = sorted(b for b, f in figures.items() if f.topics < config.loadBalancerBrokerMaxTopics)
    if not config.preferLaterVersions or not kept:
        return kept, None
    keys = {}
    for broker in kept:
        version = figures[broker].version
        if not version:
            return [], f"BrokerVersionFilter: no version known for {broker} (preferLaterVersions)"
        try:
            keys[broker] = _version_key(version)
        except ValueError:
            return [], f"BrokerVersionFilter: invalid version {version!r} of {broker} (preferLaterVersions)"
    latest = max(keys.values())
    return [b for b in kept if keys[b][:4] == latest[:4]], None  # Version.equals ignores the build metadata


# ------------------------------------------------------------------------------------------ the shedder


def _is_owner(snapshot: ClusterSnapshot, bundle: str, broker: str) -> bool:
    """channel.isOwner(bundle, broker) on ELM: the ownership the cycle read; unknown is not the owner. Reports of
    the modular load manager carry no channel (Pulsar's own tests run without one): their bundles are their own."""
    data = snapshot.brokers[broker]
    if data.published is None:
        return True
    return data.published.ownedBundlesKnown and bundle in data.bundles


def _top(
    load: LoadData, config: LoadBalancerConfig, broker: str, sheddable: Callable[[str], bool]
) -> list[tuple[str, BundleStats]] | None:
    """The broker's TopBundlesLoadData as published (None: none heard); for a report of the modular load manager,
    TopKBundles over its lastStats with the operator's loadBalancerMaxNumberOfBundlesInBundleLoadReport."""
    data = load.snapshot.brokers[broker]
    if data.published is None:
        return top_bundles(data, config.loadBalancerMaxNumberOfBundlesInBundleLoadReport, sheddable)
    if data.published.topBundles is None:  # a snapshot an earlier version wrote: the order TopKBundles gives them
        return top_bundles(data, len(data.lastStats)) or None
    if not data.published.topBundles:
        return None
    return [(name, data.lastStats[name]) for name in data.published.topBundles if name in data.lastStats]


def shed(load: LoadData, config: LoadBalancerConfig, state: StrategyState) -> SheddingResult:
    snapshot = load.snapshot
    now = snapshot.taken_at
    figures, own_emas, notes = _figures(load, config, state)
    recent = dict(state.transfer_recent_brokers)

    def skip(reason: str, hit_count: int) -> SheddingResult:
        new_state = state.evolve(
            transfer_ema=own_emas,
            transfer_recent_brokers=recent,
            transfer_hit_count=hit_count,
            transfer_planned={},
            transfer_recent_before={},
        )
        return SheddingResult((), new_state, (f"{NAME}: skip ({reason})", *notes))

    # LoadStats.update
    n, total, squares, outdated = 0, 0.0, 0.0, False
    for broker in sorted(figures):
        data = figures[broker]
        if now - data.updated_at > config.loadBalancerBrokerLoadDataTTLInSeconds * 1000:
            outdated = True
            continue
        if broker in recent:
            if data.updated_at - recent[broker] < config.loadBalanceSheddingDelayInSeconds * 1000:
                return skip(f"CoolDown: {broker} has not reported since its last unload", state.transfer_hit_count)
            del recent[broker]
        n, total, squares = n + 1, total + data.weighted_max_ema, squares + _square(data.weighted_max_ema)
    if n == 0:
        return skip("OutDatedData" if outdated else "NoBrokers", state.transfer_hit_count)
    if snapshot.missing:
        missing = "; ".join(f"{b}: {why}" for b, why in sorted(snapshot.missing.items()))
        return skip(f"NoLoadData: no load data of {missing}", state.transfer_hit_count)
    stats = _LoadStats(n, total, squares)
    ordered = sorted(figures, key=lambda b: (figures[b].weighted_max_ema, b))  # outdated brokers included, as Java
    target_std = config.loadBalancerBrokerLoadTargetStd
    underload_factor = min(0.5, max(0.0, target_std / 2))
    min_idx, max_idx, shed_count = 0, len(ordered) - 1, 0

    def ema(broker: str) -> float:
        return figures[broker].weighted_max_ema

    def under_loaded(broker: str) -> bool:
        return ema(broker) < stats.avg * underload_factor or (
            figures[broker].msg_throughput_ema < figures[ordered[max_idx]].msg_throughput_ema * underload_factor
        )

    def over_loaded(broker: str) -> bool:
        return ema(broker) > config.overload_threshold and ema(broker) > stats.avg + target_std

    hit_count = state.transfer_hit_count
    if stats.std > target_std or under_loaded(ordered[min_idx]) or over_loaded(ordered[max_idx]):
        hit_count = one_more(hit_count)
    else:
        hit_count = 0
    if hit_count <= config.loadBalancerSheddingConditionHitCountThreshold:
        return skip(
            f"HitCount {hit_count}/{config.loadBalancerSheddingConditionHitCountThreshold}: "
            f"avg {stats.avg:.3f}, std {stats.std:.3f}",
            hit_count,
        )

    policies, with_policies = snapshot.policies, config.loadBalancerSheddingBundlesWithPoliciesEnabled
    excluded = frozenset(config.loadBalancerSheddingExcludedNamespaces)

    def sheddable(namespace: str) -> bool:
        return namespace not in excluded and shedding_allowed(namespace, policies, with_policies)

    tops: dict[str, list[tuple[str, BundleStats]] | None] = {}

    def top_of(broker: str) -> list[tuple[str, BundleStats]] | None:
        if broker not in tops:
            tops[broker] = _top(load, config, broker, sheddable)
        return tops[broker]

    kept, failed = broker_filters(figures, config)
    if failed is not None:
        notes.append(f"{NAME}: nothing is transferable: {failed}")
        transferable: Callable[[str, str, str], bool] = lambda _bundle, _src, _dst: False  # noqa: E731
    else:
        transferable = transfer_filter(snapshot, config, brokers=kept)  # TransferShedder.isTransferable
    transfer, debug = config.loadBalancerTransferEnabled, config.loadBalancerDebugModeEnabled
    unloads: list[Unload] = []
    empty_load_data = few_bundles = 0
    while shed_count < config.loadBalancerMaxNumberOfBrokerSheddingPerCycle and min_idx < max_idx:
        if stats.std > target_std:
            reason = "Overloaded"
        elif under_loaded(ordered[min_idx]):
            reason = "Underloaded"
        elif over_loaded(ordered[max_idx]):
            reason = "Overloaded"
        else:
            break
        hi, lo = ordered[max_idx], ordered[min_idx]
        max_idx -= 1
        max_load, min_load = ema(hi), ema(lo)
        offload = (max_load - min_load) / 2
        max_thr, min_thr = figures[hi].throughput, figures[lo].throughput
        target = _div(max_thr * offload, max_load)
        top = top_of(hi)
        if not top:
            notes.append(f"{NAME}: NoLoadData for {hi} (TopBundlesLoadData is empty)")
            empty_load_data += 1
            continue
        if len(top) == 1:
            notes.append(f"{NAME}: NoBundles on {hi} (sole bundle {top[0][0]})")
            few_bundles += 1
            continue
        why = (
            f"{NAME} {reason}: avg {stats.avg:.3f}, std {stats.std:.3f} (target {target_std:g}); "
            f"{hi} load {max_load:.3f} → {lo} load {min_load:.3f}; move {fmt_bytes(target)}"
        )
        lo_top = top_of(lo)
        min_iter: Iterator[tuple[str, BundleStats]] | None = iter(lo_top) if lo_top is not None else None
        marked = gained = 0.0
        remaining = len(top)
        for bundle, bundle_stats in top:
            if not _is_owner(snapshot, bundle, hi):
                continue
            if bundle_names.namespace_of(bundle) in excluded:
                continue
            if bundle in load.recently_unloaded:
                continue
            if not transferable(bundle, hi, lo):
                continue
            if remaining <= 1:
                break
            size = bundle_stats.msg_throughput
            if size == 0:
                continue
            swaps: list[Unload] = []
            swap_thr = 0.0
            swapped = False
            if marked - gained + size > target:
                if transfer and min_iter is not None:
                    max_new = max_thr - marked + gained - size
                    min_new = min_thr + marked - gained + size
                    for other, other_stats in min_iter:
                        if not transferable(other, lo, hi):
                            continue
                        other_size = other_stats.msg_throughput
                        if other_size == 0:
                            continue
                        if max_new + other_size < max_thr and min_new - other_size < max_thr:
                            swaps.append(Unload(other, lo, hi, f"{why}; swap {fmt_bytes(other_size)} back"))
                            max_new += other_size
                            min_new -= other_size
                            swap_thr += other_size
                            if min_new <= max_new and max_new < max_thr * 0.75:
                                swapped = True
                                break
                if not swapped:
                    break
            if transfer:
                if swapped:
                    unloads.extend(swaps)
                    if debug:  # TransferShedder counts a swap as traffic gained only inside its `if (debugMode)`
                        gained += swap_thr
                unloads.append(Unload(bundle, hi, lo, f"{why}; bundle {fmt_bytes(size)}"))
            else:
                unloads.append(Unload(bundle, hi, None, f"{why}; bundle {fmt_bytes(size)}"))
            marked += size
            remaining -= 1
        if marked > 0:
            stats.offload(max_load, min_load, _div((marked - gained) * max_load, max_thr))
            shed_count += 1
            min_idx += 1
        else:
            notes.append(f"{NAME}: NoBundles on {hi} fit the target {fmt_bytes(target)}")
            few_bundles += 1
    if not unloads:
        return skip("NoLoadData" if empty_load_data else ("NoBundles" if few_bundles else "HitCount"), hit_count)
    sent = []
    for unload in unloads:
        if not _is_owner(snapshot, unload.bundle, unload.source):
            notes.append(
                f"{NAME}: drop the swap of {unload.bundle}: {unload.source} does not own it (ELM's state channel "
                "refuses an unload from a broker that is not the owner)"
            )
            continue
        sent.append(unload)
    # recentlyUnloadedBrokers at once; forget_unloads takes a source back out unless one of its unloads is sent
    planned = {unload.bundle: unload.source for unload in sent}
    before = {source: recent[source] for source in set(planned.values()) if source in recent}
    recent.update(dict.fromkeys(planned.values(), now))
    new_state = state.evolve(
        transfer_ema=own_emas,
        transfer_recent_brokers=recent,
        transfer_hit_count=0,
        transfer_planned=planned,
        transfer_recent_before=before,
    )
    notes.append(f"{NAME}: std after the plan {stats.std:.4f}")
    return SheddingResult(tuple(sent), new_state, tuple(notes))
