"""The end state PredictivePairingShedder plans toward: the fewest bundles that bring every broker into the band.

Why plan the whole end state and not one move at a time: bundles come in steps, and when many brokers must
give and many must take (PIP-364's 100 loaded + 100 new brokers), a move that is best on its own (the one
that shrinks Σ(usage − mean)² most) fills the first new brokers to the mean with whatever arrives and leaves
the last ones short by a bundle that no giver has left to give but a broker already in the band: a second
move for that broker and for the one it fills. Here each giver gives the fewest bundles that land it in the
band, the same bundles fill every taker into it, and the cycle carries out as much of that as the rails let
through. The plan is made again each cycle from the forecast, so what the rails cut short is planned again.

Pure arithmetic over sizes in usage points: each bundle's effect on its owner (``giver_sizes``) and on each
taker (``rise``: bundles × takers) are the forecast's, taken as additive.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

SWAP_ROUNDS = 64  # bounded search: a giver's subset improves by at most this many exchanges
SEARCH_STEPS = 256  # and the takers' assignment by at most this many moves or exchanges of planned bundles
EXTRA_COUNTS = 2  # a giver tries at most this many bundles more than the fewest whose sum reaches the band


def fewest_into_band(sizes: Sequence[float], low: float, high: float, want: float) -> list[int] | None:
    """Indices of the fewest ``sizes`` whose sum is in [low, high], the sum nearest ``want`` among the subsets
    the search finds; [] when low ≤ 0; None when none is found.

    The count starts at the fewest of the largest sizes that reach ``low`` (no smaller set can); from the
    largest that many, exchanges of one chosen size for one not chosen (the outside size nearest the one
    that would hit ``want``, by bisection) move the sum into the band and toward ``want``.
    """
    if low <= 0:
        return []
    order = sorted((i for i in range(len(sizes)) if sizes[i] > 0), key=lambda i: (-sizes[i], i))
    reached = np.cumsum([sizes[i] for i in order]) >= low - 1e-9
    if not reached.any():
        return None
    fewest = int(np.argmax(reached)) + 1
    for count in range(fewest, min(fewest + EXTRA_COUNTS, len(order)) + 1):
        chosen = _exchange(sizes, order, count, low, high, want)
        if chosen is not None:
            return chosen
    return None


def _exchange(
    sizes: Sequence[float], order: list[int], count: int, low: float, high: float, want: float
) -> list[int] | None:
    chosen = list(order[:count])
    outside = sorted(order[count:], key=lambda i: (sizes[i], i))
    keys = [sizes[i] for i in outside]
    total = sum(sizes[i] for i in chosen)

    def badness(value: float) -> tuple[bool, float]:
        return (not low - 1e-9 <= value <= high + 1e-9, abs(value - want))

    for _ in range(SWAP_ROUNDS):
        best, swap = badness(total), None
        for position, inside in enumerate(chosen):
            ideal = sizes[inside] - (total - want)  # the outside size that would land the sum on want
            at = bisect.bisect_left(keys, ideal)
            for k in (at - 1, at):
                if 0 <= k < len(outside):
                    score = badness(total - sizes[inside] + keys[k])
                    if score < best:
                        best, swap = score, (position, k)
        if swap is None:
            break
        position, k = swap
        leaving, entering = chosen[position], outside.pop(k)
        keys.pop(k)
        chosen[position] = entering
        total += sizes[entering] - sizes[leaving]
        at = bisect.bisect_left(keys, sizes[leaving])
        outside.insert(at, leaving)
        keys.insert(at, sizes[leaving])
    if badness(total)[0]:
        return None
    return sorted(chosen, key=lambda i: (-sizes[i], i))


def assign(
    levels: np.ndarray, rise: np.ndarray, allowed: np.ndarray, limit: float, mean: float, band: float
) -> list[int]:
    """Which taker (column) each bundle (row) goes to, -1 for none: largest first onto the lowest taker it may
    go to (``allowed``, not above ``limit``); then, while a taker would end out of ``mean ± band``, moves and
    exchanges of planned bundles between it and another taker that bring the takers' ends into the band
    (and, among those, nearer the mean).

    ``levels``: each taker's usage now; ``rise[b, t]``: what bundle b adds to taker t."""
    bundles, takers = rise.shape
    level = np.array(levels, dtype=float)
    where = [-1] * bundles
    held: list[list[int]] = [[] for _ in range(takers)]
    for b in sorted(range(bundles), key=lambda b: (-float(rise[b].max(initial=0.0)), b)):
        room = allowed[b] & (level + rise[b] <= limit)
        if not room.any():
            continue
        t = int(np.argmin(np.where(room, level, np.inf)))
        where[b] = t
        held[t].append(b)
        level[t] += rise[b, t]

    def cost(value: float) -> float:
        """Out of the band counts before any distance to the mean: (points out)² × a large weight."""
        out = max(mean - band - value, value - mean - band, 0.0)
        return out * out * 1e6 + (value - mean) ** 2 if value <= limit else float("inf")

    def best_step(v: int) -> tuple[float, int, int | None, int | None] | None:
        """The move (a bundle of one taker to the other) or exchange between taker ``v`` and another that
        lowers the two takers' cost most: (gain, other, bundle leaving v or None, bundle arriving on v or None)."""
        best: tuple[float, int, int | None, int | None] | None = None
        for o in range(takers):
            if o == v:
                continue
            base = cost(level[v]) + cost(level[o])
            options = [(b, None) for b in held[v]] + [(None, c) for c in held[o]]
            options += [(b, c) for b in held[v] for c in held[o]]
            for b, c in options:
                if (b is not None and not allowed[b, o]) or (c is not None and not allowed[c, v]):
                    continue
                new_v = level[v] - (rise[b, v] if b is not None else 0.0) + (rise[c, v] if c is not None else 0.0)
                new_o = level[o] + (rise[b, o] if b is not None else 0.0) - (rise[c, o] if c is not None else 0.0)
                gain = base - cost(new_v) - cost(new_o)
                if gain > 1e-9 and (best is None or gain > best[0]):
                    best = (gain, o, b, c)
        return best

    for _ in range(SEARCH_STEPS):
        outside = sorted(
            (t for t in range(takers) if abs(level[t] - mean) > band), key=lambda t: (-abs(level[t] - mean), t)
        )
        found = next(((v, step) for v in outside if (step := best_step(v)) is not None), None)
        if found is None:
            break
        v, (_, o, b, c) = found
        if b is not None:
            held[v].remove(b)
            held[o].append(b)
            where[b] = o
            level[v] -= rise[b, v]
            level[o] += rise[b, o]
        if c is not None:
            held[o].remove(c)
            held[v].append(c)
            where[c] = v
            level[o] -= rise[c, o]
            level[v] += rise[c, v]
    return where
