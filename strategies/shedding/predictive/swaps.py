"""A swap: a bundle out of a broker and smaller ones in, in the same cycle, where no one-way move can help it; and
its mirror, a relay: a bundle too big for any broker's band goes to one that hands smaller ones on.

A broker on a small machine holds few bundles, each a large share of it: in a cluster of 4- and 32-core brokers a
bundle that costs 2 points on a big broker costs 16 on a small one. When its every bundle takes it below the band
(the plan leaves such a bundle out, ``pairing`` refuses it as over-unloading) and none can be split (the namespace
has loadBalancerNamespaceMaximumBundles, or the bundle is one topic), giving alone never balances it: it stays above
the band for good. Giving one bundle and taking smaller ones back from brokers that stay within the band, in the
same cycle, lands it within the band without ever leaving it underloaded.

The mirror (``best_relay``): a hot topic's bundle that lands its giver within the band but would leave any receiver
above it. Every one-way move either leaves the giver out of the band or over-places the bundle, so the giver stays
hot for good. Its receiver taking it and handing its own smaller bundles on to brokers below the level, in the same
cycle, lands every broker touched within the band: the route the benchmark's lower bound counts for a bundle that
fits nowhere.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.loaddata import LoadData
from pulsar_lb_operator.strategies.shedding.predictive.forecast import Forecast, Traffic, bundle_traffic, carried
from pulsar_lb_operator.strategies.shedding.predictive.pairing import (
    Move,
    allowed_brokers,
    best_move,
    ceiling,
    gains,
    permitted,
)

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
    refused = ~permitted(load, [bundle for bundle, _ in out], below)  # namespace policies
    gain_out[(new_below >= level + band) | (new_below > limit) | refused] = -np.inf
    incoming = _incoming(load, forecast, source, movable, givers - {source, *below}, level, band, halves)
    if not incoming:
        return []
    best: tuple[float, list[Move]] | None = None
    for row, (bundle, traffic) in enumerate(out):
        column = int(np.argmax(gain_out[row]))  # the first of the best: destinations are sorted
        if not np.isfinite(gain_out[row, column]):
            continue
        destination = below[column]
        with forecast.trying():  # the search only tries: the forecast is left as it was found
            moves: list[Move] = [_moved(forecast, source, bundle, destination, traffic)]
            before = dict(zip((source, destination), moves[0][3]))
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
        giver_gain = [_square(incoming[k][3] - level) - _square(incoming[k][4] - level) for k in candidates]
        gained = np.array(giver_gain) + np.square(now[0] - level) - np.square(ends - level)
        gained[(ends >= level + band) | (ends > limit)] = -np.inf
        pick = int(np.argmax(gained))  # the first of the best: givers and their bundles are sorted
        if not np.isfinite(gained[pick]):
            return None
        giver, bundle, traffic, u_giver, _ = incoming[candidates[pick]]
        before.setdefault(giver, u_giver)
        moves.append(_moved(forecast, giver, bundle, source, traffic))
        used.add(giver)
    gained = sum(_square(was - level) - _square(forecast.usage(b) - level) for b, was in before.items())
    return gained, moves


def best_relay(
    load: LoadData,
    forecast: Forecast,
    source: str,
    movable: Mapping[str, list[str]],
    destinations: set[str],
    relays: set[str],
    level: float,
    band: float,
    config: LoadBalancerConfig,
    halves: Mapping[str, Traffic],
    room: int,
    cap: int,
) -> list[Move]:
    """The relay that shrinks Σ(usage − level)² most over the brokers it touches, at most ``room`` moves: ``source``
    gives one of its ``movable`` bundles, landing itself no lower than the band, to one of the ``relays`` below the
    level, the one it leaves least above the band (never above the ceiling) — where that is above the band and the
    giver, the move ``pairing`` refuses as over-placement; that one hands its own bundles on, the best move each
    time (``pairing.best_move``: onto ``destinations`` below the level, none over-placed) and at most ``cap``, until
    it is within the band. [] if none gets there. The forecast is left as it was found."""
    limit = ceiling(config, level, band)
    out = carried(load, source, sorted(movable.get(source, [])), halves)
    below = sorted(d for d in relays & destinations if d != source and forecast.usage(d) < level)
    if room < 2 or not out or not below:
        return []
    left = forecast.departures(source, np.array([t for _, t in out]))
    _, ends = forecast.arrivals(below, np.array([t for _, t in out]))
    refused = ~permitted(load, [bundle for bundle, _ in out], below)  # namespace policies
    ends[(ends > limit) | ~np.isfinite(ends) | refused] = np.inf
    best: tuple[float, list[Move]] | None = None
    for row, (bundle, traffic) in enumerate(out):
        column = int(np.argmin(ends[row]))  # the least overshoot; the first of equals: relays are sorted
        end = ends[row, column]
        if not (np.isfinite(end) and end >= level + band and end > left[row] and left[row] >= level - band):
            continue  # a plain move's to make (``pairing``), or one over-unloading its giver: no relay's
        relay = below[column]
        most = min(room - 1, cap)
        with forecast.trying():  # the search only tries: the forecast is left as it was found
            moves: list[Move] = [_moved(forecast, source, bundle, relay, traffic)]
            others = destinations - {source}
            moves += _hand_on(load, forecast, relay, movable, others, level, band, config, halves, most)
            landed = forecast.usage(relay) < level + band
        total = gains(moves, level)
        if landed and total > 1e-9 and (best is None or total > best[0]):
            best = (total, moves)
    return [] if best is None else best[1]


def _moved(forecast: Forecast, giver: str, bundle: str, taker: str, traffic: Traffic) -> Move:
    """``bundle`` (its ``traffic``) moved from ``giver`` to ``taker`` in the forecast: the move, with both brokers'
    usage before and after it."""
    before = (forecast.usage(giver), forecast.usage(taker))
    forecast.move(giver, taker, traffic)
    return (giver, bundle, taker, before, (forecast.usage(giver), forecast.usage(taker)))


def _hand_on(
    load: LoadData,
    forecast: Forecast,
    relay: str,
    movable: Mapping[str, list[str]],
    destinations: set[str],
    level: float,
    band: float,
    config: LoadBalancerConfig,
    halves: Mapping[str, Traffic],
    most: int,
) -> list[Move]:
    """``relay``'s best moves, one at a time (in the forecast), at most ``most``, until it is within the band or
    none helps."""
    bundles = sorted(movable.get(relay, []))
    moves: list[Move] = []
    while forecast.usage(relay) >= level + band and len(moves) < most:
        choice = best_move(load, forecast, relay, bundles, destinations - {relay}, level, config, halves, band)
        if choice is None:
            break
        bundle, destination, before, after = choice
        forecast.move(relay, destination, bundle_traffic(load, relay, bundle, halves))
        bundles.remove(bundle)
        moves.append((relay, bundle, destination, before, after))
    return moves


def _square(x: float) -> float:
    """``x * x``: past the largest float it is infinite, where ``x ** 2`` raises OverflowError (a report near
    MAX_BROKER_TOTAL; the shedder checks every figure for finiteness where it is used)."""
    return x * x
