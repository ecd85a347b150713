"""When to act: AvgShedder's hit counters, membership events, and waiting for the reports to add up.

* Each broker counts AvgShedder's high and low hits on its distance from the mean: a high hit at half of AvgShedder's
  high pair gap (20 points by default: the gap is between two brokers), a low hit at a third of its low gap (5: our
  target is a spread under 10, which AvgShedder's 15-point pair gap cannot reach); it is triggered after
  loadBalancerAvgShedderHitCountHighThreshold high hits or ...LowThreshold low ones. A reading under the gap where the
  broker's steady level is past it — or where it is one of the two furthest apart, past the target — holds its count
  rather than clearing it (a second in a row takes a hit off). A broker being balanced keeps its count through readings
  under the gap until its moves have had as long to show (once one is held, it is triggered only where the brokers at
  their average traffic are past the target too); meanwhile a broker no move touched that turns up past the gap is part
  of the imbalance being acted on: the high hit count. A plan the rails' caps cut short goes on where the spread would
  stop it.
* A broker that carries nothing — one that joined, or came back from a restart — is a membership event, acted on
  with no hit to wait for, as Cruise Control's add-broker is (a new one once every broker has reported since).
* After a broker leaves, or someone else splits a bundle, bundles are still being placed; after a new broker
  joins (one the load profile has no history for), more may follow (a StatefulSet starts its pods one at a time,
  a minute or so apart): the shedder waits until every broker has reported since (at most ``settle_ms``). Each
  newcomer filled to the level of the moment would end above the level once the next one joins, and the grace
  period would hold what it received; a broker back from a restart brings back capacity its leaving took, so it
  is not waited for.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Set

from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.documents import one_more
from pulsar_lb_operator.strategies.loaddata import LoadData
from pulsar_lb_operator.strategies.shedding.predictive.forecast import carries_traffic, reported_after
from pulsar_lb_operator.strategies.state import StrategyState


def settled_gap(config: LoadBalancerConfig) -> float:
    """The distance from the mean under which ``hits`` clears a broker's counters (a third of AvgShedder's low
    pair gap: 5 points): the band the trigger leaves alone, and so the band an end-state plan must land in."""
    return config.loadBalancerAvgShedderLowThreshold / 3


def target_spread(config: LoadBalancerConfig) -> float:
    """The spread of the takers' levels the trigger holds at, and a plan is judged on: twice the settled gap."""
    return 2 * settled_gap(config)


def settle_ms(config: LoadBalancerConfig) -> int:
    """A broker that has not reported three shedding intervals after a change is not waited for any longer."""
    return 3 * config.loadBalancerSheddingIntervalMinutes * 60_000


def landing_ms(config: LoadBalancerConfig) -> int:
    """How long after its last move a broker being balanced keeps its counters through readings under the gap
    (``hits``): the low hit count's cycles, as long as a broker cleared would take to be triggered again."""
    return config.loadBalancerAvgShedderHitCountLowThreshold * config.loadBalancerSheddingIntervalMinutes * 60_000


