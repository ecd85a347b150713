"""The immutable cluster snapshot every strategy plans from.

Field names and units are those of Pulsar's ``LocalBrokerData`` as served by
``GET /admin/v2/broker-stats/load-report``: cpu in percent-of-one-core units (limit = 100 × cores),
memory and directMemory in MiB, bandwidth in kbit/s, rates in msg/s, throughputs in bytes/s.
A snapshot file (format ``pulsar-lb-snapshot/1``) is what the admin API said, captured; parsing
validates it once here so strategies can trust every number: finite, not negative, and within the
bounds of ``strategies.documents`` (1e15 for resource figures and bundle or topic rates and
throughputs, 5e307 for a broker's own totals, 2**53 − 1 for counts and timestamps; a resource limit
is 0 or at least 1e-6).

Longer than our modules usually are (about 600 lines) on purpose: the model, the field-by-field reader that
names what is wrong, and the reader's fast path (msgspec, in C, for the 100,000 bundles of a large cluster)
must take exactly the same documents — the fast path's bounds are the reader's, a hair inside — and they
are kept side by side so that one is not changed without the others.
"""

from __future__ import annotations

import itertools
import json
import math
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Annotated, Any

try:  # checks each broker's lastStats in C; without it (a Spark driver has only numpy) the reader does
    import msgspec

    HAVE_MSGSPEC = True
except ImportError:  # pragma: no cover
    HAVE_MSGSPEC = False

from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies.documents import (
    MAX_AMOUNT,
    MAX_BROKER_TOTAL,
    MAX_INTEGER,
    MIN_LIMIT,
    Reader,
    describe,
)
from pulsar_lb_operator.strategies.errors import UserError
from pulsar_lb_operator.strategies.heap import collector_paused
from pulsar_lb_operator.strategies.index import SnapshotIndex
from pulsar_lb_operator.strategies.policies import NO_POLICIES, NamespacePolicies, parse_policies

SNAPSHOT_FORMAT = "pulsar-lb-snapshot/1"
RESOURCE_FIELDS = ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut")


class SnapshotError(UserError, ValueError):
    """A snapshot that cannot be planned from; the message names the offending field."""


def _float32(value: float) -> float:
    """Java's ``(float)`` cast: ResourceUsage.percentUsage() is computed in float precision in Pulsar."""
    try:
        single: float = struct.unpack("f", struct.pack("f", value))[0]
        return single
    except OverflowError:  # beyond Float.MAX_VALUE: Java gives infinity (parsed snapshots never get here)
        return math.copysign(math.inf, value)


@dataclass(frozen=True)
class ResourceUsage:
    usage: float
    limit: float

    def percent_usage(self) -> float:
        limit = _float32(self.limit)
        if limit <= 0:  # not known (or below float precision: parsing accepts no such limit)
            return 0.0
        return _float32(_float32(_float32(self.usage) / limit) * 100)


class MessageTotals:
    """msg rate and throughput in + out, for anything with Pulsar's four message fields."""

    msgRateIn: float
    msgRateOut: float
    msgThroughputIn: float
    msgThroughputOut: float

    @property
    def msg_rate(self) -> float:
        return self.msgRateIn + self.msgRateOut

    @property
    def msg_throughput(self) -> float:
        return self.msgThroughputIn + self.msgThroughputOut

    @property
    def traffic(self) -> tuple[float, float, float]:
        """The cost models' features: msg rate in + out, throughput in, throughput out."""
        return (self.msg_rate, self.msgThroughputIn, self.msgThroughputOut)


@dataclass(frozen=True)
class BundleStats(MessageTotals):
    """NamespaceBundleStats: what the owning broker reports for one bundle."""

    msgRateIn: float = 0.0
    msgRateOut: float = 0.0
    msgThroughputIn: float = 0.0
    msgThroughputOut: float = 0.0
    consumerCount: int = 0
    producerCount: int = 0
    topics: int = 0
    cacheSize: int = 0


