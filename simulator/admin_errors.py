"""How a real broker turns a bad bundle range or a dynamic-config value into an answer.

Two kinds of error body (RestException): ``RestException(Status, message)`` gives JSON ``{"reason": …}``;
``RestException(Throwable)`` — what ``AdminResource.resumeAsyncResponseExceptionally`` makes of any exception
that is not a WebApplicationException, a NotAllowedException (409), a metadata NotFound (404) or BadVersion
(409) — gives a text/plain 500 with the message and the stack trace (``cluster.unexpected``). Which one an
endpoint gives depends on where the range is parsed:

* unload (``NamespacesBase.internalUnloadNamespaceBundleAsync``) parses it first with
  ``NamespaceBundleFactory.getBundle(String, String)`` inside the future chain: a malformed range is an
  IllegalArgumentException (or Long.decode's NumberFormatException) → text/plain 500; a well-formed range
  that is not one of the namespace's bundles reaches ``validateNamespaceBundleRange`` → 412 JSON;
* split, topicHashPositions (``validateNamespaceBundleOwnershipAsync``) parse it only in
  ``PulsarWebResource.validateNamespaceBundleRange``, which turns any IllegalArgumentException into a 412
  JSON reason with its message.
"""

from __future__ import annotations

import re

from pulsar_lb_operator.simulator.model import SimError, unexpected
from pulsar_lb_operator.strategies import ClusterError

FULL_UPPER_BOUND = 0xFFFFFFFF  # NamespaceBundles.FULL_UPPER_BOUND
LOAD_MANAGER_CLASSES = (  # what BrokerService's loadManagerClassName validator (Class.forName) finds
    "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl",
    "org.apache.pulsar.broker.loadbalance.impl.SimpleLoadManagerImpl",
    "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl",
)


class JavaException(ClusterError):
    """An exception a broker's code throws: its Java class name and message."""

    def __init__(self, java_class: str, message: str) -> None:
        super().__init__(message)
        self.java_class = java_class
        self.message = message


def _decode(text: str) -> int:
    """java.lang.Long.decode: optional sign, 0x/0X/# for hex, a leading 0 for octal."""
    if not text:
        raise JavaException("java.lang.NumberFormatException", "Zero length string")
    body, sign = text, 1
    if body[0] in "+-":
        sign, body = (-1 if body[0] == "-" else 1), body[1:]
    radix = 10
    if body.startswith(("0x", "0X")):
        radix, body = 16, body[2:]
    elif body.startswith("#"):
        radix, body = 16, body[1:]
    elif body.startswith("0") and len(body) > 1:
        radix, body = 8, body[1:]
    try:
        if not body or body[0] in "+-" or not body.isascii():
            raise ValueError
        value = sign * int(body, radix)
    except ValueError:
        under = f" under radix {radix}" if radix != 10 else ""
        raise JavaException("java.lang.NumberFormatException", f'For input string: "{body}"{under}') from None
    if not -(2**63) <= value < 2**63:
        raise JavaException("java.lang.NumberFormatException", f'For input string: "{body}"')
    return value


def parse_range(range_text: str, message: str = "Invalid bundle range") -> tuple[int, int]:
    """The range as NamespaceBundleFactory.getBundle / validateNamespaceBundleRange read it (JavaException)."""
    if "_" not in range_text:
        raise JavaException("java.lang.IllegalArgumentException", message)
    parts = range_text.split("_")
    while parts and parts[-1] == "":  # String.split drops trailing empty strings
        parts.pop()
    if len(parts) < 2:
        raise JavaException(
            "java.lang.ArrayIndexOutOfBoundsException", f"Index 1 out of bounds for length {len(parts)}"
        )
    lower, upper = _decode(parts[0]), _decode(parts[1])
    if lower > upper:  # Guava Range.range
        close = "]" if upper == FULL_UPPER_BOUND else ")"
        raise JavaException("java.lang.IllegalArgumentException", f"Invalid range: [{lower}..{upper}{close}")
    return lower, upper


def validate_range(bounds: list[int], range_text: str) -> None:
    """PulsarWebResource.validateNamespaceBundleRange: 412 with the IllegalArgumentException's message;
    NamespaceBundles.validateBundle's own checks included."""
    try:
        lower, upper = parse_range(range_text, f"Invalid bundle range: {range_text}")
    except JavaException as exc:
        if exc.java_class.endswith(("IllegalArgumentException", "NumberFormatException")):
            raise SimError(412, exc.message) from None
        raise unexpected(exc.java_class, exc.message) from None
    if lower not in bounds[:-1]:
        raise SimError(412, "Cannot find bundle in the bundles list")
    if bounds[bounds.index(lower) + 1] != upper:
        raise SimError(412, "Invalid upper boundary for bundle")


def parse_range_for_unload(range_text: str) -> None:
    """NamespaceBundleFactory.getBundle(String, String) in the unload chain: a malformed range is a text/plain
    500 (RestException(Throwable)), not a 412."""
    try:
        parse_range(range_text)
    except JavaException as exc:
        raise unexpected(exc.java_class, exc.message) from None


def validate_namespace_name(tenant: str, namespace: str) -> None:
    """AdminResource.validateNamespaceName: NamespaceName.get refuses a part outside NamedEntity's
    ``[-=:.\\w]`` (or an empty one) → 412 "Namespace name is not valid"."""
    if not all(re.fullmatch(r"[-=:.\w]+", part) for part in (tenant, namespace)):
        raise SimError(412, "Namespace name is not valid")


def namespace_missing() -> SimError:
    """getNamespacePoliciesAsync on a namespace without policies: 404 (RestException(NOT_FOUND, …))."""
    return SimError(404, "Namespace does not exist")