def hits(
    scores: Mapping[str, float],
    mean: float,
    config: LoadBalancerConfig,
    state: StrategyState,
    takers: Set[str],
    steady: Mapping[str, float],
    averaged: Mapping[str, tuple[float, float]],
    now: int | None = None,
    steady_averaged: Mapping[str, float] | None = None,
    firm_averaged: Mapping[str, tuple[float, float]] | None = None,
    as_read: Mapping[str, float] | None = None,
    error: Callable[[str], float] | None = None,
) -> tuple[dict[str, int], dict[str, int], set[str], frozenset[str], frozenset[str]]:
    """AvgShedder's two hit counters, per broker, on its distance from the mean; the brokers triggered; the brokers
    whose counters this reading held; the brokers being balanced whose counters a reading has held since their last
    move (``landing_ms`` from ``now``, the snapshot's time; None: no broker's landing is waited for).

    None of the ``takers`` (brokers that can take load) is acted on while their spread — the hottest less the
    coolest, the pair AvgShedder compares — is under twice the gap: a broker just past the gap on one side, with
    none as far on the other, is as balanced as the target asks, and moving it would only carry the gap elsewhere.
    The spread is read on their ``steady`` levels (their models', less a bias their departures show:
    ``forecast.Forecast.unbiased``), not on the samples: the hottest and coolest of a dozen noisy samples are further
    apart than the brokers are, and a receiver just filled would be read past the target by one noisy sample and
    give back. Its counters go on counting: one sample that puts the spread under twice the gap clears nothing.
    But the rule does not hold back the pair furthest apart at their average traffic (``apart`` below, with no bias
    beyond doubt to say otherwise): a steady level shrinks a bias read from a few samples toward the cluster's, and
    reads such a pair inside the target for as long as its samples take to show the bias beyond doubt. Nor does it
    hold back a broker whose own readings past the gap complete its count with this one: the rule reads that broker
    where its samples sit (``as_read``: its steady level plus the mean of its departures since its last change, as
    far as it is past its standard error), where that is further out than its steady level — at its average traffic
    too. A plan lands brokers near the band's opposite edges; with each model a point off outward, their steady levels
    read a spread under the target that their samples, reading past the gap cycle after cycle, do not.

    At rest (no broker's moves landing), the rule asks the spread to be past twice the gap by the two ends' levels'
    own errors together (``error``: ``forecast.Forecast.level_error``, what their bundles' expected traffic may be
    off by; none where no topic's traffic jitters): a level read from averages of a few draws of topics jittering by
    tens of percent is a point or so off, and the two furthest apart of a dozen such levels are further apart than the
    brokers are (two brokers 7 points apart were read 10.3 apart). An imbalance being acted on was confirmed already.

    A single reading under the gap, where the broker's ``steady`` level is past it, is held: it does not clear the
    broker's counters, and counts as the low hit its steady level says it is. A sample is a point or more off the
    broker's level, the mean it is compared with moves by as much, and a broker whose level sits a point past the gap
    reads under it every few cycles: clearing on each such dip would restart its low hit count, and it would wait many
    times the count; not counting it would add a cycle for each. Where the steady level says it is past the gap, one
    reading under it, however deep, is a sample's error, not the broker's. So is a dip of either of the two takers
    furthest apart by their steady levels where those are past the target (``furthest``): a surge that leaves one 4.9
    points over the mean and another 5.3 under it is past the target though the first is inside the gap, and cleared on
    each of its dips its count would never complete; the cluster would wait on the other's. But such a reading never
    completes the count: a broker is triggered on a reading of its own past the gap (a model lagging traffic that
    jitters reads past the gap where the broker is not). A reading between the two gaps where the steady level is past
    the high one is a high hit: the reading is the broker's own past the gap, and a level 20 points from the mean is
    past the target by any sample's error, so AvgShedder's two high hits say when, not whether, to act (a broker whose
    samples jitter about the high gap would otherwise wait for the low hit count). Likewise one reading between the two
    gaps right after a high hit holds the high count, as a dip under the gap holds the low one: a broker whose level
    sits at the high gap reads under it every other sample, and its steady level, a point off, may not say so; two such
    readings in a row clear it. A reading under the gap where the steady level is inside the gap too clears: a broker
    whose traffic jitters around the mean crosses the gap and comes back, and must not add up its crossings into a
    trigger. A second reading under the gap in a row, where the steady level is still past it, takes a hit off instead
    (each reading after it another): a broker whose traffic drifts just past the gap reads under it twice in a row now
    and then, and starting over would wait the whole count again while the drift goes on; a run of readings under the
    gap still wears the count away. A broker whose count is complete but that no move has touched (the spread rule held
    it back while a drift was still inside the target) is held the same way, one short of the count: clearing it would
    make a drift that goes on past the target wait the whole count again. So is a broker already triggered and moved
    (one being balanced) once its moves have had as long to show as the count takes (``landing_ms``; until then it keeps
    its whole count through any dip, below): a plan that left it a few tenths past the gap would otherwise clear on its
    first dip and count again from nothing while the cluster stays past the target. Where a broker's steady level is
    inside the gap, a reading under it clears — unless the moves it was in left it past the gap by their own prediction
    (``state.predictions``: the rails' caps ended the plan's cycle before it was done, or the plan left it for one move
    at a time). Its first reading since is one sample, and for a broker with no model of its own (one that just joined)
    its only measure: one under the gap is the sample's error, as above, and the next cycle goes on with it.

    Nor is a broker being balanced (one with a move on record, ``state.predictive_moved_at``, and its counters not
    cleared since) cleared by a reading under the gap within ``landing_ms`` of its last move: a plan lands each
    broker within a model's miss of the band's edge, and one left just past the gap reads under it every other
    sample. Clearing on those readings, it would count the low hit count again from nothing while the cluster sits
    just past the target; kept, it is triggered on its next reading past the gap. But once such a reading was held,
    it is triggered only while the brokers' steady levels at their bundles' average traffic (``steady_averaged``;
    the levels of ``averaged`` by default) are past the target too: its count was set by its move, not counted, and
    under bursting traffic the next burst's reading past the gap would set off a move after every move. (Before
    any reading was held it is triggered as before: after a surge the average lags the traffic for ten samples.)
    The spread rule above still says whether anything moves.

    Nor does the spread rule stop a plan the rails' caps cut short (``state.predictive_deferred``: the brokers of
    the moves the caps left to the next cycle): the plan found those moves needed where the cluster was read past
    the target, and a spread its first moves leave read a few tenths under the target is as likely a true one a few
    tenths over. Each such broker still goes on only on a reading of its own past the gap.

    While some broker's moves are landing (one moved within ``landing_ms``), the cluster's imbalance has been
    confirmed and is being acted on: a broker no move has touched that turns up past the gap — by its reading, its
    steady level and its level at its bundles' average traffic alike (the last against the brokers' mean there), with
    the brokers there past the target, so no burst of its own or another's — is part of that imbalance, and is
    triggered after AvgShedder's high hit count rather than the low one (a noisy neighbour's processes starting on two
    brokers a report apart: the second would wait 8 cycles after the first was acted on). A cluster at rest waits the
    low hit count as before.

    Where the two takers furthest apart stay twice the gap apart for good (``apart``), each sits just past the gap
    from the mean, reads inside it every few samples, and two such readings in a row would clear its count every
    few cycles: it would never be acted on, and the cluster would stay just outside the target. A reading of either
    inside the gap then counts as a low hit, as AvgShedder counts its pair, on the brokers' levels at their average
    traffic (``averaged``) rather than on the samples or the steady levels (a bias read from a few samples comes and
    goes). But not where the biases their departures show beyond doubt, each of the gap or more (``firm_averaged``:
    those levels with the biases, each with how far it may be off), put the takers within the target even at their
    widest: a model the gap off makes a pair of brokers the target has no quarrel with, and the extremes of a dozen
    noisy samples would complete its count. A bias under the gap is left out: it moves no broker across the gap on
    its own, and one read from a few samples comes and goes."""
    high, low = dict(state.avg_hits_high), dict(state.avg_hits_low)
    triggered, dipped = set(), set()
    held = set(state.predictive_held)
    settled = settled_gap(config)
    count = config.loadBalancerAvgShedderHitCountLowThreshold
    high_gap = config.loadBalancerAvgShedderHighThreshold / 2
    high_count = config.loadBalancerAvgShedderHitCountHighThreshold
    present = takers & set(scores)  # takers with a reading
    pair = apart(averaged, present, settled)
    if pair and firm_averaged and _within(firm_averaged, present, settled):
        pair = frozenset()
    steady_of = {b: steady.get(b, scores[b]) for b in present}
    ends = furthest(steady_of, settled)  # none where the takers' steady levels are within the target
    window = landing_ms(config)
    landing = set() if now is None else {b for b, at in state.predictive_moved_at.items() if now - at < window}
    acting = bool(landing)  # an imbalance was confirmed and is being acted on
    margin = None if acting else error  # at rest, the spread must be past the target by its levels' own error
    paired = not pair and bool(steady_of) and not (ends and furthest(steady_of, settled, margin))
    if steady_averaged is None:
        steady_averaged = {b: level for b, (level, _) in averaged.items()}
    # a broker whose own readings complete its count with this one is read where its samples sit (``as_read``), where
    # that is further out than its steady level
    shown = {
        b: level - steady_of[b]
        for b in present
        if as_read
        and (level := as_read.get(b)) is not None
        and abs(scores[b] - mean) >= settled
        and state.avg_hits_low.get(b, 0) + 1 >= count
        and abs(level - mean) > abs(steady_of[b] - mean)
    }
    at_average = {b: steady_averaged[b] + shown.get(b, 0.0) for b in present if b in steady_averaged}
    lasting = bool(furthest(at_average, settled))  # past the target at the bundles' average traffic too
    averaged_mean = sum(at_average.values()) / len(at_average) if at_average else mean
    for broker, value in scores.items():
        gap, steady_gap = abs(value - mean), abs(steady.get(broker, mean) - mean)
        if broker in pair:
            gap = max(gap, settled)
        predicted = state.predictions.get(broker)  # where last cycle's moves were to leave it
        balancing = broker in state.predictive_moved_at and low.get(broker, 0) >= count
        # a dip where its steady level is past the gap is a sample's error: held (a broker being balanced whose moves
        # are still landing keeps its whole count, just below)
        past = steady_gap >= settled or broker in ends
        again = broker in state.predictive_dipped  # the last reading was held (a dip)
        holdable = past or (not again and predicted is not None and abs(predicted[0] - mean) >= settled)
        if gap < settled and balancing and broker in landing:
            held.add(broker)
            continue  # being balanced, its landing not yet shown: a reading under the gap may be a sample's error
        if gap < settled and not holdable:
            high.pop(broker, None)
            low.pop(broker, None)
            continue
        if gap < settled:
            dipped.add(broker)
            if past and again:  # its steady level still past the gap: one hit off, not a fresh start
                high.pop(broker, None)
                low[broker] = low.get(broker, 0) - 1
                if low[broker] <= 0:
                    low.pop(broker)
            elif past:  # the hit its steady level says it is, but never the one that triggers it
                low[broker] = min(low.get(broker, 0) + 1, count - 1)
            continue
        low[broker] = one_more(low.get(broker, 0))
        if gap >= high_gap or steady_gap >= high_gap:
            high[broker] = one_more(high.get(broker, 0))
        elif high.get(broker) and not again:
            dipped.add(broker)  # under the high gap right after a reading past it: held, as a dip under the gap is
        else:
            high.pop(broker, None)
        if balancing and broker in held and not lasting:
            continue  # a burst's reading past the gap, not the landing's: at their average traffic, in target
        joined = (  # part of the imbalance being acted on, not a burst
            acting
            and lasting
            and broker not in state.predictive_moved_at
            and steady_gap >= settled
            and abs(steady_averaged.get(broker, averaged_mean) - averaged_mean) >= settled
        )
        if high.get(broker, 0) >= high_count or low[broker] >= count or (joined and low[broker] >= high_count):
            triggered.add(broker)
    if paired and shown:
        paired = not furthest({b: level + shown.get(b, 0.0) for b, level in steady_of.items()}, settled, margin)
    if paired:
        triggered -= takers - state.predictive_deferred
    for broker in list(high) + list(low):
        if broker not in scores:
            high.pop(broker, None)
            low.pop(broker, None)
    held &= {b for b in state.predictive_moved_at if low.get(b, 0) >= count}
    return high, low, triggered, frozenset(dipped), frozenset(held)