@dataclass(frozen=True)
class ResourceWeights:
    cpu: float = 1.0
    memory: float = 0.0
    direct_memory: float = 0.0
    bandwidth_in: float = 1.0
    bandwidth_out: float = 1.0


@dataclass(frozen=True)
class PublishedLoad:
    """What a broker on the extensible load manager (ELM) published itself, beside the LocalBrokerData-shaped
    report the collector makes of it (the report's ``extensibleLoadManager`` object): TransferShedder decides
    from these figures, as ELM's leader does, never from averages of its own.

    ``topBundles`` is the broker's TopBundlesLoadData as published (TopKBundles' order, smallest first; empty when
    none was heard or it was a tombstone; None in a snapshot an earlier version wrote, with their count only),
    ``ownedBundlesKnown`` whether the report's ``bundles`` are the ownership the cycle read (ownedNamespaces, served
    from ELM's state channel): without it no bundle counts as owned."""

    weightedMaxEMA: float
    msgThroughputEMA: float | None  # None: the broker's version does not publish it (the first 3.0 releases)
    topics: int  # 0 when not published, as BrokerMaxTopicCountFilter reads a missing count
    topBundles: tuple[str, ...] | None = ()
    ownedBundlesKnown: bool = False
    brokerVersion: str | None = None  # BrokerLookupData.brokerVersion, for BrokerVersionFilter (None: unknown)


@dataclass(frozen=True)
class BrokerLoad(MessageTotals):
    """One broker's LocalBrokerData (``published``: what an ELM broker published, see PublishedLoad)."""

    broker: str
    cpu: ResourceUsage
    memory: ResourceUsage
    directMemory: ResourceUsage
    bandwidthIn: ResourceUsage
    bandwidthOut: ResourceUsage
    msgRateIn: float
    msgRateOut: float
    msgThroughputIn: float
    msgThroughputOut: float
    lastUpdate: int
    lastStats: Mapping[str, BundleStats]
    bundles: frozenset[str]
    webServiceUrl: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # The broker's enablePersistentTopics / enableNonPersistentTopics, as its report carries them
    # (LocalBrokerData defaults both to true); placement filters on them (LoadManagerShared.applyNamespacePolicies).
    persistentTopicsEnabled: bool = True
    nonPersistentTopicsEnabled: bool = True
    published: PublishedLoad | None = None

    def max_resource_usage(self) -> float:
        """Unweighted max over all five resources, as a fraction (LocalBrokerData.getMaxResourceUsage)."""
        usages: list[float] = [getattr(self, name).percent_usage() for name in RESOURCE_FIELDS]
        return max(usages) / 100

    def max_resource_usage_with_weight(self, weights: ResourceWeights, memory: bool = True) -> float:
        """LocalBrokerData.getMaxResourceUsageWithWeight, as a fraction (may exceed 1.0).

        ``memory=False`` is the newer four-resource form (PIP-358) that AvgShedder and
        LeastResourceUsageWithWeight call: the JVM heap is left out whatever its weight.
        """
        terms = [
            self.cpu.percent_usage() * weights.cpu,
            self.directMemory.percent_usage() * weights.direct_memory,
            self.bandwidthIn.percent_usage() * weights.bandwidth_in,
            self.bandwidthOut.percent_usage() * weights.bandwidth_out,
        ]
        if memory:
            terms.append(self.memory.percent_usage() * weights.memory)
        return max(terms) / 100

    def owned_bundles(self) -> frozenset[str]:
        return self.bundles | frozenset(self.lastStats)


@dataclass(frozen=True)
class TopicStats(MessageTotals):
    msgRateIn: float = 0.0
    msgRateOut: float = 0.0
    msgThroughputIn: float = 0.0
    msgThroughputOut: float = 0.0


