"""The cyclic garbage collector, paused while a snapshot is read or a cycle is planned.

Reading a snapshot of 100,000 bundles makes 100,000 objects and planning a cycle a few hundred
thousand more; none of them is part of a reference cycle, so reference counting frees every one.
CPython's collector does not know that: every so many allocations it walks the whole heap — the
snapshot, the state, everything — looking for cycles, which at that size was a third of a cycle's
time and half of a snapshot's reading. It is paused for the duration and resumes afterwards (it is
left alone when the caller had already disabled it).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
