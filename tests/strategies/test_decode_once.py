"""A load report's bytes decoded once, straight into checked fields, read exactly as json.loads + the reader.

The collector hands each report's bytes to ``decode_load_report`` (msgspec, in C) and falls back to
``json.loads`` and ``parse_broker_load``'s field-by-field reader when it returns None. These tests hold
the fast path to the reader: for every document, either the fast path declines it or it gives the same
BrokerLoad, field by field; and whatever the reader refuses, the fast path declines.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from pulsar_lb_operator.strategies.documents import MAX_AMOUNT, MAX_BROKER_TOTAL, MAX_INTEGER
from pulsar_lb_operator.strategies.snapshots import SnapshotError, decode_load_report, parse_broker_load
from tests.builders import broker_report, bundle, stats

BROKER = "b1:8080"
NAME = bundle("t/ns", 0)


def _report(**changes: Any) -> dict[str, Any]:
    doc = broker_report(
        cpu=(50, 400),
        memory=(1000, 4096),
        bw_in=(10, 1000),
        bundles={NAME: stats(10, 20, 300, 400, topics=2), bundle("t/ns", 1): stats(0, 0, 0, 0, topics=0)},
    )
    doc["bundles"] = [f"pulsar/{BROKER}/0x00000000_0xffffffff", *doc["lastStats"]]
    doc["webServiceUrl"] = f"http://{BROKER}"
    doc["bundleStats"] = doc["lastStats"]  # a field the parse does not read: skipped, kept in raw
    doc.update(changes)
    return doc


def _fields(load: Any) -> tuple:
    return (
        load.broker,
        *(repr(getattr(load, r)) for r in ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut")),
        *(repr(getattr(load, k)) for k in ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut")),
        repr(load.lastUpdate),
        {k: repr(v) for k, v in load.lastStats.items()},
        load.bundles,
        load.webServiceUrl,
        load.persistentTopicsEnabled,
        load.nonPersistentTopicsEnabled,
    )


def _agree(content: bytes) -> bool:
    """Whether the fast path took ``content`` (asserting it read it as the reader does)."""
    fast = decode_load_report(content)
    try:
        plain = parse_broker_load(BROKER, json.loads(content))
    except (SnapshotError, ValueError, RecursionError):
        assert fast is None, f"the fast path took what the reader refuses: {content[:200]!r}"
        return False
    if fast is None:
        return False
    load = parse_broker_load(BROKER, fast)
    assert _fields(load) == _fields(plain)
    assert dict(load.raw) == json.loads(content)  # the document as received, for snapshot files
    return True


def test_a_plain_report_takes_the_fast_path_and_reads_the_same() -> None:
    assert _agree(json.dumps(_report()).encode())
    fast = decode_load_report(json.dumps(_report()).encode())
    assert fast is not None and fast.get("bundles")[0].startswith("pulsar/") and fast.get("webServiceUrlTls") is None
    assert fast.get("webServiceUrl") == f"http://{BROKER}" and fast.get("brokerVersionString") is None


def _text(doc: dict[str, Any], old: str, new: str) -> bytes:
    content = json.dumps(doc)
    assert old in content
    return content.replace(old, new, 1).encode()


@pytest.mark.parametrize(
    "content",
    [
        _text(_report(msgRateIn=0.5), '"msgRateIn": 0.5', '"msgRateIn": -0.0'),
        _text(_report(msgRateIn=0.5), '"msgRateIn": 0.5', '"msgRateIn": NaN'),
        _text(_report(msgRateIn=0.5), '"msgRateIn": 0.5', '"msgRateIn": Infinity'),
        _text(_report(msgRateIn=0.5), '"msgRateIn": 0.5', '"msgRateIn": 1e400'),
        _text(_report(msgRateIn=0.5), '"msgRateIn": 0.5', '"msgRateIn": true'),
        _text(_report(msgRateIn=0.5), '"msgRateIn": 0.5', '"msgRateIn": -1'),
        _text(_report(msgRateIn=0.5), '"msgRateIn": 0.5', f'"msgRateIn": {MAX_BROKER_TOTAL!r}'),
        _text(_report(msgRateIn=0.5), '"msgRateIn": 0.5', f'"msgRateIn": {int(MAX_BROKER_TOTAL) + 10**290}'),
        _text(_report(msgRateIn=0.5), '"msgRateIn": 0.5', f'"msgRateIn": {int(MAX_BROKER_TOTAL) - 10**290}'),
        _text(_report(msgRateIn=0.5), '"msgRateIn": 0.5', '"msgRateIn": 123456789012345678901234567890'),
        _text(_report(msgRateIn=0.5), '"msgRateIn": 0.5', '"msgRateIn": 1, "msgRateIn": 2'),  # the last wins
        json.dumps(_report(lastUpdate=1_750_000_000_000.0)).encode(),  # an integral float: the reader's
        json.dumps(_report(lastUpdate=MAX_INTEGER)).encode(),
        json.dumps(_report(lastUpdate=MAX_INTEGER + 1)).encode(),
        json.dumps(_report(lastUpdate=-1)).encode(),
        json.dumps(_report(cpu={"usage": 1, "limit": 1e-7})).encode(),
        json.dumps(_report(cpu={"usage": 1, "limit": 1e-6})).encode(),
        json.dumps(_report(cpu={"usage": MAX_AMOUNT, "limit": 100})).encode(),
        json.dumps(_report(cpu={"usage": 1})).encode(),
        json.dumps(_report(cpu={"usage": "1", "limit": 100})).encode(),
        json.dumps(_report(cpu=None)).encode(),
        json.dumps(_report(loadReportType="LocalBrokerData")).encode(),
        json.dumps(_report(loadReportType="BrokerLoadData")).encode(),
        json.dumps(_report(loadReportType=None)).encode(),
        json.dumps(_report(persistentTopicsEnabled=False, nonPersistentTopicsEnabled=False)).encode(),
        json.dumps(_report(persistentTopicsEnabled=None)).encode(),
        json.dumps(_report(persistentTopicsEnabled="true")).encode(),
        json.dumps(_report(webServiceUrl=7)).encode(),
        json.dumps(_report(webServiceUrl=None)).encode(),
        json.dumps(_report(bundles=["not-a-bundle"])).encode(),
        json.dumps(_report(bundles=[""])).encode(),
        json.dumps(_report(bundles=[NAME, 3])).encode(),
        json.dumps(_report(bundles={})).encode(),
        json.dumps(_report(lastStats={"t/ns/0x1": stats()})).encode(),
        json.dumps(_report(lastStats={NAME: {"topics": 2.0}})).encode(),
        json.dumps(_report(lastStats={NAME: {"msgRateIn": -0.0, "topics": 1, "extra": [1, {"a": None}]}})).encode(),
        json.dumps(_report(lastStats={NAME: {"msgRateIn": MAX_AMOUNT}})).encode(),
        json.dumps(_report(lastStats={NAME: []})).encode(),
        json.dumps(_report(lastStats=[])).encode(),
        json.dumps({k: v for k, v in _report().items() if k != "lastStats"}).encode(),
        json.dumps({k: v for k, v in _report().items() if k != "bundles"}).encode(),
        json.dumps({k: v for k, v in _report().items() if k != "lastUpdate"}).encode(),
        json.dumps(_report(bundles=[*_report()["bundles"], "t/ns/\ud800"])).encode(),  # an escaped lone surrogate
        json.dumps(_report(brokerVersionString="é ☃")).encode(),
        json.dumps(_report(brokerVersionString="é ☃"), ensure_ascii=False).encode(),
        json.dumps(_report()).encode("utf-16"),  # json.loads detects it; the reader decides
        b"\xef\xbb\xbf" + json.dumps(_report()).encode(),  # a UTF-8 byte order mark
        json.dumps([_report()]).encode(),
        json.dumps(_report())[:-1].encode(),  # truncated
        b"null",
        b"",
    ],
)
def test_the_fast_path_takes_only_what_the_reader_takes(content: bytes) -> None:
    try:
        json.loads(content)
    except ValueError:
        assert decode_load_report(content) is None  # not JSON: the client says so, as before
        return
    _agree(content)


def test_random_numbers_read_the_same_either_way() -> None:
    """Numbers of every kind near the bounds and far from them: the fast path declines or agrees."""
    rng = random.Random(7)
    pool = [
        0,
        -0.0,
        1,
        0.1,
        1e-300,
        5e-324,
        MAX_AMOUNT,
        MAX_AMOUNT * (1 - 2**-52),
        MAX_AMOUNT + 1,
        MAX_BROKER_TOTAL,
        2**53,
        2**53 + 1,
        2**64 + 1,
        10**15,
        10**15 + 1,
        -5,
    ]
    taken = 0
    for _ in range(400):
        value = rng.choice([*pool, rng.uniform(0, 2e15), rng.random() * 10 ** rng.randint(-20, 20)])
        where = rng.choice(["msgRateIn", "cpu", "lastUpdate", "stats", "count"])
        doc = _report()
        if where == "cpu":
            doc["cpu"] = {"usage": value, "limit": rng.choice([100, value])}
        elif where == "stats":
            doc["lastStats"][NAME]["msgThroughputIn"] = value
        elif where == "count":
            doc["lastStats"][NAME]["consumerCount"] = value
        else:
            doc[where] = value
        taken += _agree(json.dumps(doc).encode())
    assert taken > 100  # the fast path is what a plain report takes