def furthest(
    levels: Mapping[str, float], settled: float, error: Callable[[str], float] | None = None
) -> frozenset[str]:
    """The coolest and hottest by their ``levels``, where those are twice the ``settled`` gap apart or more (and
    further by the two levels' ``error`` together, where given); else none."""
    if len(levels) < 2:
        return frozenset()
    coolest, hottest = min(levels, key=levels.__getitem__), max(levels, key=levels.__getitem__)
    margin = math.hypot(error(coolest), error(hottest)) if error else 0.0
    return frozenset({coolest, hottest}) if levels[hottest] - levels[coolest] >= 2 * settled + margin else frozenset()


def apart(averaged: Mapping[str, tuple[float, float]], takers: Set[str], settled: float) -> frozenset[str]:
    """The hottest and coolest of the ``takers`` by their levels at their average traffic (``averaged``: each a level
    and how far it may be off), if they are twice the ``settled`` gap apart even with each moved toward the other by
    as much as it may be off; else none. A spread their traffic's jitter could make is not one the target sees."""
    ends = _extremes(averaged, takers)
    if ends is None:
        return frozenset()
    ((low, low_off), coolest), ((high, high_off), hottest) = ends
    return frozenset({coolest, hottest}) if (high - high_off) - (low + low_off) >= 2 * settled else frozenset()


