"""What a bundle is expected to carry: its average where its report is a jitter draw, what is past the jitter beyond."""

import pytest

from pulsar_lb_operator.strategies.loaddata import LoadData, build_load_data
from tests.builders import NOW, broker_report, bundle, snapshot, stats

# each report's draw of a topic's jitter, ±20 %: the ten reports before the latest average to 1.0 per bundle
DRAWS = [1.2, 0.8, 1.1, 0.9, 1.0, 1.15, 0.85, 1.05, 0.95, 1.0]
JITTERY = [bundle("t/jittery", i, 16) for i in range(16)]


def _history(latest: dict[str, float], extra: dict[str, list[float]] | None = None) -> LoadData:
    """Eleven reports of one broker carrying the jittery namespace at 100 msg/s per bundle (a draw each report,
    each bundle its own), ``extra`` bundles at the rates listed (one per report, the latest last); the last report
    has the jittery bundles at ``latest`` × 100."""
    extra = extra or {}
    data: dict = {}
    for k in range(11):
        rates = {b: 100 * DRAWS[(k + i) % len(DRAWS)] for i, b in enumerate(JITTERY)}
        if k == 10:
            rates = {b: 100 * latest.get(b, 1.0) for b in JITTERY}
        for b, series in extra.items():
            offset = 11 - len(series)
            if k >= offset:
                rates[b] = series[k - offset]
        bundles = {b: stats(rate, 0, 1000 * rate) for b, rate in rates.items()}
        snap = snapshot({"b1:8080": broker_report(cpu=(50, 100), bundles=bundles)}, taken_at=NOW + k * 60_000)
        load, data, _ = build_load_data(snap, data, {}, 0)
    return load


LATEST = dict(zip(JITTERY, [1.25, 0.75, 1.2, 0.8, 1.1, 0.9, 1.0, 1.0] * 2))  # the latest report's draws


def _expected(load: LoadData, bundle: str) -> tuple[float, float, float]:
    """What the bundle is expected to carry: its entry, or its report's traffic where it has none."""
    (report,) = load.snapshot.brokers.values()
    return load.expected_traffic.get(bundle, report.lastStats[bundle].traffic)


def test_a_bundle_whose_report_is_a_jitter_draw_is_expected_at_its_average():
    load = _history(LATEST)
    for b in JITTERY:
        rate, bytes_in, _ = _expected(load, b)
        assert rate == pytest.approx(100, abs=4)  # not 125 or 75: what the next report is likely to say
        assert bytes_in == pytest.approx(1000 * rate)


def test_what_a_namespace_does_together_is_traffic_not_jitter():
    """A tenant's surge (or its daily curve) moves every bundle of its namespace: the averages lag it, the reports
    do not."""
    load = _history(dict.fromkeys(JITTERY, 1.5))
    for b in JITTERY:
        assert _expected(load, b)[0] == pytest.approx(150, rel=0.05)


def test_what_a_bundle_does_past_the_jitter_its_namespace_shows_counts():
    """A hot topic: its report, 400, is mostly what it carries — all but the part the jitter could make."""
    hot = JITTERY[3]
    load = _history({**LATEST, hot: 4.0})
    assert 330 < _expected(load, hot)[0] < 400
    assert all(_expected(load, b)[0] == pytest.approx(100, abs=4) for b in JITTERY if b != hot)


def test_a_bundle_alone_in_its_namespace_or_with_a_short_history_is_read_as_reported():
    alone, young = bundle("t/alone", 0, 1), bundle("t/jittery2", 0, 2)
    other = bundle("t/jittery2", 1, 2)
    load = _history({}, {alone: [100, 60, 140] * 3 + [100, 150], young: [80, 120], other: [100] * 11})
    assert alone not in load.expected_traffic  # nothing to tell its jitter from its namespace's movement
    assert young not in load.expected_traffic  # two samples: its average is a draw itself


def test_without_jitter_a_bundle_that_changes_alone_is_read_as_reported():
    """Where the cluster's bundles show no jitter of their own, any change one shows is real."""
    changed = JITTERY[5]
    data: dict = {}
    for k in range(11):
        bundles = {b: stats(110 if b == changed and k == 10 else 100, 0, 0) for b in JITTERY}
        snap = snapshot({"b1:8080": broker_report(cpu=(50, 100), bundles=bundles)}, taken_at=NOW + k * 60_000)
        load, data, _ = build_load_data(snap, data, {}, 0)
    assert load.expected_traffic == {}  # every bundle as reported: 110 for the one that changed


def test_a_level_read_from_jittering_bundles_is_known_as_far_as_their_averages_and_their_namespaces_movement():
    """The sixteen bundles' latest draws spread by about a fifth around their average: a level made of them is read
    from ten-sample averages and the namespace's movement in one report, each off by a part of a draw. Four bundles
    of the namespace share its movement's error (it adds up across them, where each average's own does not): more
    than twice one bundle's error. Where no bundle jitters, a level is as reported and off by nothing."""
    expected = _history(LATEST).expected
    assert 0.15 < expected.jitter < 0.3
    one = expected.error([(JITTERY[0], 10.0)])
    four = expected.error([(b, 10.0) for b in JITTERY[:4]])
    assert 0 < one < 10 * expected.jitter  # a part of one draw
    assert 2 * one < four < 4 * one
    assert expected.error([("t/elsewhere/0x00000000_0xffffffff", 10.0)]) == 0.0  # not read from averages

    data: dict = {}
    for k in range(11):
        bundles = {b: stats(100, 0, 0) for b in JITTERY}
        snap = snapshot({"b1:8080": broker_report(cpu=(50, 100), bundles=bundles)}, taken_at=NOW + k * 60_000)
        steady, data, _ = build_load_data(snap, data, {}, 0)
    assert steady.expected.error([(b, 10.0) for b in JITTERY]) == 0.0
