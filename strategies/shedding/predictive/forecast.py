"""What each broker's usage is, and what moving a bundle will do to it: per-broker cost models over the snapshot.

A broker's CPU is ``background + slope · traffic`` (traffic: msg rate in + out, throughput in, throughput out). The
slope is the per-core cost of traffic of the broker's kind of machine, the good fits of the brokers' cost models
(``spark_jobs/load_profile.py``) of that kind pooled into one (``costs.pooled``), over its own capacity (its CPU
limit, 100 × cores), scaled to what its own traffic costs it by its fit (``slopes``); the background is its fit's
intercept. A broker with no good fit — one that just joined has no history at all — is known from its capacity
and each kind of traffic at the dearest per-core price a fitted broker pays for it (a load report tells cores and
NIC, not what a core pays; a fill that overshoots cannot be undone within the grace period), its scale refined
from its samples as they arrive, the latest included (against what it used when it carried nothing: a broker joins
empty), the starting price weighed against them by how far the brokers' prices differ; its samples are its level.
Bandwidth is exact: a bundle's bytes over the NIC's limit. Traffic is what each bundle is expected to carry
(``LoadData.expected_traffic``), not one report's draws of its topics' jitter: a plan on the draws moves the bundle
that read high off the broker that read high, and the next report undoes it.

A CPU sample is noisy (a point or more on a busy broker: as large as a bundle), so plans are made on each
broker's **steady** level: its model's prediction, plus the median of its last ``RESIDUALS`` departures from the
model (of those it has, before it has three) when that median is beyond twice the broker's own samples' noise (one
noisy sample moves a median of three by nothing; something the model does not know — another process starting on
the machine, or a fit from a profile that no longer holds — moves it in two samples, or in one before there are
three); once such a change has lasted ``OWN_NOISE_FROM`` samples, by the mean of its departures since
(``departures_since``: a median of three samples is off by two thirds of one's noise, a mean of n by 1/√n of it,
and a plan landing the broker a point off the band leaves it there for another round of the hit counters). The
noise is measured from the departures themselves: each broker's from its last ``NOISE_WINDOW`` (machines jitter
differently, and a noisy one's jitter is no lasting change), those taken at a higher level scaled down to its present
one (``at_present_level``), the steps across its moves left out (``broker_noise``), pooled for the plan's margins:
thirty of them, as the median of nine successive differences reads a sample's noise at under half its size one time
in twenty (two ordinary samples then read as a lasting change), of twenty-nine at under two thirds. The trigger reads
each level less the bias its departures show (``Forecast.unbiased``): a fit a point off is within the noise of any one
sample, not of their mean; a bias beyond twice its standard error counts as far as it is past one (``beyond_error``),
one within that as far as the spread of the cluster's biases makes it likely (``shrunk``).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import math
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeGuard

import numpy as np

from pulsar_lb_operator.strategies import bundles as bundle_names
from pulsar_lb_operator.strategies import costs
from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.expected import MAD_TO_SIGMA
from pulsar_lb_operator.strategies.expected import Traffic as Traffic  # the package's modules read it here
from pulsar_lb_operator.strategies.loaddata import LoadData
from pulsar_lb_operator.strategies.profile import CostModel
from pulsar_lb_operator.strategies.snapshots import BrokerLoad
from pulsar_lb_operator.strategies.state import PendingMove, StrategyState

MIN_R2 = 0.8  # a cost model explaining less of its CPU than this is not trusted: the cluster's slope is used
MIN_SAMPLES = 10  # nor one fitted on fewer samples (the Spark job's windows hold hundreds)
RESIDUALS = 3  # the steady level's median: one outlier among three is ignored, a lasting change is seen at two
NOISE_WINDOW = 30  # departures kept per broker, its own noise measured over them (the module's docstring says why)
OWN_NOISE_FROM = 4  # departures before a broker's own noise is measured: three differences, a median ignores one
DOUBT_NOISES = 4  # a sample this many noises off its level is no sample's noise (one time in 16,000): ``in_doubt``
LEVEL_FLOOR = 1.0  # CPU points: a modelled level under one (an idle machine, a fit's negative intercept) counts as one
KBIT_PER_BYTE = 8 / 1000  # LocalBrokerData's bandwidth is in kbit/s
NO_TRAFFIC: Traffic = (0.0, 0.0, 0.0)


def pending_ttl_ms(config: LoadBalancerConfig) -> int:
    """A move no report shows after five shedding intervals is forgotten (reports come every minute or two)."""
    return 5 * config.loadBalancerSheddingIntervalMinutes * 60_000


@dataclass(frozen=True)
class Slope:
    """Usage points per unit of traffic on one broker: CPU from its model, bandwidth from the units."""

    cpu: Traffic
    bandwidth_in: float
    bandwidth_out: float
    borrowed: bool  # the broker's own fit was poor or missing: the cluster's per-core slope over its capacity
    scale: tuple[float, float] | None = None  # a fitted broker's ``fitted_scale``, kept from cycle to cycle
    learned: tuple[float, float, float, int] | None = None  # a borrowed one's ``learned_scale`` sums, this sample in

    def delta(self, traffic: Traffic) -> tuple[float, float, float]:
        cpu = sum(c * t for c, t in zip(self.cpu, traffic))
        return cpu, self.bandwidth_in * traffic[1], self.bandwidth_out * traffic[2]


def good(model: CostModel | None) -> TypeGuard[CostModel]:
    return model is not None and model.r2 >= MIN_R2 and model.samples >= MIN_SAMPLES


def slopes(load: LoadData, state: StrategyState) -> dict[str, Slope] | None:
    """Per broker; None when no broker has a usable CPU model (the shedder falls back).

    A broker's fit is exact for traffic mixed as its own is (it was fitted on it), but a tenant's traffic moves its
    message rate and bytes together, so the fit cannot always tell what a message costs from what a byte does, and
    may say a bundle of another mix costs less than nothing. So each broker's slope is the per-core cost of traffic
    of its kind (``_kind``: the good fits of alike brokers pooled into one, whose different tenants' shares tell
    the costs apart, none below zero, each broker at its own speed where their samples tell one — ``costs.pooled``;
    the whole cluster's where its kind's pool says traffic costs nothing) over its own CPU limit, scaled so that its
    own traffic costs what its fit says (``fitted_scale``: a machine slower per core pays more); a broker with no good
    fit starts from each kind of traffic at the dearest per-core price a fitted broker pays for it (``_own_costs``,
    ``_envelope``) and is scaled by what its samples say (``learned_scale``, the start weighed against them by
    ``_prior_weight``), 1 until they do."""
    brokers = load.snapshot.brokers
    models = {b: load.cost_models.get((b, "cpu")) for b in brokers}
    fitted = {b: m for b, m in models.items() if good(m) and brokers[b].cpu.limit > 0}
    if not fitted:
        return None
    kinds: dict[tuple[float, float], dict[str, CostModel]] = {}
    for b, m in fitted.items():
        kinds.setdefault(_kind(brokers[b]), {})[b] = m
    per_kind = {kind: _per_core(models, brokers) for kind, models in kinds.items()}
    # one kind: the whole cluster's pool is that kind's (the same fits, solved once)
    pooled = next(iter(per_kind.values())) if len(per_kind) == 1 else _per_core(fitted, brokers)
    if pooled is None:
        return None
    mix = tuple(np.sum([r.traffic for r in brokers.values()], axis=0))  # the cluster's traffic: its mix
    own = _own_costs(per_kind, kinds, brokers)
    every = [c for costs_ in own.values() for c in costs_]
    prices = [float(c @ mix) for c in every]  # what each fitted broker pays per core
    noise = _sample_noise(state) if len(fitted) < len(brokers) else None  # only a broker with no fit learns
    start = _envelope(every) if every else pooled  # a broker with no fit of its own
    prior = _prior_weight(prices, float(start @ mix), noise)
    out = {}
    for b, report in brokers.items():
        kept, learned = None, None
        if b in fitted:
            cost = per_kind.get(_kind(report))
            per_core = (pooled if cost is None else cost) / (report.cpu.limit or 1.0)
            carried = report.traffic if any(report.traffic) else mix  # an empty broker: the cluster's mix
            kept = fitted_scale(fitted[b], per_core, state.predictive_scales.get(b), carried)
            scale = kept[0]
        else:
            per_core = start / (report.cpu.limit or 1.0)
            learned = _learned_now(state.predictive_learned.get(b), report, per_core)
            scale = learned_scale(learned, prior)
        nic_in = report.bandwidthIn.limit or float("inf")
        nic_out = report.bandwidthOut.limit or float("inf")
        cpu: Traffic = tuple(float(v) for v in per_core * scale)  # type: ignore[assignment]
        out[b] = Slope(cpu, KBIT_PER_BYTE * 100 / nic_in, KBIT_PER_BYTE * 100 / nic_out, b not in fitted, kept, learned)
    return out


def _envelope(costs_: Sequence[np.ndarray]) -> np.ndarray:
    """The per-core cost a broker with no fit of its own starts from: each kind of traffic (messages, bytes in, bytes
    out) at the dearest price any fitted broker pays for it. A load report tells a machine's cores and NIC, not what
    a core pays: a newcomer with one kind's cores may have another's CPU (a bigger machine of the dearer kind), and
    kinds differ in what they pay for a message against a byte while a bundle's mix is its tenant's, not the
    cluster's. Priced as the cheaper, it would be overfilled. The two ways to miss are not alike: a fill that falls
    short is topped up next cycle from the givers' bundles, but one that overshoots stays, as no shedder may move
    the bundles it received again within loadBalancerSheddingGracePeriodMinutes (half an hour by default)."""
    dearest: np.ndarray = np.max(np.stack(costs_), axis=0)
    return dearest


def _own_costs(
    per_kind: Mapping[tuple[float, float], np.ndarray | None],
    kinds: Mapping[tuple[float, float], Mapping[str, CostModel]],
    brokers: Mapping[str, BrokerLoad],
) -> dict[tuple[float, float], list[np.ndarray]]:
    """Per machine kind, the per-core cost of each of its fitted brokers that carry traffic: the kind's pooled cost
    times the broker's own ``fitted_scale`` (a fit read off the mix it was made on says little about another). Alike
    machines may still pay differently per message — one instance type across two hardware generations, or with
    other JVM flags — and the pooled cost is their average: a newcomer priced at it that pays the most is overfilled,
    which, for the reason ``_envelope`` gives, cannot be undone within the grace period."""
    own = {}
    for kind, cost in per_kind.items():
        if cost is None:
            continue
        scales = [
            fitted_scale(model, cost / brokers[b].cpu.limit, None, brokers[b].traffic)[0]
            for b, model in kinds[kind].items()
            if any(brokers[b].traffic)
        ]
        own[kind] = [cost * scale for scale in scales or [1.0]]
    return own


def _prior_weight(prices: Sequence[float], start: float, noise: float | None) -> float | None:
    """How much the price a new broker starts from (``start``, per core for the cluster's mix) counts against its
    samples in ``learned_scale``, in the units of its sums (a predicted cost squared): a sample's error (its
    ``noise``, and that of the background it is read against) over how far its price may be from the start — as far
    as any fitted broker's (``prices``) is. A load report tells a machine's cores and NIC, not what a core pays: a
    newcomer with one kind's cores may have another's CPU. Where the brokers' prices differ by more than a sample's
    noise tells, its first sample says more than the start, and its next fill is planned on its own price; where
    they are alike, the start counts as one sample. None (one sample) where the noise or the prices' spread is not
    known."""
    if noise is None or not prices or not start > 0:
        return None
    spread = max(abs(max(prices) / start - 1), abs(min(prices) / start - 1))
    if not spread > 0 or not math.isfinite(spread):
        return None
    return 2 * noise * noise / (spread * spread)


def _sample_noise(state: StrategyState) -> float | None:
    """A CPU sample's noise in points, from the successive differences of every broker's departures from its model
    (``_step_noise``); None before there are ten."""
    steps = [step for residuals in state.predictive_residuals.values() for step in _steps(residuals)]
    return _step_noise(steps) if len(steps) >= 10 else None


def _steps(departures: Sequence[float]) -> list[float]:
    """The sizes of the differences between successive departures."""
    return [abs(later - earlier) for earlier, later in itertools.pairwise(departures)]


def _step_noise(steps: Sequence[float]) -> float:
    """A sample's noise (as a standard deviation) from the sizes of successive departures' differences (``_steps``):
    a difference of two samples has √2 times one's noise, and a lasting change is one large difference, which their
    median ignores."""
    return MAD_TO_SIGMA * statistics.median(steps) / math.sqrt(2)


def _kind(report: BrokerLoad) -> tuple[float, float]:
    """Brokers alike: the same CPU limit and NIC (the same machine type, as far as a load report tells)."""
    return report.cpu.limit, report.bandwidthIn.limit


def _per_core(fitted: Mapping[str, CostModel], brokers: Mapping[str, BrokerLoad]) -> np.ndarray | None:
    """The fits pooled into one cost per core (core-percent per unit of traffic, none below zero: ``costs.pooled``);
    from a profile that keeps no sums to pool, the fits' slopes × their CPU limit averaged by samples. None when
    there is no fit or it says traffic costs nothing."""
    weight = sum(m.samples for m in fitted.values())
    if not weight:
        return None
    pooled = costs.pooled((m, brokers[b].cpu.limit) for b, m in fitted.items())
    if pooled is None:
        pooled = np.maximum(
            [
                sum(getattr(m, f) * brokers[b].cpu.limit * m.samples for b, m in fitted.items()) / weight
                for f in ("per_msg_rate", "per_byte_in", "per_byte_out")
            ],
            0.0,
        )
    return pooled if pooled.any() else None


def fitted_scale(
    model: CostModel, per_core: np.ndarray, kept: tuple[float, float] | None, traffic: Traffic
) -> tuple[float, float]:
    """How much more the broker pays for traffic than the cluster's per-core cost says, by its own fit, at the
    traffic it carried when the shedder first saw it with this fit (the mix the fit was made on: moves change the
    mix since, and the fit is not to be trusted off it); (scale, the fit's intercept it was computed with)."""
    if kept is not None and kept[1] == model.intercept:
        return kept
    own = model.per_msg_rate * traffic[0] + model.per_byte_in * traffic[1] + model.per_byte_out * traffic[2]
    cluster = float(per_core @ traffic)
    return (own / cluster if own > 0 and cluster > 0 else 1.0), model.intercept


def learned_scale(learned: tuple[float, float, float, int] | None, weight: float | None = None) -> float:
    """How much more a borrowed slope's broker pays for its traffic than the price it started from says: least
    squares of what its traffic cost (samples less its background) on what the unrefined slope predicted, the
    unrefined slope counting as ``weight`` (``_prior_weight``), never more than one sample of its own. 1 until a
    sample with traffic arrives."""
    if learned is None or not learned[3] or learned[2] <= 0:
        return 1.0
    _, products, squares, count = learned
    prior = squares / count  # one typical sample's weight, saying "as the start"
    if weight is not None and math.isfinite(weight):
        prior = min(prior, weight)
    scale = (products + prior) / (squares + prior)
    return (max(scale, 0.0) or 1.0) if math.isfinite(scale) else 1.0


def background(load: LoadData, state: StrategyState, broker: str, slope: Slope) -> float | None:
    """CPU points the broker uses with no traffic: its model's intercept, or what it used when it carried nothing;
    None when neither is known (its samples are then its steady level)."""
    model = load.cost_models.get((broker, "cpu"))
    if good(model) and not slope.borrowed:
        return model.intercept
    learned = state.predictive_learned.get(broker)
    return None if learned is None else learned[0]


class Forecast:
    """Per-resource usage points per broker at its steady level, moved as planned; usage is AvgShedder's weighted
    max. ``sampled``: each broker's usage as its report says (the hit counters' score)."""

    def __init__(
        self, load: LoadData, config: LoadBalancerConfig, slope: Mapping[str, Slope], state: StrategyState
    ) -> None:
        w = config.weights
        self.weights = (w.cpu, w.bandwidth_in, w.bandwidth_out, w.direct_memory)
        self.slope = slope
        brokers = load.snapshot.brokers
        self.direct = {b: r.directMemory.percent_usage() for b, r in brokers.items()}
        sampled_points = {
            b: [r.cpu.percent_usage(), r.bandwidthIn.percent_usage(), r.bandwidthOut.percent_usage()]
            for b, r in brokers.items()
        }
        self.sampled = {b: self.usage(b, p) for b, p in sampled_points.items()}
        self.traffic: dict[str, Traffic] = {b: r.traffic for b, r in brokers.items()}  # as planned: moves included
        self.residuals: dict[str, tuple[float, ...]] = {}
        self.residual_levels: dict[str, tuple[float, ...]] = {}  # the modelled CPU level each residual was taken at
        self.residual_moves: dict[str, tuple[int, ...]] = {}  # the ages of those taken while a move was showing
        self.learned: dict[str, tuple[float, float, float, int]] = {}
        # fitted brokers: ``fitted_scale`` as first computed; a broker away (restarting) keeps its own while the profile
        # keeps its fit: it comes back empty, with no traffic of its own to read the fit at
        self.scales: dict[str, tuple[float, float]] = {
            b: scale
            for b, scale in state.predictive_scales.items()
            if b not in brokers and (b, "cpu") in load.cost_models
        }
        self.points: dict[str, list[float]] = {}
        self._jitter: dict[str, Traffic] = {}  # per broker: its expected traffic less its report's
        self.drawn: dict[str, float] = {}  # per broker: what its report's draws of the jitter add to its sample
        models: dict[str, float] = {}
        for b, report in brokers.items():
            cpu, *rest = sampled_points[b]
            self.points[b] = [cpu, *rest]  # as sampled, until a model says better
            base = background(load, state, b, slope[b])
            if base is None and not carries_traffic(report):
                base = cpu  # carries nothing: what it uses is its background
            if base is None:
                continue
            if slope[b].borrowed:  # its samples are its level; they refine its slope
                self.learned[b] = slope[b].learned or (base, 0.0, 0.0, 0)
                continue
            models[b] = base + slope[b].delta(report.traffic)[0]
            if (scale := slope[b].scale) is not None:
                self.scales[b] = scale
            kept = state.predictive_residuals.get(b, ())[-(NOISE_WINDOW - 1) :]
            # a residual with no level on record (a state written before levels were kept) counts as taken at this one
            levels = state.predictive_residual_levels.get(b, ())[-len(kept) :] if kept else ()
            self.residuals[b] = (*kept, cpu - models[b])
            self.residual_levels[b] = (*(models[b],) * (len(kept) - len(levels)), *levels, models[b])
            aged = (age + 1 for age in state.predictive_residual_moves.get(b, ()) if age + 1 < len(self.residuals[b]))
            self.residual_moves[b] = (*((0,) if _showing_a_move(load, state, b, config) else ()), *aged)
        self.sigma = self.noise()
        self._offset: dict[str, float] = {}
        self._spread: float | None = None  # ``_bias_spread``, once measured
        self._since: dict[str, tuple[float, float] | None] = {}  # ``departures_since``, once measured per broker
        self._level_error: dict[str, float] = {}  # ``level_error``, once measured per broker
        for b, model in models.items():
            recent = self.residuals[b][-RESIDUALS:]
            offset = statistics.median(recent)
            # a lasting departure beyond twice the broker's noise (a sample's noise does that one time in twenty)
            # is something the model does not know, such as another process on the machine: it counts; so does a
            # first sample or two that far off (a stale profile's fit tens of points off is not to be acted on)
            self._offset[b] = self._lasting(b, offset) if abs(offset) > 2 * self.broker_noise(b) else 0.0
            self.points[b][0] = max(model + self._offset[b], 0.0)
        for b in self.points:  # planned at the traffic its bundles are expected to carry, not one report's draws
            if any(jitter := _jitter(load, b)):
                self._jitter[b] = jitter
                self.shift(b, jitter, +1)
                self.drawn[b] = self.sampled[b] - self.usage(b, self.shifted(b, jitter, +1, sampled_points[b]))

    def missed(self, errors: Mapping[str, float]) -> set[str]:
        """The brokers whose last prediction missed (``errors``: ``check_predictions``) by more than twice the noise
        of their own samples (``broker_noise``), and never less than twice the pooled noise: a machine that jitters
        more than the pool misses by more, and judged against the pool one of its ordinary samples would read as a
        model that no longer knows its traffic (``trust_samples`` would then set its level from that one sample)."""
        return {b for b, e in errors.items() if abs(e) > 2 * self.sample_noise(b)}

    def trust_samples(self, brokers: set[str]) -> None:
        """A broker whose last prediction missed (``missed``): its model may not know its traffic as it now is (the
        fit was made on another mix), so this cycle its sample sets its level. The departures on record stay as read:
        one sample is no lasting change, and the next reading decides as it does for any departure (the median of the
        last ``RESIDUALS``): one back at the model says the miss was the sample's noise, one alike says the model is
        off, and the level keeps counting it. Counted as lasting from the one sample, a miss of a sample's noise and a
        model's few points set a level that far off for cycles, and a plan moved bundles off a broker whose readings
        since put it inside the band."""
        for b in brokers & set(self.residuals):
            latest = self.residuals[b][-1]
            self.points[b][0] = max(self.points[b][0] - self._offset[b] + latest, 0.0)
            self._offset[b] = latest

    def in_doubt(self, beyond: float) -> set[str]:
        """The brokers whose latest CPU sample is further than ``beyond`` from the level they are planned at, and
        further than ``DOUBT_NOISES`` times the noise of their samples (their own, never less than the pool's: a
        machine at several times its CPU limit jitters by points): one sample that puts the broker elsewhere than
        its model and its recent samples do is a step the model does not know yet (another process on the machine
        starting or ending) or a spike, and only the next sample can say which (a median of ``RESIDUALS`` follows a
        step at its second). A broker whose sample sets its level this cycle (``trust_samples``) is not in doubt."""
        off = {b: abs(departures[-1] - self._offset[b]) for b, departures in self.residuals.items()}
        return {  # the noise measured only where the sample is past ``beyond``: rarely, and it costs a median
            b for b, by in off.items() if by > beyond and by > DOUBT_NOISES * self.sample_noise(b)
        }

    def _lasting(self, broker: str, offset: float) -> float:
        """The departure a lasting change shows (``offset``: the median of the last three): the mean of the
        departures since it once there are enough of them (``departures_since``), the median until then."""
        since = self.departures_since(broker)
        return offset if since is None else since[0]

    def noise(self) -> float:
        """The CPU samples' noise in points: the spread of each broker's last ``RESIDUALS`` departures from the model
        around their own median, pooled (median absolute deviation, as a standard deviation); before the brokers
        have two samples, the spread of this cycle's departures across brokers; 0 with fewer than three brokers to
        tell. A third of the deviations are the medians' own, 0, so it reads about half of one sample's noise (where
        ``broker_noise``, from successive differences, reads a sample's whole noise): nearer a steady level's error
        than a sample's, and what the plans' margins are made with. Read at a sample's full size, the band narrows
        and plans make more moves than the goal of 1.25 times the lower bound allows (docs/strategy-log.md)."""
        recent = [rs[-RESIDUALS:] for rs in self.residuals.values()]
        deviations = [abs(r - statistics.median(rs)) for rs in recent if len(rs) > 1 for r in rs]
        if not deviations:
            latest = [rs[-1] for rs in self.residuals.values()]
            if len(latest) < 3:
                return 0.0
            deviations = [abs(r - statistics.median(latest)) for r in latest]
        return MAD_TO_SIGMA * statistics.median(deviations)

    def sample_noise(self, broker: str) -> float:
        """What one sample of the broker is judged against (``missed``, ``in_doubt``): its own noise, never less
        than the pool's."""
        return max(self.sigma, self.broker_noise(broker))

    def broker_noise(self, broker: str) -> float:
        """The broker's own CPU samples' noise in points: machines differ (a busier or older one jitters more), and
        the pooled noise would read a noisy broker's jitter as a lasting change. From the differences of its
        successive departures from its model (a lasting change is one large difference, which their median
        ignores), once it has three; the pooled noise until then. A difference to a departure taken while a move of
        the broker's was showing (``residual_moves``) is left out: it is its model's miss on the traffic that moved,
        and a broker that gave twice in its first cycles would read those two misses as its noise, and a model points
        off after them as within it."""
        recent = self.at_present_level(broker)
        moved = {len(recent) - 1 - age for age in self.residual_moves.get(broker, ())}
        steps = [step for at, step in enumerate(_steps(recent), start=1) if at not in moved]
        if len(steps) < OWN_NOISE_FROM - 1:
            return self.sigma
        return _step_noise(steps)

    def at_present_level(self, broker: str) -> tuple[float, ...]:
        """The broker's residuals, each taken at a level above its present one scaled down to it (× present ÷ then).
        A sample's noise grows with the work the broker does in it: a broker that gave two thirds of its traffic away
        would read its old, larger jitter as its noise, and a model a few points off after the move as within it (the
        miss no ``missed`` sees, the bias no ``departures_since`` counts). Never scaled up: an idle machine's jitter is
        its JVM's and its system's, which traffic does not multiply."""
        recent, levels = self.residuals.get(broker, ()), self.residual_levels.get(broker, ())
        if not levels:
            return recent
        present = max(levels[-1], LEVEL_FLOOR)
        return tuple(r * min(present / max(level, LEVEL_FLOOR), 1.0) for r, level in zip(recent, levels))

    def unbiased(self, broker: str) -> float:
        """The broker's usage at its steady level, less its model's bias where its departures show one (``bias``):
        what the trigger reads (``debounce.hits``)."""
        return self._biased(broker, self.bias(broker))

    def as_read(self, broker: str) -> float:
        """The broker's usage at its steady level plus the mean of its departures since the last lasting change as far
        as it is past its standard error (``departures_since``, ``beyond_error``; not shrunk as ``bias`` shrinks it):
        where its samples sit, as far as they tell."""
        shown = self._uncounted(broker)
        return self.unbiased(broker) if shown is None else self._biased(broker, beyond_error(*shown))

    def firmly_unbiased(self, broker: str, least: float) -> tuple[float, float]:
        """``unbiased`` with only a bias its departures show beyond doubt (their mean beyond twice its standard error,
        as ``bias`` counts it whole) and of ``least`` points or more, and how far that may be off (twice the standard
        error; 0 without one)."""
        shown = self._uncounted(broker)
        if shown is None or abs(shown[0]) <= max(2 * shown[1], least):
            return self.usage(broker), 0.0
        return self._biased(broker, shown[0]), 2 * shown[1]

    def _biased(self, broker: str, bias: float) -> float:
        """The broker's usage with ``bias`` CPU points added to its model's."""
        if not bias:
            return self.usage(broker)
        cpu, *rest = self.points[broker]
        return self.usage(broker, [max(cpu + bias, 0.0), *rest])

    def bias(self, broker: str) -> float:
        """The CPU points the broker's model is off where its departures show it: a fit a point or two off a broker's
        true level departs by less than twice its noise, which the steady level leaves alone, and the trigger would
        read a spread just over the target as under it for as long as the fit lasts. The mean of its departures since
        the last lasting change (``departures_since``), where no lasting change is counted already: where it is beyond
        twice its standard error, as far as it is past one (``beyond_error``); within that, as far as the spread of
        the cluster's biases makes a bias of that size likely (``shrunk``). Plans are not made on it but for brokers
        the trigger flagged (``count_bias``): after a move the departures kept are of the traffic the broker no longer
        carries."""
        shown = self._uncounted(broker)
        if shown is None:
            return 0.0
        mean, error = shown
        return beyond_error(mean, error) if abs(mean) > 2 * error else shrunk(mean, error, self._bias_spread())

    def _uncounted(self, broker: str) -> tuple[float, float] | None:
        """``departures_since``, where no lasting change is counted in the broker's level already (its offset)."""
        return None if self._offset.get(broker) else self.departures_since(broker)

    def departures_since(self, broker: str) -> tuple[float, float] | None:
        """The mean of the broker's departures since the last lasting change and its standard error (noise ÷
        √count); None before there are as many as the broker's own noise needs. The run goes back from the newest
        while each departure is within three times the broker's noise of the median of those in the run (of the last
        three, until it has three): a median of three is off by two thirds of a sample's noise, and measured from it
        one ordinary sample ended the run, leaving a few that read high by chance to stand as a bias. Measured once per
        broker: the departures and the noise are this snapshot's (the trigger reads it for ``bias``, ``as_read`` and
        ``firmly_unbiased`` alike)."""
        if broker not in self._since:
            self._since[broker] = self._departures_since(broker)
        return self._since[broker]

    def _departures_since(self, broker: str) -> tuple[float, float] | None:
        kept = self.residuals.get(broker, ())
        if len(kept) < OWN_NOISE_FROM:
            return None
        own, centre = self.broker_noise(broker), statistics.median(kept[-RESIDUALS:])
        since: list[float] = []  # sorted
        for departure in reversed(kept):  # each against the median of those since (the newest three's at first)
            if abs(departure - centre) > 3 * own:
                break
            bisect.insort(since, departure)
            if len(since) >= RESIDUALS:
                middle = len(since) // 2
                centre = since[middle] if len(since) % 2 else (since[middle - 1] + since[middle]) / 2
        if len(since) < OWN_NOISE_FROM:
            return None
        return sum(since) / len(since), own / math.sqrt(len(since))

    def _bias_spread(self) -> float:
        """The variance of the models' biases across the brokers, less what their means' errors add (method of
        moments): how far off a fit of this cluster's is, as its brokers show it (a lasting change counted in a
        steady level included: the model does not know it either); 0 with fewer than three brokers to tell."""
        if self._spread is None:
            shown = [s for b in self.residuals if (s := self.departures_since(b))]
            moments = sum(m * m - e * e for m, e in shown) / len(shown) if len(shown) >= 3 else 0.0
            self._spread = moments if moments > 0 and math.isfinite(moments) else 0.0  # none past the largest float
        return self._spread

    def count_bias(self, brokers: set[str]) -> None:
        """Plan ``brokers`` at the level the trigger read them at: their samples put them past the gap, where their
        models, by the bias their departures show, would have the plan leave them as they are."""
        for b in brokers:
            if bias := self.bias(b):
                self.points[b][0] = max(self.points[b][0] + bias, 0.0)
                self._offset[b] = bias

    def level_error(self, load: LoadData, broker: str) -> float:
        """How far the broker's steady level may be off for its bundles' expected traffic (``Expected.error``: an
        average of a few draws, and its namespace's movement read from one report's draws, are each off by a part of
        a draw); 0 where no bundle's traffic jitters."""
        if broker not in self._level_error:
            bundles = list(load.snapshot.brokers[broker].lastStats) if load.expected.jitter else []  # none: no error
            moving = carried(load, broker, bundles)
            left = self.departures(broker, np.array([traffic for _, traffic in moving]).reshape(-1, 3))
            costs = zip([bundle for bundle, _ in moving], (self.usage(broker) - left).tolist())
            self._level_error[broker] = load.expected.error(costs)
        return self._level_error[broker]

    def averaged(self, load: LoadData, broker: str) -> tuple[float, float]:
        """The broker's usage at its bundles' short-term average traffic (Pulsar's ten-sample TimeAverageMessageData),
        and how far its last report's traffic puts it from that. A jittering topic's average is near its mean rate,
        where its last report's rate is a draw; but an average of ten draws is still off by a part of one, so the
        second figure says how far the first may be off. Through the model alone: the bias ``unbiased`` reads comes
        and goes as samples enter and leave the run it is measured on."""
        report = load.snapshot.brokers[broker]
        short = [load.bundle_or_default(bundle).short for bundle in report.lastStats]
        jitter = self._jitter.get(broker, NO_TRAFFIC)  # the broker's points are at its expected traffic
        rate, bytes_in, bytes_out = (t + j for t, j in zip(report.traffic, jitter))
        delta = (
            sum(s.msgRateIn + s.msgRateOut for s in short) - rate,
            sum(s.msgThroughputIn for s in short) - bytes_in,
            sum(s.msgThroughputOut for s in short) - bytes_out,
        )
        level = self.usage_with(broker, delta, +1)
        return level, abs(level - self.usage_with(broker, jitter, -1))

    def usage(self, broker: str, points: Sequence[float] | None = None) -> float:
        p = self.points[broker] if points is None else points
        return max(
            p[0] * self.weights[0],
            p[1] * self.weights[1],
            p[2] * self.weights[2],
            self.direct[broker] * self.weights[3],
        )

    def usage_with(self, broker: str, traffic: Traffic, sign: float) -> float:
        """The broker's usage with ``traffic`` added (sign +1: it arrives) or taken away (−1: it leaves)."""
        return self.usage(broker, self.shifted(broker, traffic, sign))

    def shifted(self, broker: str, traffic: Traffic, sign: float, points: Sequence[float] | None = None) -> list[float]:
        """The broker's points (or ``points``) with ``traffic`` added (sign +1) or taken away (−1)."""
        delta = self.slope[broker].delta(traffic)
        return [max(v + sign * d, 0.0) for v, d in zip(self.points[broker] if points is None else points, delta)]

    def shift(self, broker: str, traffic: Traffic, sign: float) -> None:
        """Add (sign +1) or take away (−1) ``traffic`` on the broker: its points and the traffic it carries."""
        self.points[broker] = self.shifted(broker, traffic, sign)
        rate, bytes_in, bytes_out = self.traffic[broker]
        self.traffic[broker] = (
            max(rate + sign * traffic[0], 0.0),
            max(bytes_in + sign * traffic[1], 0.0),
            max(bytes_out + sign * traffic[2], 0.0),
        )

    def linear(self, broker: str) -> tuple[np.ndarray, np.ndarray, float]:
        """The broker's weighted points per resource as ``base + coefficients @ traffic`` (``base``: with no
        traffic), and the weighted direct memory its usage is never below."""
        s = self.slope[broker]
        weights = np.array(self.weights[:3])
        with np.errstate(over="ignore", invalid="ignore"):
            coefficients = np.array([s.cpu, (0.0, s.bandwidth_in, 0.0), (0.0, 0.0, s.bandwidth_out)]) * weights[:, None]
            base = np.array(self.points[broker]) * weights - coefficients @ np.array(self.traffic[broker])
        return base, coefficients, self.direct[broker] * self.weights[3]

    def background(self, broker: str) -> float:
        """The broker's CPU points with no traffic, at its steady level."""
        return self.points[broker][0] - self.slope[broker].delta(self.traffic[broker])[0]

    def arrivals(self, brokers: list[str], traffic: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each broker's usage now (a row), and after each of the bundles (rows of ``traffic``) arrives on it
        (a matrix, bundles × brokers): ``usage_with(b, t, +1)`` for every pair, in the same operations."""
        points = np.array([self.points[b] for b in brokers]).T  # cpu, bandwidth in, bandwidth out: one row each
        cpu = np.array([self.slope[b].cpu for b in brokers]).T
        bandwidth_in = np.array([self.slope[b].bandwidth_in for b in brokers])
        bandwidth_out = np.array([self.slope[b].bandwidth_out for b in brokers])
        direct = np.array([self.direct[b] for b in brokers]) * self.weights[3]
        rate, thr_in, thr_out = (traffic[:, i, np.newaxis] for i in range(3))
        with np.errstate(over="ignore", invalid="ignore"):
            cpu_delta = cpu[0] * rate + cpu[1] * thr_in + cpu[2] * thr_out
            after = (
                np.maximum(points[0] + cpu_delta, 0.0) * self.weights[0],
                np.maximum(points[1] + bandwidth_in * thr_in, 0.0) * self.weights[1],
                np.maximum(points[2] + bandwidth_out * thr_out, 0.0) * self.weights[2],
            )
            now = np.maximum(
                np.maximum(
                    np.maximum(points[0] * self.weights[0], points[1] * self.weights[1]), points[2] * self.weights[2]
                ),
                direct,
            )
        return now, np.maximum(np.maximum(np.maximum(after[0], after[1]), after[2]), direct)

    def departures(self, broker: str, traffic: np.ndarray) -> np.ndarray:
        """The broker's usage after each of the bundles (rows of ``traffic``) leaves it: ``usage_with(broker, t,
        -1)`` for every row, in array operations."""
        s, p, w = self.slope[broker], self.points[broker], self.weights
        with np.errstate(over="ignore", invalid="ignore"):
            cpu = np.maximum(p[0] - traffic @ np.array(s.cpu), 0.0) * w[0]
            bandwidth_in = np.maximum(p[1] - traffic[:, 1] * s.bandwidth_in, 0.0) * w[1]
            bandwidth_out = np.maximum(p[2] - traffic[:, 2] * s.bandwidth_out, 0.0) * w[2]
        usage: np.ndarray = np.maximum(
            np.maximum(np.maximum(cpu, bandwidth_in), bandwidth_out), self.direct[broker] * w[3]
        )
        return usage

    def move(self, source: str, destination: str, traffic: Traffic) -> None:
        self.shift(source, traffic, -1)
        self.shift(destination, traffic, +1)

    @contextlib.contextmanager
    def ahead(self, offsets: Mapping[str, float]) -> Iterator[None]:
        """Within, each broker's CPU level is ``offsets`` further on (``drift``: where its traffic takes it); moves
        made within stay made on leaving, at the levels as they are."""
        for b, by in offsets.items():
            self.points[b][0] += by
        try:
            yield
        finally:
            for b, by in offsets.items():
                self.points[b][0] -= by

    @contextlib.contextmanager
    def trying(self) -> Iterator[None]:
        """Moves made within (``move``, ``shift``) are undone on leaving: a search tries them and keeps none."""
        points, traffic = dict(self.points), dict(self.traffic)
        try:
            yield
        finally:
            self.points.clear()
            self.points.update(points)
            self.traffic.clear()
            self.traffic.update(traffic)


def beyond_error(mean: float, error: float) -> float:
    """A mean of departures counted as far as it is past its standard error: the trigger reads brokers whose samples
    were past the gap, and the two furthest apart of a dozen; counted whole, the mean of a few samples adds their
    chance to the very brokers picked for it."""
    return math.copysign(max(abs(mean) - error, 0.0), mean)


def shrunk(mean: float, error: float, spread: float) -> float:
    """A bias within twice its standard error, counted as far as it is likely (the posterior mean under a normal prior
    of the cluster's ``spread`` of biases: empirical Bayes): where the fits are all about right, a mean a noisy broker's
    samples put a point off is mostly their noise and counts for little; where they are off by points, it counts for
    nearly all; with no spread (none measured), not at all."""
    counted = mean * spread / (spread + error * error) if spread > 0 else 0.0
    return counted if math.isfinite(counted) else 0.0  # a jitter past the largest float: nothing to tell


def traffic_bundles(report: BrokerLoad) -> Iterator[str]:
    """The broker's bundles beyond its heartbeat ones that carry traffic."""
    return (b for b, s in report.lastStats.items() if not bundle_names.is_system_bundle(b) and s.traffic != NO_TRAFFIC)


def carries_traffic(report: BrokerLoad) -> bool:
    """Whether the broker carries any traffic beyond its heartbeat bundles (one that just joined or came back from a
    restart carries none: Pulsar assigns it nothing else)."""
    return next(traffic_bundles(report), None) is not None


def _learned_now(
    learned: tuple[float, float, float, int] | None, report: BrokerLoad, per_core: np.ndarray
) -> tuple[float, float, float, int] | None:
    """A borrowed slope's least-squares sums with this report's sample in them (``learned_scale``): what the
    traffic cost (the sample less the background first seen) against what the cluster's per-core slope over the
    broker's capacity (``per_core``) predicted. This cycle's plan is made on them: a broker filled last cycle tells
    what its bundles cost in its first report since, and the next fill is planned on it. None until the background
    is known (the broker's first report, empty)."""
    if learned is None:
        return None
    background, products, squares, count = learned
    predicted = float(per_core @ np.array(report.traffic))
    if predicted > 0 and math.isfinite(predicted):
        cost = report.cpu.percent_usage() - background
        products, squares, count = products + cost * predicted, squares + predicted * predicted, count + 1
    return background, products, squares, count


def _jitter(load: LoadData, broker: str) -> Traffic:
    """The broker's bundles' expected traffic less what its report says they carry (``LoadData.expected_traffic``)."""
    expected, stats = load.expected_traffic, load.snapshot.brokers[broker].lastStats
    if not expected:  # no jitter to read past: every report stands
        return NO_TRAFFIC
    rate = bytes_in = bytes_out = 0.0
    for bundle, reported in stats.items():
        if bundle not in expected:
            continue
        (r, i, o), (r0, i0, o0) = expected[bundle], reported.traffic
        rate, bytes_in, bytes_out = rate + r - r0, bytes_in + i - i0, bytes_out + o - o0
    return rate, bytes_in, bytes_out


def bundle_traffic(load: LoadData, broker: str, bundle: str, halves: Mapping[str, Traffic] | None = None) -> Traffic:
    """What moving the bundle moves: a piece of this cycle's split as estimated, else its expected traffic (its
    report's where that is no jitter draw: ``LoadData.expected_traffic``)."""
    if halves and bundle in halves:
        return halves[bundle]
    stats = load.snapshot.brokers[broker].lastStats.get(bundle)
    if stats is None:
        return NO_TRAFFIC
    return load.expected_traffic.get(bundle, stats.traffic)


def carried(
    load: LoadData, broker: str, bundles: Sequence[str], halves: Mapping[str, Traffic] | None = None
) -> list[tuple[str, Traffic]]:
    """Each of ``bundles`` the broker carries traffic for, with it (``bundle_traffic``), in the order given: a
    bundle with none moves nothing, and a plan has no use for it."""
    moving = [(bundle, bundle_traffic(load, broker, bundle, halves)) for bundle in bundles]
    return [(bundle, traffic) for bundle, traffic in moving if traffic != NO_TRAFFIC]


def reported_on(load: LoadData, broker: str, bundle: str) -> bool:
    """Whether the broker's report shows the bundle, or still the bundle it was split from."""
    stats = load.snapshot.brokers[broker].lastStats
    if bundle in stats:
        return True
    if not bundle_names.is_bundle_name(bundle):
        return False
    namespace, bundle_range = bundle_names.split_bundle_name(bundle)
    prefix = namespace + "/"
    for other in stats:
        if other.startswith(prefix) and bundle_names.is_bundle_name(other):
            parent = bundle_names.split_bundle_name(other)[1]
            if parent.lower <= bundle_range.lower and bundle_range.upper <= parent.upper:
                return True
    return False


def in_flight(
    load: LoadData, state: StrategyState, forecast: Forecast, config: LoadBalancerConfig
) -> dict[str, PendingMove]:
    """Earlier moves the reports do not show yet: add their effect; forget the ones they show, and the ones a third
    broker reports the bundle on: it landed elsewhere (an older Pulsar's leader keeps one destination per bundle
    range, someone else moved it, or placement overrode the destination), and that broker's report counts it already
    — adding it to the destination too would plan on load that is not there, for as long as the move is kept."""
    brokers, now = load.snapshot.brokers, load.snapshot.taken_at
    still = {}
    for bundle, move in state.predictive_pending.items():
        if (
            now - move.planned_at > pending_ttl_ms(config)
            or move.source not in brokers
            or move.destination not in brokers
        ):
            continue
        on_source = reported_on(load, move.source, bundle)
        on_destination = bundle in brokers[move.destination].lastStats
        if not on_source and on_destination:
            continue  # both reports show it
        if not on_source and load.snapshot.owner_of(bundle) not in (None, move.source, move.destination):
            continue  # another broker reports it
        if on_source:
            forecast.shift(move.source, move.traffic, -1)
        if not on_destination:
            forecast.shift(move.destination, move.traffic, +1)
        still[bundle] = move
    return still


def _showing_a_move(load: LoadData, state: StrategyState, broker: str, config: LoadBalancerConfig) -> bool:
    """Whether the broker's report may show a move of its that no report before it did: a prediction of the plan
    that moved it is still to be checked (``check_predictions`` drops it once every move it involved shows), and the
    report was written after that plan."""
    prediction, report = state.predictions.get(broker), load.snapshot.brokers.get(broker)
    return prediction is not None and report is not None and reported_after(load, report, prediction[1], config)


def reported_after(load: LoadData, report: BrokerLoad, at_ms: int, config: LoadBalancerConfig) -> bool:
    """Whether ``report`` shows the broker as it was after ``at_ms``.

    A report written since says so (``lastUpdate``). But Pulsar writes LocalBrokerData only on a change of
    more than loadBalancerReportUpdateThresholdPercentage (or every loadBalancerReportUpdateMaxIntervalMinutes),
    while its REST endpoint — what the operator reads — answers the latest sample with the last write's
    ``lastUpdate``: a steady broker's report read half a shedding interval after ``at_ms`` shows it too
    (ModularLoadManagerImpl.writeBrokerDataOnZooKeeper / generateLoadReport).
    """
    half_interval_ms = config.loadBalancerSheddingIntervalMinutes * 30_000
    return report.lastUpdate > at_ms or load.snapshot.taken_at - at_ms >= half_interval_ms


def check_predictions(
    load: LoadData,
    state: StrategyState,
    pending: Mapping[str, PendingMove],
    config: LoadBalancerConfig,
    sampled: Mapping[str, float],
    drawn: Mapping[str, float],
) -> tuple[dict[str, tuple[float, int]], dict[str, float]]:
    """Compare earlier predictions with reports that show every move they involved (``sampled``: each broker's
    usage as its report says, ``Forecast.sampled``). A prediction is of the broker's level at the traffic its bundles
    are expected to carry: what its report's draws of the jitter add to its sample (``drawn``: ``Forecast.drawn``)
    is no miss of the model's."""
    busy = {m.source for m in pending.values()} | {m.destination for m in pending.values()}
    waiting, errors = {}, {}
    for broker, (predicted, planned_at) in state.predictions.items():
        report = load.snapshot.brokers.get(broker)
        if report is None or load.snapshot.taken_at - planned_at > pending_ttl_ms(config) * 2:
            continue
        if broker in busy or not reported_after(load, report, planned_at, config):
            waiting[broker] = (predicted, planned_at)
            continue
        errors[broker] = sampled[broker] - drawn.get(broker, 0.0) - predicted
    return waiting, errors
