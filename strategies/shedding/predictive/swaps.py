"""A swap: a bundle out of a broker and smaller ones in, in the same cycle, where no one-way move can help it.

A broker on a small machine holds few bundles, each a large share of it: in a cluster of 4- and 32-core brokers a
bundle that costs 2 points on a big broker costs 16 on a small one. When its every bundle takes it below the band
(the plan leaves such a bundle out, ``pairing`` refuses it as over-unloading) and none can be split (the namespace
has loadBalancerNamespaceMaximumBundles, or the bundle is one topic), giving alone never balances it: it stays above
the band for good. Giving one bundle and taking smaller ones back from brokers that stay within the band, in the
same cycle, lands it within the band without ever leaving it underloaded.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.loaddata import LoadData
from pulsar_lb_operator.strategies.shedding.predictive.forecast import Forecast, Traffic, carried
from pulsar_lb_operator.strategies.shedding.predictive.pairing import Move, allowed_brokers, ceiling

# giver, bundle, traffic, the giver's usage now and once the bundle is gone
Incoming = tuple[str, str, Traffic, float, float]


def best_swap(
    load: LoadData,
    forecast: Forecast,
    source: str,
    movable: Mapping[str, list[str]],
    destinations: set[str],
    givers: set[str],
    level: float,
    band: float,
    config: LoadBalancerConfig,
    halves: Mapping[str, Traffic],
    room: int,
) -> list[Move]:
    """The swap that shrinks Σ(usage − level)² most over the brokers it touches, at most ``room`` moves: ``source``
    gives one of its ``movable`` bundles to one of the ``destinations`` below the level, which ends within the band,
    and takes back, one at a time, the bundle of one of the ``givers`` that helps most (each giver once, and left no
    lower than the band) until ``source`` is within the band. [] if no bundle lands it there.
    Namespace policies and the overload threshold hold for every move. The forecast is left as it was found."""
    limit = ceiling(config, level, band)
    out = carried(load, source, sorted(movable.get(source, [])), halves)
    below = sorted(d for d in destinations if d != source and forecast.usage(d) < level)
    if room < 2 or not out or not below:
        return []
    u_below, new_below = forecast.arrivals(below, np.array([t for _, t in out]))
    gain_out = np.square(u_below - level) - np.square(new_below - level)
    gain_out[(new_below >= level + band) | (new_below > limit)] = -np.inf
    for row, (bundle, _) in enumerate(out):  # namespace policies
        allowed = allowed_brokers(load, bundle)
        gain_out[row, [col for col, d in enumerate(below) if d not in allowed]] = -np.inf
    incoming = _incoming(load, forecast, source, movable, givers - {source, *below}, level, band, halves)
    if not incoming:
        return []
    best: tuple[float, list[Move]] | None = None
    for row, (bundle, traffic) in enumerate(out):
        column = int(np.argmax(gain_out[row]))  # the first of the best: destinations are sorted
        if not np.isfinite(gain_out[row, column]):
            continue
        destination = below[column]
        before = {b: forecast.usage(b) for b in (source, destination)}
        with forecast.trying():  # the search only tries: the forecast is left as it was found
            forecast.move(source, destination, traffic)
            out_move = (source, bundle, destination, (before[source], before[destination]))
            moves: list[Move] = [(*out_move, (forecast.usage(source), forecast.usage(destination)))]
            refill = _refill(forecast, source, incoming, level, band, limit, room - 1, before)
        if refill is not None and refill[0] > 1e-9 and (best is None or refill[0] > best[0]):
            best = (refill[0], moves + refill[1])
    return [] if best is None else best[1]


def _incoming(
    load: LoadData,
    forecast: Forecast,
    source: str,
    movable: Mapping[str, list[str]],
    givers: set[str],
    level: float,
    band: float,
    halves: Mapping[str, Traffic],
) -> list[Incoming]:
    """The bundles ``source`` may take back: each leaving its giver no lower than the band (a giver a little under
    the level may give a bundle that costs it little and the source much), and allowed on ``source`` by its
    namespace's policies."""
    found = []
    for giver in sorted(givers):
        moving = carried(load, giver, sorted(movable.get(giver, [])), halves)
        if not moving:
            continue
        now = forecast.usage(giver)
        left = forecast.departures(giver, np.array([t for _, t in moving]))
        found += [
            (giver, b, t, now, float(v))
            for (b, t), v in zip(moving, left)
            if v >= level - band and source in allowed_brokers(load, b)
        ]
    return found


def _refill(
    forecast: Forecast,
    source: str,
    incoming: list[Incoming],
    level: float,
    band: float,
    limit: float,
    room: int,
    before: dict[str, float],
) -> tuple[float, list[Move]] | None:
    """Bundles of ``incoming`` onto ``source`` (in the forecast), the one that helps most each time and each giver
    once, until ``source`` is within the band; with the gain over every broker touched, counted from ``before``
    (the usage of the out-move's two brokers before it). None if ``room`` moves do not get it there."""
    moves: list[Move] = []
    used: set[str] = set()
    while forecast.usage(source) <= level - band:
        if len(moves) >= room:
            return None
        candidates = [k for k, (giver, *_) in enumerate(incoming) if giver not in used]
        if not candidates:
            return None
        now, ends = forecast.arrivals([source], np.array([incoming[k][2] for k in candidates]))
        ends = ends[:, 0]
        giver_gain = [(incoming[k][3] - level) ** 2 - (incoming[k][4] - level) ** 2 for k in candidates]
        gained = np.array(giver_gain) + np.square(now[0] - level) - np.square(ends - level)
        gained[(ends >= level + band) | (ends > limit)] = -np.inf
        pick = int(np.argmax(gained))  # the first of the best: givers and their bundles are sorted
        if not np.isfinite(gained[pick]):
            return None
        giver, bundle, traffic, u_giver, _ = incoming[candidates[pick]]
        u_source = forecast.usage(source)
        before.setdefault(giver, u_giver)
        forecast.move(giver, source, traffic)
        moves.append((giver, bundle, source, (u_giver, u_source), (forecast.usage(giver), forecast.usage(source))))
        used.add(giver)
    gain = sum((was - level) ** 2 - (forecast.usage(b) - level) ** 2 for b, was in before.items())
    return gain, moves