@dataclass(frozen=True)
class ClusterSnapshot:
    cluster: str
    taken_at: int
    brokers: Mapping[str, BrokerLoad]
    namespaces: Mapping[str, tuple[int, ...]] = field(default_factory=lambda: MappingProxyType({}))
    topics: Mapping[str, Mapping[str, TopicStats]] = field(default_factory=lambda: MappingProxyType({}))
    # isolation policies, anti-affinity groups, namespaces whose policies could not be read (strategies/policies.py)
    policies: NamespacePolicies = NO_POLICIES
    # available brokers whose load data could not be used (none heard, a tombstone, unparsable, stale) → why; the
    # extensible load manager's collector fills it: TransferShedder skips a cycle with any (NoLoadData)
    missing: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @cached_property
    def index(self) -> SnapshotIndex:
        """Owners, per-broker sums and per-namespace counts, each built once (strategies/index.py)."""
        return SnapshotIndex(self)

    def owner_of(self, bundle: str) -> str | None:
        return self.index.owner(bundle)

    def bundle_count(self, namespace: str) -> int:
        """Bundles of a namespace: from its boundaries when known, else from what brokers own."""
        if namespace in self.namespaces:
            return len(self.namespaces[namespace]) - 1
        return self.index.owned_in_namespace(namespace)

    def without_brokers(self, excluded: Iterable[str]) -> ClusterSnapshot:
        gone = set(excluded)
        kept = {k: v for k, v in self.brokers.items() if k not in gone}
        missing = MappingProxyType({k: v for k, v in self.missing.items() if k not in gone})
        return ClusterSnapshot(
            self.cluster, self.taken_at, MappingProxyType(kept), self.namespaces, self.topics, self.policies, missing
        )

    def to_json(self) -> dict[str, Any]:
        """The ``pulsar-lb-snapshot/1`` document (broker reports exactly as they were received)."""
        doc: dict[str, Any] = {
            "format": SNAPSHOT_FORMAT,
            "cluster": self.cluster,
            "takenAt": self.taken_at,
            "brokers": {b: dict(load.raw) for b, load in sorted(self.brokers.items())},
        }
        if self.namespaces:
            doc["namespaces"] = {
                ns: {"boundaries": [bundle_names.format_boundary(p) for p in bounds]}
                for ns, bounds in sorted(self.namespaces.items())
            }
        if not self.policies.empty:
            self.policies.write_json(doc)  # isolation policies, failure domains, groups, policiesUnknown
        if self.missing:
            doc["brokersWithoutLoadData"] = dict(sorted(self.missing.items()))
        if self.topics:
            doc["topics"] = {
                b: {t: vars(s).copy() for t, s in sorted(ts.items())} for b, ts in sorted(self.topics.items())
            }
        return doc


# --------------------------------------------------------------------------------------------
# Parsing: one reader walks the JSON and names the exact path of anything wrong.


def _reader(value: Any, path: str) -> Reader:
    return Reader(value, path, SnapshotError)


def _resource(reader: Reader) -> ResourceUsage:
    usage = reader.child("usage").number()
    limit_reader = reader.child("limit")
    limit = limit_reader.number()
    if 0 < limit < MIN_LIMIT:
        raise limit_reader.fail(f"must be 0 (not known) or at least {MIN_LIMIT:g}, got {limit!r}")
    return ResourceUsage(usage, limit)


def _bundle_stats(reader: Reader) -> BundleStats:
    reader.obj()

    def num(key: str) -> float:
        return reader.child(key, required=False, default=0.0).number()

    def count(key: str) -> int:
        return reader.child(key, required=False, default=0).integer()

    return BundleStats(
        msgRateIn=num("msgRateIn"),
        msgRateOut=num("msgRateOut"),
        msgThroughputIn=num("msgThroughputIn"),
        msgThroughputOut=num("msgThroughputOut"),
        consumerCount=count("consumerCount"),
        producerCount=count("producerCount"),
        topics=count("topics"),
        cacheSize=count("cacheSize"),
    )


def _trusted(cls: type, fields: dict[str, Any]) -> Any:
    """An instance of a frozen dataclass from fields already checked, without its ``__init__`` (one
    ``object.__setattr__`` per field): a snapshot of 100,000 bundles makes 100,000 BundleStats."""
    instance: Any = object.__new__(cls)
    instance.__dict__.update(fields)
    return instance


