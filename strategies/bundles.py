"""Bundle names, hash ranges and topic → bundle mapping, exactly as Pulsar computes them.

A namespace's hash space [0x00000000, 0xffffffff] is cut by sorted boundaries; bundle i is
[p_i, p_{i+1}) except the last, which is closed at 0xffffffff. A topic belongs to the bundle
holding crc32(full topic name) (Guava's ``Hashing.crc32()`` is plain CRC-32, like ``zlib.crc32``).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
import zlib
from dataclasses import dataclass

from pulsar_lb_operator.strategies.documents import describe
from pulsar_lb_operator.strategies.errors import UserError

FIRST_BOUNDARY = 0x00000000
LAST_BOUNDARY = 0xFFFFFFFF
FULL_RANGE = "0x00000000_0xffffffff"

_BOUNDARY_RE = re.compile(r"0[xX][0-9a-fA-F]{1,8}")
_RANGE_RE = re.compile(r"^(0[xX][0-9a-fA-F]{1,8})_(0[xX][0-9a-fA-F]{1,8})$")

# NamespaceService.isSystemServiceNamespace: these namespaces are never shed. One compiled alternation,
# and the answer is cached per namespace (a cycle asks for every bundle; a cluster has far fewer namespaces).
_SYSTEM_NAMESPACE = re.compile(
    r"^(?:pulsar/system"
    r"|sla-monitor/[^/]+/[^:]+:\d+"
    r"|pulsar/[^/]+/[^:]+:\d+"  # heartbeat v1
    r"|pulsar/[^:]+:\d+"  # heartbeat v2
    r")$"
)


class BundleNameError(UserError, ValueError):
    """A bundle name or range that Pulsar would reject."""


def format_boundary(value: int) -> str:
    return f"0x{value:08x}"


def parse_boundary(text: str) -> int:
    """Parse a boundary the way ``Long.decode`` does for Pulsar's hex strings."""
    if not isinstance(text, str):
        raise BundleNameError(f"invalid bundle boundary {describe(text)}")
    return _parse_boundary_text(text)


@functools.lru_cache(maxsize=1 << 16)  # namespaces split alike share their boundaries
def _parse_boundary_text(text: str) -> int:
    if not _BOUNDARY_RE.fullmatch(text):
        raise BundleNameError(f"invalid bundle boundary {describe(text)}")
    return int(text, 16)


@dataclass(frozen=True, order=True)
class BundleRange:
    """A hash range [lower, upper) (closed when upper is 0xffffffff)."""

    lower: int
    upper: int

    def __post_init__(self) -> None:
        if not (FIRST_BOUNDARY <= self.lower < self.upper <= LAST_BOUNDARY):
            raise BundleNameError(f"invalid bundle range {self.lower:#x}_{self.upper:#x}")

    @classmethod
    def parse(cls, text: str) -> BundleRange:
        match = _RANGE_RE.match(text) if isinstance(text, str) else None
        if not match:
            raise BundleNameError(f"invalid bundle range {describe(text, limit=200)}")
        return cls(int(match.group(1), 16), int(match.group(2), 16))

    def __str__(self) -> str:
        return f"{format_boundary(self.lower)}_{format_boundary(self.upper)}"

    def contains(self, position: int) -> bool:
        if self.upper == LAST_BOUNDARY:
            return self.lower <= position <= self.upper
        return self.lower <= position < self.upper

    def can_split(self) -> bool:
        """NamespaceBundleFactory.canSplitBundle: a width-1 range can't be split further."""
        return self.upper - self.lower > 1


def split_bundle_name(bundle: str) -> tuple[str, BundleRange]:
    """``tenant/ns/0x..._0x...`` → (``tenant/ns``, range); splits at the last '/' like LoadManagerShared."""
    namespace, sep, range_text = bundle.rpartition("/") if isinstance(bundle, str) else ("", "", "")
    if not sep or not namespace:
        shown = describe(bundle, limit=200)
        raise BundleNameError(f"invalid bundle name {shown}: expected tenant/namespace/0x..._0x...")
    return namespace, BundleRange.parse(range_text)