def _within(levels: Mapping[str, tuple[float, float]], takers: Set[str], settled: float) -> bool:
    """Whether the ``takers``' ``levels`` (each a level and how far it may be off) are less than twice the
    ``settled`` gap apart even with the hottest and coolest each moved away from the other by as much."""
    ends = _extremes(levels, takers)
    if ends is None:
        return False
    ((low, low_off), _), ((high, high_off), _) = ends
    return (high + high_off) - (low - low_off) < 2 * settled


def _extremes(
    levels: Mapping[str, tuple[float, float]], takers: Set[str]
) -> tuple[tuple[tuple[float, float], str], tuple[tuple[float, float], str]] | None:
    """The coolest and hottest of the ``takers`` by their ``levels``, each as (level, off) and name; None with
    fewer than two known."""
    known = sorted((levels[b], b) for b in takers if b in levels)
    return (known[0], known[-1]) if len(known) >= 2 else None


def empty(load: LoadData) -> set[str]:
    """Brokers that carry no traffic: a broker that joined, or came back from a restart (Pulsar assigns a broker
    that starts nothing but its heartbeat bundles)."""
    return {b for b, report in load.snapshot.brokers.items() if not carries_traffic(report)}


def changed_at(load: LoadData, state: StrategyState, expected: frozenset[str]) -> int:
    """When the membership or the reports last changed: a broker left, a new one joined, or a bundle appeared that
    no split of ours made (``expected``: the pieces of our own splits)."""
    members = frozenset(load.snapshot.brokers)
    reported = {bundle for r in load.snapshot.brokers.values() for bundle in r.lastStats}
    foreign_split = state.bundle_data and reported - set(state.bundle_data) - set(expected)
    new = {b for b in members - state.predictive_members if (b, "cpu") not in load.cost_models}
    joined = state.predictive_members and new  # a broker back from a restart has its history: it is not new
    if (state.predictive_members - members) or joined or foreign_split:
        return load.snapshot.taken_at
    return state.predictive_changed_at


def settling(load: LoadData, config: LoadBalancerConfig, since: int) -> bool:
    """Whether some broker has not reported since ``since``, a change less than ``settle_ms`` ago."""
    now = load.snapshot.taken_at
    return now - since < settle_ms(config) and not all(
        reported_after(load, r, since, config) for r in load.snapshot.brokers.values()
    )