_RATE_KEYS = ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut")
# The bounds the C-checked paths use, a hair inside the reader's: a value at a bound (or an integer literal
# that only rounds to it) is left to the reader, whose comparison is exact.
_INSIDE = 1 - 2**-40
_JSON_TYPES = frozenset({dict, list, str, int, float, bool, type(None)})

if HAVE_MSGSPEC:
    _Rate = Annotated[float, msgspec.Meta(ge=0, le=MAX_AMOUNT * _INSIDE)]
    _Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_INTEGER)]

    class _PlainBundleStats(msgspec.Struct):
        """What ``_bundle_stats`` accepts, as a schema msgspec checks in C: numbers within the bounds (no
        NaN, no infinity, no boolean), integer counts, a missing field 0, other fields ignored."""

        msgRateIn: _Rate = 0.0
        msgRateOut: _Rate = 0.0
        msgThroughputIn: _Rate = 0.0
        msgThroughputOut: _Rate = 0.0
        consumerCount: _Count = 0
        producerCount: _Count = 0
        topics: _Count = 0
        cacheSize: _Count = 0

    _Amount = Annotated[float, msgspec.Meta(ge=0, le=MAX_AMOUNT * _INSIDE)]
    _Total = Annotated[float, msgspec.Meta(ge=0, le=MAX_BROKER_TOTAL * _INSIDE)]

    class _PlainResource(msgspec.Struct):
        usage: _Amount
        limit: _Amount

    class _PlainLocalBrokerData(msgspec.Struct):
        """What ``parse_broker_load`` reads of a LocalBrokerData document, as a schema msgspec decodes and
        checks in C straight from the answer's bytes: every other field is skipped without being built."""

        cpu: _PlainResource
        memory: _PlainResource
        directMemory: _PlainResource
        bandwidthIn: _PlainResource
        bandwidthOut: _PlainResource
        msgRateIn: _Total
        msgRateOut: _Total
        msgThroughputIn: _Total
        msgThroughputOut: _Total
        lastUpdate: _Count
        lastStats: dict[str, _PlainBundleStats]
        bundles: list[str]
        loadReportType: str = "LocalBrokerData"
        persistentTopicsEnabled: bool = True
        nonPersistentTopicsEnabled: bool = True
        # any JSON value: parse_broker_load keeps a string, the admin client checks either URL's host
        webServiceUrl: Any = msgspec.UNSET
        webServiceUrlTls: Any = msgspec.UNSET

    _decoder = msgspec.json.Decoder(_PlainLocalBrokerData)


class RawReport(Mapping[str, Any]):
    """A load report as the broker sent it: its bytes, decoded with ``json.loads`` (as the document was
    before) the first time it is read as a mapping — which only a snapshot file or a load manager's name
    asks for — so a cycle neither decodes nor keeps the whole document of every broker."""

    __slots__ = ("_document", "content")

    def __init__(self, content: bytes) -> None:
        self.content = content
        self._document: dict[str, Any] | None = None

    def _decoded(self) -> dict[str, Any]:
        if self._document is None:  # two threads may both decode: the same document either way
            self._document = json.loads(self.content)
        return self._document

    def __getitem__(self, key: str) -> Any:
        return self._decoded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._decoded())

    def __len__(self) -> int:
        return len(self._decoded())


class DecodedReport(RawReport):
    """A load report decoded once, from its bytes, into the checked fields ``parse_broker_load`` needs
    (``decode_load_report``). ``get`` answers ``bundles``, ``webServiceUrl`` and ``webServiceUrlTls`` from
    them — what the admin client checks of every report — without decoding the whole document."""

    __slots__ = ("fields",)
    _SERVED = frozenset({"bundles", "webServiceUrl", "webServiceUrlTls"})

    def __init__(self, content: bytes, fields: Any) -> None:
        super().__init__(content)
        self.fields = fields

    def __bool__(self) -> bool:  # never empty (its fields are required): no need to decode it to say so
        return True

    def get(self, key: str, default: Any = None) -> Any:
        if key in self._SERVED:
            value = getattr(self.fields, key)
            return default if value is msgspec.UNSET else value
        return super().get(key, default)


