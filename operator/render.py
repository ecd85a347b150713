"""Plans rendered for people: one row per action, then a before/after table of broker load."""

from __future__ import annotations

import datetime
import textwrap

from strategies.plans import Plan, Split, Unload


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()
    return [line] + ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def plan_table(plan: Plan, dry_run: bool = True) -> str:
    taken = datetime.datetime.fromtimestamp(plan.taken_at / 1000, tz=datetime.timezone.utc)
    mode = "dry run" if dry_run else "live"
    out = [
        f"Plan ({mode}): shedding {plan.shedding}, placement {plan.placement}, "
        f"snapshot taken {taken:%Y-%m-%d %H:%M:%S} UTC — "
        f"{len(plan.unloads)} unload(s), {len(plan.splits)} split(s)",
        "",
    ]
    if plan.actions:
        rows = []
        reasons = []
        for i, action in enumerate(plan.actions, 1):
            if isinstance(action, Unload):
                rows.append([str(i), "unload", action.bundle, action.source, action.destination or "(placement)"])
            elif isinstance(action, Split):
                where = ", ".join(f"0x{b:08x}" for b in action.boundaries) or "(owner computes)"
                rows.append([str(i), "split", action.bundle, action.source, f"{action.algorithm} at {where}"])
            reasons.append(action.reason)
        lines = _table(["#", "ACTION", "BUNDLE", "SOURCE", "DESTINATION / SPLIT"], rows)
        out.append(lines[0])
        for line, reason in zip(lines[1:], reasons):
            out.append(line)
            out.extend(textwrap.wrap(reason, 108, initial_indent="     why: ", subsequent_indent="          "))
    else:
        out.append("No action: the cluster is within the strategy's thresholds.")
    out.append("")
    out.append("Brokers (usage = weighted max resource usage in % of capacity; 'after' is an estimate):")
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
        before = [b.usage_before for b in plan.brokers]
        after = [b.usage_after for b in plan.brokers]
        out.append(f"spread (max − min): {max(before) - min(before):.1f} → {max(after) - min(after):.1f} points")
    if plan.notes:
        out.append("")
        out.append("Notes:")
        out.extend(f"  - {n}" for n in plan.notes)
    return "\n".join(out)
