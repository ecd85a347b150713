"""Plans rendered for people: one row per action, then a before/after table of broker load."""

from __future__ import annotations

import datetime
import re
import textwrap
from collections.abc import Sequence

from pulsar_lb_operator.records import Record
from pulsar_lb_operator.strategies import Plan, Split, Unload

# AvgShedder's note on a pair it is still counting (strategies/shedding/avg.py; PredictivePairingShedder falls
# back to it): "AvgShedder: pair HI (76.7) / LO (16.0) diff 60.7; high hits 1/2, low hits 1/8"
_COUNTING = re.compile(
    r"^(?P<strategy>\w+): pair (?P<hi>\S+) \((?P<hi_score>[\d.]+)\) / (?P<lo>\S+) \((?P<lo_score>[\d.]+)\) "
    r"diff (?P<diff>[\d.]+); high hits (?P<high>\d+)/(?P<high_needed>\d+), low hits (?P<low>\d+)/(?P<low_needed>\d+)"
)


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()
    return [line] + ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def plan_table(plan: Plan, dry_run: bool = True, deferred: Sequence[str | None] = ()) -> str:
    """The plan for people. ``deferred`` (a live cycle's, per action: the executor's preview) marks the actions the
    rails hold back this cycle, with which rail; the brokers' 'after' is then that of the actions sent."""
    taken = datetime.datetime.fromtimestamp(plan.taken_at / 1000, tz=datetime.UTC)
    mode = "dry run" if dry_run else "live"
    held = sum(1 for why in deferred if why)
    this_cycle = f": {len(plan.actions) - held} this cycle, {held} deferred by the rails" if held else ""
    out = [
        f"Plan ({mode}): shedding {plan.shedding}, placement {plan.placement}, "
        f"snapshot taken {taken:%Y-%m-%d %H:%M:%S} UTC — "
        f"{len(plan.unloads)} unload(s), {len(plan.splits)} split(s){this_cycle}",
        "",
    ]
    if plan.actions:
        rows = []
        for i, action in enumerate(plan.actions, 1):
            if isinstance(action, Unload):
                rows.append([str(i), "unload", action.bundle, action.source, action.destination or "(placement)"])
            elif isinstance(action, Split):
                where = ", ".join(f"0x{b:08x}" for b in action.boundaries) or "(owner computes)"
                rows.append([str(i), "split", action.bundle, action.source, f"{action.algorithm} at {where}"])
        lines = _table(["#", "ACTION", "BUNDLE", "SOURCE", "DESTINATION / SPLIT"], rows)
        out.append(lines[0])
        before = None
        for line, action, why in zip(lines[1:], plan.actions, list(deferred) or [None] * len(plan.actions)):
            out.append(line)
            out.extend(textwrap.wrap(action.reason, 108, initial_indent="     why: ", subsequent_indent="          "))
            if why:
                text = "(as above)" if why == before else why
                out.extend(textwrap.wrap(text, 108, initial_indent="     deferred: ", subsequent_indent="          "))
            before = why
    else:
        out.append(counting_hits(plan) or "No action: the cluster is within the strategy's thresholds.")
    if plan.actions and not plan.unloads and counting_hits(plan):
        out.append(f"No unload yet: {counting_hits(plan, headline=False)}")
    out.append("")
    after = f"after the {len(plan.actions) - held} action(s) sent this cycle" if held else "after the plan"
    out.append(f"Brokers (usage = weighted max resource usage in % of capacity; 'after': estimated {after}):")
    out.extend(
        _table(
            ["BROKER", "USAGE", "→ AFTER", "MSG/S", "→ AFTER", "BUNDLES", "→ AFTER"],
            [
                [
                    b.broker,
                    f"{b.usage_before:.1f}",
                    f"{b.usage_after:.1f}",
                    f"{b.msg_rate_before:.0f}",
                    f"{b.msg_rate_after:.0f}",
                    str(b.bundles_before),
                    str(b.bundles_after),
                ]
                for b in plan.brokers
            ],
        )
    )
    if plan.brokers:
        usage_before = [b.usage_before for b in plan.brokers]
        usage_after = [b.usage_after for b in plan.brokers]
        out.append(
            f"spread (max − min): {max(usage_before) - min(usage_before):.1f} → "
            f"{max(usage_after) - min(usage_after):.1f} points"
        )
    if plan.notes:
        out.append("")
        out.append("Notes:")
        out.extend(f"  - {n}" for n in plan.notes)
    return "\n".join(out)


def outcome_line(record: Record) -> str:
    """One action's outcome: ``unload BUNDLE: executed (accepted)``."""
    kind = "split" if isinstance(record.action, Split) else "unload"
    return f"{kind} {record.action.bundle}: {record.outcome.value} ({record.detail})"


def counting_hits(plan: Plan, headline: bool = True) -> str | None:
    """Why there is no unload while AvgShedder still counts hits on a pair ("1 of 2 hits"), or None."""
    pairs = [m for m in map(_COUNTING.match, plan.notes) if m]
    counted = []
    for m in pairs:
        for level in ("high", "low"):
            hits, needed = int(m[level]), int(m[f"{level}_needed"])
            if 0 < hits < needed:
                counted.append((needed - hits, hits, needed, level, m))
    if not counted:
        return None
    _, hits, needed, level, m = min(counted, key=lambda c: c[0])
    key = f"loadBalancerAvgShedderHitCount{level.capitalize()}Threshold"
    more = f" ({len(pairs) - 1} more pair(s) in the notes)" if len(pairs) > 1 else ""
    text = (
        f"{m['strategy']} is counting hits on {m['hi']} ({m['hi_score']}) / {m['lo']} ({m['lo_score']}), "
        f"{m['diff']} points apart: {hits} of {needed} hits. It unloads once the gap is seen in {needed} "
        f"consecutive cycles ({key}){more}."
    )
    return f"No action yet: {text}" if headline else text
