"""Splits: ``PUT …/{bundle}/split`` as the owner carries it out, with Pulsar's four algorithms."""

from __future__ import annotations

import itertools

from pulsar_lb_operator.simulator.model import (
    SimError,
)
from pulsar_lb_operator.simulator.state import ClusterState
from pulsar_lb_operator.strategies import (
    RANGE_EQUALLY_DIVIDE,
    SPECIFIED_POSITIONS_DIVIDE,
    TOPIC_COUNT_EQUALLY_DIVIDE,
    SplitError,
    flow_or_qps_equally_divide,
    range_equally_divide,
    specified_positions_divide,
    topic_count_equally_divide,
)
from pulsar_lb_operator.strategies import bundles as bundle_names


class Splits(ClusterState):
    """Mixed into SimulatedCluster (cluster.py); the state it shares with the other mixins is ClusterState's."""

    def split(self, bundle: str, algorithm: str | None, positions: list[int] | None, unload: bool) -> None:
        """PUT …/{bundle}/split: the owner splits the bundle and owns both halves (or unloads them).

        On the extensible load manager the halves always stay on the owner: NamespaceService.splitAndOwnBundle
        hands the split to ExtensibleLoadManagerImpl.splitNamespaceBundleAsync, which has no ``unload`` (its state
        channel makes each half Owned by the source broker), so ``unload=true`` changes nothing there."""
        unload = unload and getattr(self.scenario, "load_manager", "modular") != "extensible"
        with self.lock:
            self.check_bundle(bundle)
            supported = self.config.supportedNamespaceBundleSplitAlgorithms
            name = algorithm or self.config.defaultNamespaceBundleSplitAlgorithm
            if algorithm and algorithm not in supported:
                raise SimError(
                    412,
                    f"Unsupported namespace bundle split algorithm, supported algorithms are [{', '.join(supported)}]",
                )
            namespace, bundle_range = bundle_names.split_bundle_name(bundle)
            if not bundle_range.can_split():
                raise SimError(412, "Split bundle failed due to invalid request: bundle can't be split further")
            _, per_topic = self.bundle_stats(bundle)
            try:
                if name == RANGE_EQUALLY_DIVIDE:
                    cuts = range_equally_divide(bundle_range)
                elif name == TOPIC_COUNT_EQUALLY_DIVIDE:
                    cuts = topic_count_equally_divide(sorted(per_topic))
                elif name == SPECIFIED_POSITIONS_DIVIDE:
                    cuts = specified_positions_divide(bundle_range, sorted(per_topic), positions or [])
                else:
                    cuts = flow_or_qps_equally_divide(
                        per_topic,
                        self.config.loadBalancerNamespaceBundleMaxMsgRate,
                        self.config.loadBalancerNamespaceBundleMaxBandwidthMbytes,
                        self.config.flowOrQpsDifferenceThresholdPercentage,
                    )
            except SplitError as exc:
                raise SimError(412, str(exc)) from None
            cuts = [c for c in cuts if bundle_range.lower < c < bundle_range.upper]
            if not cuts:
                return  # no valid boundary: 204 and nothing changes
            owner = self.ownership.get(bundle) or self.assign(bundle)  # an unowned bundle is assigned first
            del self.ownership[bundle]
            self.namespaces[namespace] = bundle_names.apply_split(self.namespaces[namespace], bundle_range, cuts)
            edges = [bundle_range.lower, *sorted(cuts), bundle_range.upper]
            for lower, upper in itertools.pairwise(edges):
                child = bundle_names.bundle_name(namespace, bundle_names.BundleRange(lower, upper))
                self.ownership[child] = owner
                if unload:
                    self._release(child)
