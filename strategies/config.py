"""Load-balancer settings under Pulsar's own key names, with Pulsar's defaults.

Defaults follow ServiceConfiguration on Pulsar's master after PR #26609 (AvgShedder for shedding
and placement, maxUnloadPercentage 0.5, loadBalancerDistributeBundlesEvenlyEnabled false); every
other default is the 3.x/4.x one. Values may be given as strings (``--set key=value``, dynamic
config) and are converted and range-checked here, so a bad value fails before any planning. Besides
each setting's own range, numbers are bounded as snapshot figures are (``strategies.documents``):
at most 1e15 for a float setting and 2**53 − 1 for an integer one, so that no weight or threshold
can turn a usage, a square or the state into infinity.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pulsar_lb_operator.strategies.documents import MAX_AMOUNT, MAX_INTEGER, describe
from pulsar_lb_operator.strategies.errors import UserError
from pulsar_lb_operator.strategies.snapshots import ResourceWeights

SPLIT_ALGORITHMS = (
    "range_equally_divide",
    "topic_count_equally_divide",
    "specified_positions_divide",
    "flow_or_qps_equally_divide",
)

# Deprecated spellings Pulsar still accepts.
ALIASES = {
    "loadBalancerBandwithInResourceWeight": "loadBalancerBandwidthInResourceWeight",
    "loadBalancerBandwithOutResourceWeight": "loadBalancerBandwidthOutResourceWeight",
}


class ConfigError(UserError, ValueError):
    """A configuration key or value that cannot be used; the message names the key."""


@dataclass(frozen=True)
class LoadBalancerConfig:
    loadBalancerSheddingEnabled: bool = True
    loadBalancerSheddingIntervalMinutes: int = 1
    loadBalancerSheddingGracePeriodMinutes: int = 30
    loadBalancerLoadSheddingStrategy: str = "AvgShedder"
    loadBalancerLoadPlacementStrategy: str = "AvgShedder"
    # OverloadShedder / placement overload check
    loadBalancerBrokerOverloadedThresholdPercentage: int = 85
    # ThresholdShedder
    loadBalancerBrokerThresholdShedderPercentage: int = 10
    loadBalancerHistoryResourcePercentage: float = 0.9
    loadBalancerBundleUnloadMinThroughputThreshold: float = 10
    lowerBoundarySheddingEnabled: bool = False
    # resource weights
    loadBalancerCPUResourceWeight: float = 1.0
    loadBalancerMemoryResourceWeight: float = 0.0
    loadBalancerDirectMemoryResourceWeight: float = 0.0
    loadBalancerBandwidthInResourceWeight: float = 1.0
    loadBalancerBandwidthOutResourceWeight: float = 1.0
    # LeastResourceUsageWithWeight
    loadBalancerAverageResourceUsageDifferenceThresholdPercentage: int = 10
    # UniformLoadShedder (and AvgShedder's unload amount)
    loadBalancerMsgRateDifferenceShedderThreshold: float = 50
    loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold: float = 4
    maxUnloadPercentage: float = 0.5
    minUnloadMessage: int = 1000
    minUnloadMessageThroughput: int = 1024 * 1024
    maxUnloadBundleNumPerShedding: int = -1
    # AvgShedder
    loadBalancerAvgShedderLowThreshold: float = 15
    loadBalancerAvgShedderHighThreshold: float = 40
    loadBalancerAvgShedderHitCountLowThreshold: int = 8
    loadBalancerAvgShedderHitCountHighThreshold: int = 2
    # placement filters
    loadBalancerBrokerMaxTopics: int = 50000
    loadBalancerDistributeBundlesEvenlyEnabled: bool = False
    # splitting
    loadBalancerAutoBundleSplitEnabled: bool = True
    loadBalancerAutoUnloadSplitBundlesEnabled: bool = True
    loadBalancerNamespaceBundleMaxTopics: int = 1000
    loadBalancerNamespaceBundleMaxSessions: int = 1000
    loadBalancerNamespaceBundleMaxMsgRate: int = 30000
    loadBalancerNamespaceBundleMaxBandwidthMbytes: int = 100
    loadBalancerNamespaceMaximumBundles: int = 128
    flowOrQpsDifferenceThresholdPercentage: int = 10
    supportedNamespaceBundleSplitAlgorithms: tuple[str, ...] = SPLIT_ALGORITHMS
    defaultNamespaceBundleSplitAlgorithm: str = "range_equally_divide"
    # TransferShedder (extensible load manager)
    loadBalancerBrokerLoadTargetStd: float = 0.25
    loadBalancerSheddingConditionHitCountThreshold: int = 3
    loadBalancerTransferEnabled: bool = True
    loadBalancerMaxNumberOfBrokerSheddingPerCycle: int = 3
    loadBalanceSheddingDelayInSeconds: int = 180
    loadBalancerBrokerLoadDataTTLInSeconds: int = 1800  # TransferShedder; a broker whose report is older: left out
    loadBalancerMaxNumberOfBundlesInBundleLoadReport: int = 10
    # ExtensibleLoadManagerImpl.debug(): besides logging, TransferShedder counts the traffic a swap brings
    # back to the max broker (trafficMarkedToGain) only in debug mode
    loadBalancerDebugModeEnabled: bool = False
    # the extensible manager's TransferShedder (and TopKBundles) shed a bundle whose namespace has an isolation
    # policy or an anti-affinity group only when true: its destinations are limited (ServiceConfiguration)
    loadBalancerSheddingBundlesWithPoliciesEnabled: bool = False
    # namespaces TransferShedder (and the extensible load manager's TopKBundles) never shed (PIP-380)
    loadBalancerSheddingExcludedNamespaces: tuple[str, ...] = ()
    # the extensible load manager's BrokerVersionFilter: only brokers on the newest version take bundles
    preferLaterVersions: bool = False

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def weights(self) -> ResourceWeights:
        return ResourceWeights(
            cpu=self.loadBalancerCPUResourceWeight,
            memory=self.loadBalancerMemoryResourceWeight,
            direct_memory=self.loadBalancerDirectMemoryResourceWeight,
            bandwidth_in=self.loadBalancerBandwidthInResourceWeight,
            bandwidth_out=self.loadBalancerBandwidthOutResourceWeight,
        )

    @property
    def overload_threshold(self) -> float:
        return self.loadBalancerBrokerOverloadedThresholdPercentage / 100

    @property
    def grace_period_ms(self) -> int:
        return self.loadBalancerSheddingGracePeriodMinutes * 60_000

    def replace(self, overrides: Mapping[str, Any]) -> LoadBalancerConfig:
        """A copy with ``overrides`` applied; values may be strings. Unknown keys are errors."""
        known = {f.name: f for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for raw_key, value in overrides.items():
            key = ALIASES.get(raw_key, raw_key)
            if key not in known:
                raise ConfigError(f"unknown configuration key {describe(raw_key)}{did_you_mean(raw_key, known)}")
            changes[key] = convert_value(key, known[key].type, value)
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def did_you_mean(key: object, known: Iterable[str]) -> str:
    """`` (did you mean maxUnloadsPerCycle?)`` for a key one typo away from a known one; "" otherwise."""
    if not isinstance(key, str):
        return ""
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.8)
    return f" (did you mean {by_lower[close[0]]}?)" if close else ""


def config_keys() -> list[str]:
    return [f.name for f in dataclasses.fields(LoadBalancerConfig)]


def convert_value(key: str, annotation: Any, value: Any) -> Any:
    kind = str(annotation)
    try:
        if kind == "bool":
            if isinstance(value, bool):
                return value
            words = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}
            if isinstance(value, str) and value.strip().lower() in words:
                return words[value.strip().lower()]
            raise ValueError
        if kind == "int":
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, float) and value.is_integer():
                return int(value)
            return int(value) if isinstance(value, int) else int(str(value).strip())
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError
            number = float(value)
            if not math.isfinite(number):
                raise ValueError
            return number
        if kind == "str":
            if not isinstance(value, str) or not value.strip():
                raise ValueError
            return value.strip()
        if kind.startswith("tuple"):
            items = value.split(",") if isinstance(value, str) else list(value)
            return tuple(str(i).strip() for i in items if str(i).strip())
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer beyond any float
        pass
    raise ConfigError(f"{key}: invalid value {describe(value)} (expected {kind})")


YEAR_MINUTES = 365 * 24 * 60  # the longest period a setting may give: past it no schedule runs (its dates overflow)


def _validate(cfg: LoadBalancerConfig) -> None:
    def need(condition: bool, key: str, rule: str) -> None:
        if not condition:
            raise ConfigError(f"{key}: {describe(getattr(cfg, key))} is out of range ({rule})")

    for f in dataclasses.fields(cfg):
        if f.type == "int":
            need(abs(getattr(cfg, f.name)) <= MAX_INTEGER, f.name, f"at most {MAX_INTEGER}")
        elif f.type == "float":
            need(abs(getattr(cfg, f.name)) <= MAX_AMOUNT, f.name, f"at most {MAX_AMOUNT:g}")

    for key in (
        "loadBalancerSheddingIntervalMinutes",
        "loadBalancerAvgShedderHitCountLowThreshold",
        "loadBalancerAvgShedderHitCountHighThreshold",
        "loadBalancerNamespaceMaximumBundles",
        "loadBalancerMaxNumberOfBrokerSheddingPerCycle",
        "loadBalancerMaxNumberOfBundlesInBundleLoadReport",
    ):
        need(getattr(cfg, key) >= 1, key, ">= 1")
    for key in (
        "loadBalancerSheddingGracePeriodMinutes",
        "loadBalancerBrokerOverloadedThresholdPercentage",
        "loadBalancerBrokerThresholdShedderPercentage",
        "loadBalancerBundleUnloadMinThroughputThreshold",
        "loadBalancerCPUResourceWeight",
        "loadBalancerMemoryResourceWeight",
        "loadBalancerDirectMemoryResourceWeight",
        "loadBalancerBandwidthInResourceWeight",
        "loadBalancerBandwidthOutResourceWeight",
        "loadBalancerAverageResourceUsageDifferenceThresholdPercentage",
        "minUnloadMessage",
        "minUnloadMessageThroughput",
        "loadBalancerAvgShedderLowThreshold",
        "loadBalancerAvgShedderHighThreshold",
        "loadBalancerBrokerMaxTopics",
        "loadBalancerNamespaceBundleMaxTopics",
        "loadBalancerNamespaceBundleMaxMsgRate",
        "loadBalancerNamespaceBundleMaxBandwidthMbytes",
        "flowOrQpsDifferenceThresholdPercentage",
        "loadBalancerBrokerLoadTargetStd",
        "loadBalancerSheddingConditionHitCountThreshold",
        "loadBalanceSheddingDelayInSeconds",
        "loadBalancerBrokerLoadDataTTLInSeconds",
    ):
        need(getattr(cfg, key) >= 0, key, ">= 0")
    need(0 <= cfg.loadBalancerHistoryResourcePercentage < 1, "loadBalancerHistoryResourcePercentage", "[0, 1)")
    need(
        cfg.loadBalancerSheddingIntervalMinutes <= YEAR_MINUTES,
        "loadBalancerSheddingIntervalMinutes",
        f"at most {YEAR_MINUTES}",
    )
    need(0 < cfg.maxUnloadPercentage <= 1, "maxUnloadPercentage", "(0, 1]")
    need(
        cfg.maxUnloadBundleNumPerShedding == -1 or cfg.maxUnloadBundleNumPerShedding >= 1,
        "maxUnloadBundleNumPerShedding",
        "-1 or >= 1",
    )
    need(
        cfg.loadBalancerAvgShedderLowThreshold <= cfg.loadBalancerAvgShedderHighThreshold,
        "loadBalancerAvgShedderLowThreshold",
        "<= loadBalancerAvgShedderHighThreshold",
    )
    unknown = [a for a in cfg.supportedNamespaceBundleSplitAlgorithms if a not in SPLIT_ALGORITHMS]
    if unknown:
        raise ConfigError(f"supportedNamespaceBundleSplitAlgorithms: unknown algorithm {describe(unknown[0])}")
    if cfg.defaultNamespaceBundleSplitAlgorithm not in SPLIT_ALGORITHMS:
        raise ConfigError(
            f"defaultNamespaceBundleSplitAlgorithm: unknown algorithm {cfg.defaultNamespaceBundleSplitAlgorithm!r}"
        )