def decode_load_report(content: bytes) -> DecodedReport | None:
    """A LocalBrokerData document decoded from the answer's bytes and checked in one pass (msgspec, in C),
    when it is plainly valid — as nearly every report is; None otherwise (or without msgspec): the caller
    then decodes it as JSON and ``parse_broker_load`` reads it field by field, which decides and names
    what is wrong. It takes nothing the reader would refuse: bounds a hair inside the reader's (a value at
    the bound goes to the reader), no integral float for a count, no NaN, no infinity, no boolean for a
    number, only UTF-8, valid bundle names, a resource limit of 0 or at least ``MIN_LIMIT``."""
    if not HAVE_MSGSPEC or type(content) is not bytes:
        return None
    try:
        fields = _decoder.decode(content)
    except Exception:  # msgspec's errors, or a UnicodeDecodeError: the reader's path decides
        return None
    if fields.loadReportType != "LocalBrokerData":
        return None
    for resource in (fields.cpu, fields.memory, fields.directMemory, fields.bandwidthIn, fields.bandwidthOut):
        if 0 < resource.limit < MIN_LIMIT:
            return None
    names = set(fields.lastStats)
    names.update(fields.bundles)  # mostly the same names: each checked once
    if not all(map(bundle_names.is_bundle_name, names)):
        return None
    return DecodedReport(content, fields)


def _decoded_broker_load(broker_id: str, report: DecodedReport) -> BrokerLoad:
    """The BrokerLoad of a report ``decode_load_report`` took: every field already checked."""
    fields = report.fields
    url = fields.webServiceUrl
    return BrokerLoad(
        broker=broker_id,
        cpu=ResourceUsage(fields.cpu.usage + 0.0, fields.cpu.limit + 0.0),  # + 0.0: -0.0 becomes 0.0, as Reader
        memory=ResourceUsage(fields.memory.usage + 0.0, fields.memory.limit + 0.0),
        directMemory=ResourceUsage(fields.directMemory.usage + 0.0, fields.directMemory.limit + 0.0),
        bandwidthIn=ResourceUsage(fields.bandwidthIn.usage + 0.0, fields.bandwidthIn.limit + 0.0),
        bandwidthOut=ResourceUsage(fields.bandwidthOut.usage + 0.0, fields.bandwidthOut.limit + 0.0),
        msgRateIn=fields.msgRateIn + 0.0,
        msgRateOut=fields.msgRateOut + 0.0,
        msgThroughputIn=fields.msgThroughputIn + 0.0,
        msgThroughputOut=fields.msgThroughputOut + 0.0,
        lastUpdate=fields.lastUpdate,
        lastStats=MappingProxyType(_bundle_stats_of(fields.lastStats)),
        bundles=frozenset(fields.bundles),
        webServiceUrl=url if isinstance(url, str) else None,
        raw=RawReport(report.content),
        persistentTopicsEnabled=fields.persistentTopicsEnabled,
        nonPersistentTopicsEnabled=fields.nonPersistentTopicsEnabled,
    )


def _bundle_stats_of(checked: dict[str, Any]) -> dict[str, BundleStats]:
    """BundleStats of entries msgspec checked (``_PlainBundleStats``)."""
    out = {}
    for name, stats in checked.items():
        fields = msgspec.structs.asdict(stats)
        if not (stats.msgRateIn and stats.msgRateOut and stats.msgThroughputIn and stats.msgThroughputOut):
            for key in _RATE_KEYS:  # a zero may be -0.0: Reader.number's + 0.0 makes it 0.0
                fields[key] += 0.0
        out[name] = _trusted(BundleStats, fields)
    return out


