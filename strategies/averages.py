"""Pulsar's TimeAverageMessageData: the running averages of a bundle's message rates.

Its own module because both the leader's per-cycle view (``loaddata.py``) and the aggregated load
profile (``profile.py``) hold these averages, and neither should import the other for them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pulsar_lb_operator.strategies.documents import MAX_AVERAGE, Reader, StateError
from pulsar_lb_operator.strategies.snapshots import BundleStats

NUM_SHORT_SAMPLES = 10
NUM_LONG_SAMPLES = 1000
# Default stats of a bundle with no data yet (BundleData's defaults).
DEFAULT_MSG_RATE = 50.0
DEFAULT_MSG_THROUGHPUT = 50_000.0
_new = tuple.__new__  # a named tuple made from its fields' tuple, skipping its constructor's Python code


class MessageAverage(NamedTuple):
    """TimeAverageMessageData: exact mean until ``max_samples``, then an EMA with weight 1/max.

    A named tuple rather than a dataclass, as ``BundleData``: every cycle makes two per reported bundle
    (200,000 with 100,000 bundles), and a tuple is several times cheaper to make and to keep.
    """

    max_samples: int
    num_samples: int = 0
    msgRateIn: float = DEFAULT_MSG_RATE
    msgRateOut: float = DEFAULT_MSG_RATE
    msgThroughputIn: float = DEFAULT_MSG_THROUGHPUT
    msgThroughputOut: float = DEFAULT_MSG_THROUGHPUT

    # MessageTotals' three (snapshots.py), written out: a named tuple takes no other base class
    @property
    def msg_rate(self) -> float:
        return self.msgRateIn + self.msgRateOut

    @property
    def msg_throughput(self) -> float:
        return self.msgThroughputIn + self.msgThroughputOut

    @property
    def traffic(self) -> tuple[float, float, float]:
        return (self.msg_rate, self.msgThroughputIn, self.msgThroughputOut)

    def update(self, stats: BundleStats) -> MessageAverage:
        """The average with one more sample. Made with ``tuple.__new__``: a named tuple's own constructor is a Python
        function, a third of this method's time, and a cycle makes 200,000 of these with 100,000 bundles."""
        max_samples, samples, rate_in, rate_out, thr_in, thr_out = self
        n = samples + 1 if samples < max_samples else max_samples
        kept = n - 1
        return _new(
            MessageAverage,
            (
                max_samples,
                n,
                (kept * rate_in + stats.msgRateIn) / n,
                (kept * rate_out + stats.msgRateOut) / n,
                (kept * thr_in + stats.msgThroughputIn) / n,
                (kept * thr_out + stats.msgThroughputOut) / n,
            ),
        )

    def to_json(self) -> list[float]:
        return [self.num_samples, self.msgRateIn, self.msgRateOut, self.msgThroughputIn, self.msgThroughputOut]

    @classmethod
    def from_json(cls, max_samples: int, data: Any, path: str = "average") -> MessageAverage:
        """``[samples, rate in, rate out, throughput in, throughput out]``; anything else raises StateError."""
        count, *values = Reader(data, path, StateError).items(length=5)
        return cls(max_samples, count.integer(maximum=max_samples), *(v.number(maximum=MAX_AVERAGE) for v in values))
