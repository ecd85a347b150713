"""How a reason writes a quantity: shedders and the split trigger say the same rate the same way.

Below both ``shedding`` and ``splitting``, so the split trigger need not reach into the shedders for it.
"""

from __future__ import annotations


def fmt_bytes(value: float) -> str:
    """A rate in bytes per second, in the largest binary unit it reaches: ``1.50 MiB/s``, ``512 B/s``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:.2f} {unit}/s"
    return f"{value:.0f} B/s"
