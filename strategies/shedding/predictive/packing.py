"""The greedy end-state plan: each giver's fewest bundles into the band, packed onto the receivers.

Bundles come in steps, and when many brokers must give and many must take, a move that is best on its own
fills the first receivers to the level with whatever arrives and leaves the last ones short by a bundle only a
broker already in the band could give: a second move for that broker and for the one it fills. Here each giver
gives the fewest bundles that land it in the band (``fewest_into_band``), and the same bundles fill every
receiver into it (``assign``): largest first onto the lowest, then a bounded search of moves, exchanges and
chains of two.

Pure arithmetic over sizes in usage points: each bundle's effect on its owner (``fewest_into_band``'s ``sizes``)
and on each receiver (``assign``'s ``rise``: bundles × receivers) are the forecast's, taken as additive. The
searches are bounded (``SWAP_ROUNDS``, ``SEARCH_STEPS``, ``EXTRA_COUNTS``) so a cycle over a thousand brokers
stays within its time.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

SWAP_ROUNDS = 64  # bounded search: a giver's subset improves by at most this many exchanges
SEARCH_STEPS = 256  # and the takers' assignment by at most this many moves or exchanges of planned bundles
EXTRA_COUNTS = 2  # a giver tries at most this many bundles more than the fewest whose sum reaches the band


def fewest_into_band(sizes: Sequence[float], low: float, high: float, want: float) -> list[int] | None:
    """Indices of the fewest ``sizes`` whose sum is strictly between low and high (the hit counters clear a broker
    strictly inside their gap), the sum nearest ``want`` among the subsets the search finds; [] when low < 0; None
    when none is found.

    The count starts at the fewest of the largest sizes that reach ``low`` (no smaller set can); from the
    largest that many, exchanges of one chosen size for one not chosen (the outside size nearest the one
    that would hit ``want``, by bisection) move the sum into the band and toward ``want``.
    """
    if low < 0:
        return []
    order = sorted((i for i in range(len(sizes)) if sizes[i] > 0), key=lambda i: (-sizes[i], i))
    reached = np.cumsum([sizes[i] for i in order]) > low
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
        return (not low < value < high, abs(value - want))

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
    (and, among those, nearer the mean). A taker below the mean no single step helps gets a depth-2 ejection
    chain (``chain``): a bundle of another taker comes to it, and that taker's best step makes up for it.

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

    def cost(value: np.ndarray) -> np.ndarray:
        """Out of the band counts before any distance to the mean: (points out)² × a large weight; above
        ``limit``, never."""
        out = np.maximum(np.maximum(mean - band - value, value - mean - band), 0.0)
        return np.where(value <= limit, out * out * 1e6 + (value - mean) ** 2, np.inf)

    def best_step(v: int) -> tuple[int | None, int | None, int] | None:
        """The move of one planned bundle off or onto taker ``v``, or the exchange of one of its bundles for
        another taker's, that lowers the two takers' cost most: (bundle leaving v, bundle arriving on v, the
        taker the leaving one goes to)."""
        at = np.asarray(where)
        placed = np.flatnonzero((at >= 0) & (at != v))
        owner = at[placed]
        own = held[v]
        cost_v, cost_all = float(cost(level[v : v + 1])[0]), cost(level)
        best: tuple[float, int | None, int | None, int] = (1e-9, None, None, v)
        if placed.size:  # a bundle of another taker comes to v
            new_v = level[v] + rise[placed, v]
            new_o = level[owner] - rise[placed, owner]
            gain = cost_v + cost_all[owner] - cost(new_v) - cost(new_o)
            gain[~allowed[placed, v]] = -np.inf
            k = int(np.argmax(gain))
            if gain[k] > best[0]:
                best = (float(gain[k]), None, int(placed[k]), v)
        others = np.arange(takers) != v
        for b in own:
            new_v = level[v] - rise[b, v]
            gain = cost_v + cost_all - cost(np.array([new_v]))[0] - cost(level + rise[b])  # b goes to another
            gain[~(others & allowed[b])] = -np.inf
            o = int(np.argmax(gain))
            if gain[o] > best[0]:
                best = (float(gain[o]), b, None, o)
            if placed.size:  # b and a bundle of another taker change places
                swap_v = new_v + rise[placed, v]
                swap_o = level[owner] + rise[b, owner] - rise[placed, owner]
                gain = cost_v + cost_all[owner] - cost(swap_v) - cost(swap_o)
                gain[~(allowed[placed, v] & allowed[b, owner])] = -np.inf
                k = int(np.argmax(gain))
                if gain[k] > best[0]:
                    best = (float(gain[k]), b, int(placed[k]), int(owner[k]))
        if best[1] is None and best[2] is None:
            return None
        return best[1], best[2], best[3]

    def relocate(b: int, to: int) -> None:
        held[where[b]].remove(b)
        level[where[b]] -= rise[b, where[b]]
        held[to].append(b)
        level[to] += rise[b, to]
        where[b] = to

    def apply(step: tuple[int | None, int | None, int], v: int) -> list[tuple[int, int]]:
        """Carry out ``best_step(v)``'s step; what undoes it: (bundle, taker it was on), latest first."""
        leaving, arriving, to = step
        undo = []
        if arriving is not None:
            undo.append((arriving, where[arriving]))
            relocate(arriving, v)
        if leaving is not None:
            undo.append((leaving, v))
            relocate(leaving, to)
        return undo[::-1]

    def chain(v: int) -> bool:
        """For a taker below the mean no single step helps: a bundle of another taker ``o`` that lands ``v`` in the
        band comes to it, and ``o``'s best step then makes up for it; kept when the two together lower the
        takers' cost, undone otherwise."""
        if level[v] > mean:
            return False
        before = float(cost(level).sum())
        fits = [
            b
            for b in range(bundles)
            if where[b] >= 0 and where[b] != v and allowed[b, v] and abs(level[v] + rise[b, v] - mean) <= band
        ]
        for b in sorted(fits, key=lambda b: (abs(level[v] + rise[b, v] - mean), b)):
            o = where[b]
            relocate(b, v)
            step = best_step(o)
            undo = apply(step, o) if step is not None else []
            if float(cost(level).sum()) < before - 1e-9:
                return True
            for bundle, back in undo:
                relocate(bundle, back)
            relocate(b, o)
        return False

    stuck: set[int] = set()  # takers out of the band no step improved: not tried again (bounded search)
    for _ in range(SEARCH_STEPS):
        outside = [t for t in range(takers) if abs(level[t] - mean) > band and t not in stuck]
        if not outside:
            break
        v = max(outside, key=lambda t: (abs(level[t] - mean), -t))
        step = best_step(v)
        if step is not None:
            apply(step, v)
        elif not chain(v):
            stuck.add(v)
    return where