def _plain_last_stats(value: Any) -> dict[str, BundleStats] | None:
    """``lastStats`` checked at full speed (msgspec, in C) when every entry is plainly valid, as in nearly
    every report; None otherwise — or without msgspec — and the reader, field by field, finds and names
    what is wrong. A count given as an integral float (5.0) is left to the reader too."""
    if not HAVE_MSGSPEC or type(value) is not dict:
        return None
    entries = value.values()
    # msgspec would also take a Mapping or a Decimal, which the reader refuses: JSON's own types only
    if not {dict}.issuperset(map(type, entries)):
        return None
    if not _JSON_TYPES.issuperset(map(type, itertools.chain.from_iterable(map(dict.values, entries)))):
        return None
    try:
        checked = msgspec.convert(value, dict[str, _PlainBundleStats])
    except msgspec.ValidationError:
        return None
    return _bundle_stats_of(checked)


def parse_broker_load(broker_id: str, report: Any, path: str = "load-report") -> BrokerLoad:
    """Validate one ``LocalBrokerData`` JSON document (what a broker's load-report returned), or build the
    BrokerLoad of a report ``decode_load_report`` already checked."""
    if type(report) is DecodedReport:
        return _decoded_broker_load(broker_id, report)
    reader = _reader(report, path)
    data = reader.obj()
    report_type = data.get("loadReportType", "LocalBrokerData")
    if report_type != "LocalBrokerData":
        raise reader.child("loadReportType").fail(
            f"unsupported report type {describe(report_type)} (only the modular load manager's LocalBrokerData)"
        )
    last_stats = _plain_last_stats(data.get("lastStats"))
    if last_stats is None:
        last_stats = {name: _bundle_stats(stats) for name, stats in reader.child("lastStats").entries()}
    bundle_list = data.get("bundles")
    if not (type(bundle_list) is list and all(type(name) is str and name for name in bundle_list)):
        bundle_list = reader.child("bundles").string_list()
    names = set(last_stats)
    names.update(bundle_list)
    if not all(map(bundle_names.is_bundle_name, names)):
        for name in [*last_stats, *bundle_list]:
            try:
                bundle_names.split_bundle_name(name)
            except bundle_names.BundleNameError as exc:
                raise reader.fail(str(exc)) from None
    url = data.get("webServiceUrl")
    topic_modes = {}
    for key in ("persistentTopicsEnabled", "nonPersistentTopicsEnabled"):
        flag = reader.child(key, required=False, default=True)
        if not isinstance(flag.value, bool):
            raise flag.fail(f"expected true or false, got {describe(flag.value)}")
        topic_modes[key] = flag.value
    return BrokerLoad(
        broker=broker_id,
        cpu=_resource(reader.child("cpu")),
        memory=_resource(reader.child("memory")),
        directMemory=_resource(reader.child("directMemory")),
        bandwidthIn=_resource(reader.child("bandwidthIn")),
        bandwidthOut=_resource(reader.child("bandwidthOut")),
        msgRateIn=reader.child("msgRateIn").number(maximum=MAX_BROKER_TOTAL),
        msgRateOut=reader.child("msgRateOut").number(maximum=MAX_BROKER_TOTAL),
        msgThroughputIn=reader.child("msgThroughputIn").number(maximum=MAX_BROKER_TOTAL),
        msgThroughputOut=reader.child("msgThroughputOut").number(maximum=MAX_BROKER_TOTAL),
        lastUpdate=reader.child("lastUpdate").integer(),
        lastStats=MappingProxyType(last_stats),
        bundles=frozenset(bundle_list),
        webServiceUrl=url if isinstance(url, str) else None,
        raw=MappingProxyType(dict(data)),
        published=_published(reader) if "extensibleLoadManager" in data else None,
        **topic_modes,
    )


