"""A plain re-statement of Pulsar master's TransferShedder.findBundlesForUnloading, line by line, over the messages
ELM's brokers publish (BrokerLoadData and TopBundlesLoadData as JSON), to hold the operator's TransferShedder to.

It shares no code with the operator: the stores are dicts of the published JSON, ``is_owner`` is the state channel,
``recently_unloaded_bundles`` and ``recently_unloaded_brokers`` are UnloadScheduler's maps and ``hit_count`` its
``unloadConditionHitCount``. Java's HashMap order, which only breaks ties of equal loads, is broker-name order here.
Debug mode, isolation and anti-affinity policies, BrokerVersionFilter and the available-broker lookup failing are
left out: the scenarios it checks have none of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class JavaTransferShedder:
    conf: dict[str, Any]  # ServiceConfiguration's values, by Pulsar's names
    hit_count: int = 0
    recently_unloaded_bundles: dict[str, int] = field(default_factory=dict)
    recently_unloaded_brokers: dict[str, int] = field(default_factory=dict)

    def find_bundles_for_unloading(
        self,
        now: int,
        available_brokers: list[str],
        load_store: dict[str, dict[str, Any]],
        top_store: dict[str, dict[str, Any]],
        is_owner: Callable[[str, str], bool],
    ) -> tuple[set[tuple[str, str, str | None, str]], str]:
        """(decisions as (source, bundle, destination, reason), the counter's label: Success, or why it skipped)."""
        conf = self.conf
        decisions: list[tuple[str, str, str | None, str]] = []
        # LoadStats.update
        total, sq_total, n = 0.0, 0.0, 0
        reason = None
        missing = set(available_brokers)
        for broker in sorted(load_store):
            data = load_store[broker]
            missing.discard(broker)
            if now - data["updatedAt"] > conf["loadBalancerBrokerLoadDataTTLInSeconds"] * 1000:
                reason = "OutDatedData"
                continue
            if broker in self.recently_unloaded_brokers:
                elapsed = data["updatedAt"] - self.recently_unloaded_brokers[broker]
                if elapsed < conf["loadBalanceSheddingDelayInSeconds"] * 1000:
                    return set(), "CoolDown"
                del self.recently_unloaded_brokers[broker]
            load = data["weightedMaxEMA"]
            total += load
            sq_total += load * load
            n += 1
        if n == 0:
            return set(), reason or "NoBrokers"
        if missing:
            return set(), "NoLoadData"
        avg = total / n
        std = math.sqrt(sq_total / n - avg * avg) if sq_total / n - avg * avg >= 0 else math.nan
        ordered = sorted(load_store, key=lambda b: (load_store[b]["weightedMaxEMA"], b))
        max_index, min_index, shed = len(ordered) - 1, 0, 0
        target_std = conf["loadBalancerBrokerLoadTargetStd"]

        def under_loaded(broker: str) -> bool:
            multiplier = min(0.5, max(0.0, target_std / 2.0))
            if load_store[broker]["weightedMaxEMA"] < avg * multiplier:
                return True
            peak = load_store[ordered[max_index]]
            return load_store[broker]["msgThroughputEMA"] < peak["msgThroughputEMA"] * multiplier

        def over_loaded(broker: str) -> bool:
            load = load_store[broker]["weightedMaxEMA"]
            return load > conf["loadBalancerBrokerOverloadedThresholdPercentage"] / 100.0 and load > avg + target_std

        if std > target_std or under_loaded(ordered[min_index]) or over_loaded(ordered[max_index]):
            self.hit_count += 1
        else:
            self.hit_count = 0
        if self.hit_count <= conf["loadBalancerSheddingConditionHitCountThreshold"]:
            return set(), "HitCount"

        def transferable(bundle: str, src: str, dst: str) -> bool:  # isTransferable: BrokerMaxTopicCountFilter
            limit = conf["loadBalancerBrokerMaxTopics"]
            candidates = [b for b in available_brokers if load_store.get(b, {}).get("topics", 0) < limit]
            if dst not in candidates:
                return False
            if src in candidates:
                candidates.remove(src)
            if not conf["loadBalancerTransferEnabled"]:
                return bool(candidates)
            return dst in candidates

        def throughput(stats: dict[str, Any]) -> float:
            return stats["msgThroughputIn"] + stats["msgThroughputOut"]

        def div(a: float, b: float) -> float:
            return a / b if b else (math.nan if a == 0 else math.copysign(math.inf, a))

        empty, few = 0, 0
        while shed < conf["loadBalancerMaxNumberOfBrokerSheddingPerCycle"] and min_index < max_index:
            if std > target_std:
                why = "Overloaded"
            elif under_loaded(ordered[min_index]):
                why = "Underloaded"
            elif over_loaded(ordered[max_index]):
                why = "Overloaded"
            else:
                break
            max_broker = ordered[max_index]
            max_index -= 1
            min_broker = ordered[min_index]
            max_load = load_store[max_broker]["weightedMaxEMA"]
            min_load = load_store[min_broker]["weightedMaxEMA"]
            offload = (max_load - min_load) / 2
            max_thr = load_store[max_broker]["msgThroughputIn"] + load_store[max_broker]["msgThroughputOut"]
            min_thr = load_store[min_broker]["msgThroughputIn"] + load_store[min_broker]["msgThroughputOut"]
            offload_thr = div(max_thr * offload, max_load)
            marked = gained = 0.0
            tops = top_store.get(max_broker, {}).get("topBundlesLoadData", [])
            if not tops:
                empty += 1
                continue
            if len(tops) == 1:
                few += 1
                continue
            min_tops = top_store.get(min_broker)
            min_iter = iter(min_tops["topBundlesLoadData"]) if min_tops is not None else None
            remaining = len(tops)
            for entry in tops:
                bundle = entry["bundleName"]
                if not is_owner(bundle, max_broker):
                    continue
                if bundle.rsplit("/", 1)[0] in conf["loadBalancerSheddingExcludedNamespaces"]:
                    continue
                if bundle in self.recently_unloaded_bundles:
                    continue
                if not transferable(bundle, max_broker, min_broker):
                    continue
                if remaining <= 1:
                    break
                size = throughput(entry["stats"])
                if size == 0:
                    continue
                swap, swaps = False, []
                if marked - gained + size > offload_thr:
                    if conf["loadBalancerTransferEnabled"] and min_iter is not None:
                        max_new = max_thr - marked + gained - size
                        min_new = min_thr + marked - gained + size
                        for other in min_iter:
                            if not transferable(other["bundleName"], min_broker, max_broker):
                                continue
                            other_size = throughput(other["stats"])
                            if other_size == 0:
                                continue
                            if max_new + other_size < max_thr and min_new - other_size < max_thr:
                                swaps.append((min_broker, other["bundleName"], max_broker, why))
                                max_new += other_size
                                min_new -= other_size
                                if min_new <= max_new and max_new < max_thr * 0.75:
                                    swap = True
                                    break
                    if not swap:
                        break
                if conf["loadBalancerTransferEnabled"]:
                    if swap:
                        decisions.extend(swaps)  # gained grows only in debug mode
                    decisions.append((max_broker, bundle, min_broker, why))
                else:
                    decisions.append((max_broker, bundle, None, why))
                marked += size
                remaining -= 1
            if marked > 0:
                adjusted = div((marked - gained) * max_load, max_thr)
                sq_total -= max_load * max_load + min_load * min_load
                new_max = max(0.0, max_load - adjusted) if not math.isnan(adjusted) else math.nan
                sq_total += new_max * new_max + (min_load + adjusted) ** 2
                std = math.sqrt(abs(sq_total / n - avg * avg))
                shed += 1
                min_index += 1
            else:
                few += 1
        if not decisions:
            return set(), "NoLoadData" if empty else ("NoBundles" if few else "HitCount")
        self.hit_count = 0
        return set(decisions), "Success"

    def unloaded(self, source: str, bundle: str, at: int) -> None:
        """UnloadScheduler, after an unload succeeded."""
        self.recently_unloaded_bundles[bundle] = at
        self.recently_unloaded_brokers[source] = at

    def expire(self, now: int) -> None:
        """UnloadScheduler.execute: bundles out of the grace period leave recentlyUnloadedBundles."""
        timeout = now - self.conf["loadBalancerSheddingGracePeriodMinutes"] * 60_000
        self.recently_unloaded_bundles = {b: t for b, t in self.recently_unloaded_bundles.items() if t >= timeout}