def is_bundle_name(bundle: str) -> bool:
    """Whether ``split_bundle_name`` accepts the name (the range's answer is cached: namespaces share ranges)."""
    namespace, sep, range_text = bundle.rpartition("/")
    return bool(sep and namespace) and _is_range(range_text)


@functools.lru_cache(maxsize=1 << 16)
def _is_range(text: str) -> bool:
    try:
        BundleRange.parse(text)
    except BundleNameError:
        return False
    return True


def namespace_of(bundle: str) -> str:
    return bundle.rpartition("/")[0]


def bundle_name(namespace: str, bundle_range: BundleRange) -> str:
    return f"{namespace}/{bundle_range}"


@functools.lru_cache(maxsize=1 << 16)
def is_system_namespace(namespace: str) -> bool:
    return _SYSTEM_NAMESPACE.match(namespace) is not None


def is_system_bundle(bundle: str) -> bool:
    """Whether a bundle's namespace is a system namespace (never shed)."""
    return is_system_namespace(bundle.rpartition("/")[0])


def topic_hash(topic: str) -> int:
    """CRC-32 of the full topic name's UTF-8 bytes, as an unsigned 32-bit value."""
    return zlib.crc32(topic.encode("utf-8")) & 0xFFFFFFFF


def default_boundaries(num_bundles: int) -> list[int]:
    """NamespaceBundleFactory's default partitions for a new namespace."""
    if num_bundles < 1:
        raise BundleNameError("a namespace needs at least one bundle")
    segment = (1 << 32) // num_bundles
    return [i * segment for i in range(num_bundles)] + [LAST_BOUNDARY]


def validate_boundaries(boundaries: list[int]) -> None:
    if len(boundaries) < 2 or boundaries[0] != FIRST_BOUNDARY or boundaries[-1] != LAST_BOUNDARY:
        raise BundleNameError("boundaries must start at 0x00000000 and end at 0xffffffff")
    if any(a >= b for a, b in itertools.pairwise(boundaries)):
        raise BundleNameError("boundaries must be strictly increasing")


def ranges_of(boundaries: list[int]) -> list[BundleRange]:
    return [BundleRange(a, b) for a, b in itertools.pairwise(boundaries)]


def find_range(boundaries: list[int], position: int) -> BundleRange:
    """Binary search as NamespaceBundles.findBundle: exact match on p_i gives bundle i."""
    index = bisect.bisect_right(boundaries, position) - 1
    index = min(max(index, 0), len(boundaries) - 2)
    return BundleRange(boundaries[index], boundaries[index + 1])


def bundle_of_topic(namespace: str, boundaries: list[int], topic: str) -> str:
    return bundle_name(namespace, find_range(boundaries, topic_hash(topic)))


def apply_split(boundaries: list[int], bundle_range: BundleRange, split_at: list[int]) -> list[int]:
    """New namespace boundaries after splitting ``bundle_range`` at ``split_at``."""
    if not split_at:
        raise BundleNameError("a split needs at least one boundary")
    if any(not (bundle_range.lower < p < bundle_range.upper) for p in split_at):
        raise BundleNameError(f"split position outside bundle {bundle_range}")
    if bundle_range.lower not in boundaries or bundle_range.upper not in boundaries:
        raise BundleNameError(f"bundle {bundle_range} is not a bundle of this namespace")
    return sorted(set(boundaries) | set(split_at))


def destination_keyed_by_range(version: str | None) -> bool:
    """Pulsar 3.0 – 4.0.9 keep an unload's destinationBroker in a map keyed by the bundle *range* only
    (fixed in 4.0.10 and 4.1): two unloads of one range in different namespaces overwrite each other's
    destination. An unknown version counts as affected — the cautious reading."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    if not found:
        return True
    return tuple(int(p or 0) for p in found.groups()) < (4, 0, 10)