def _published(report: Reader) -> PublishedLoad:
    """The ``extensibleLoadManager`` object of an ELM broker's report (operator/collect/elm.py writes it)."""
    reader = report.child("extensibleLoadManager")
    reader.obj()
    throughput_ema = reader.child("msgThroughputEMA", required=False, default=None)
    version = report.child("brokerVersionString", required=False, default=None)
    top = reader.child("topBundles", required=False, default=[])
    return PublishedLoad(
        weightedMaxEMA=reader.child("weightedMaxEMA").number(maximum=MAX_BROKER_TOTAL),
        msgThroughputEMA=None if throughput_ema.value is None else throughput_ema.number(maximum=MAX_BROKER_TOTAL),
        topics=reader.child("topics", required=False, default=0).integer(),
        topBundles=None if _count(top) else tuple(top.string_list()),
        ownedBundlesKnown=_flag(reader.child("ownedBundlesKnown", required=False, default=False)),
        brokerVersion=None if version.value is None else version.string(),
    )


def _count(reader: Reader) -> bool:
    """An earlier version's ``topBundles``: how many there were, not their order."""
    return isinstance(reader.value, int) and not isinstance(reader.value, bool)


def _flag(reader: Reader) -> bool:
    if not isinstance(reader.value, bool):
        raise reader.fail(f"expected true or false, got {describe(reader.value)}")
    return reader.value


def _boundaries(reader: Reader) -> tuple[int, ...]:
    texts = reader.child("boundaries").string_list()
    try:
        values = [bundle_names.parse_boundary(t) for t in texts]
        bundle_names.validate_boundaries(values)
    except bundle_names.BundleNameError as exc:
        raise reader.child("boundaries").fail(str(exc)) from None
    return tuple(values)


def _topic_stats(reader: Reader) -> TopicStats:
    reader.obj()
    return TopicStats(
        **{
            k: reader.child(k, required=False, default=0.0).number()
            for k in ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut")
        }
    )


def parse_snapshot(document: Any) -> ClusterSnapshot:
    """Validate a ``pulsar-lb-snapshot/1`` document and build the snapshot."""
    with collector_paused():  # strategies/heap.py: a snapshot is made of acyclic objects only
        return _parse_snapshot(document)


def _parse_snapshot(document: Any) -> ClusterSnapshot:
    root = _reader(document, "snapshot")
    root.obj()
    fmt = root.child("format").value
    if fmt != SNAPSHOT_FORMAT:
        raise root.child("format").fail(f"expected {SNAPSHOT_FORMAT!r}, got {describe(fmt)}")
    cluster = root.child("cluster").string()
    taken_at = root.child("takenAt").integer()
    brokers_reader = root.child("brokers")
    brokers: dict[str, BrokerLoad] = {}
    for broker_id, report in brokers_reader.entries():
        if ":" not in broker_id:
            raise brokers_reader.fail(f"broker id {describe(broker_id)} is not host:port")
        brokers[broker_id] = parse_broker_load(broker_id, report.value, report.path)
    ns_reader = root.child("namespaces", required=False, default={})
    namespaces = {
        ns: _boundaries(entry)
        for ns, entry in ns_reader.entries()
        if "boundaries" in entry.obj() or "antiAffinityGroup" not in entry.obj()  # an entry may give only its group
    }
    topics: dict[str, Mapping[str, TopicStats]] = {}
    for bundle, bundle_reader in root.child("topics", required=False, default={}).entries():
        try:
            bundle_names.split_bundle_name(bundle)
        except bundle_names.BundleNameError as exc:
            raise bundle_reader.fail(str(exc)) from None
        topics[bundle] = MappingProxyType({t: _topic_stats(s) for t, s in bundle_reader.entries()})
    missing = {b: why.string() for b, why in root.child("brokersWithoutLoadData", required=False, default={}).entries()}
    return ClusterSnapshot(
        cluster=cluster,
        taken_at=taken_at,
        brokers=MappingProxyType(brokers),
        namespaces=MappingProxyType(namespaces),
        topics=MappingProxyType(topics),
        policies=parse_policies(root),
        missing=MappingProxyType(missing),
    )
