"""Ids of cycles, actions and proposals: UUIDv7 (RFC 9562), unique across restarts and replicas, time-ordered.

An id names a record for as long as the records are kept (audit events, the control file, logs), so it must
never repeat: not after a restart (the seeded RNG starts over — it stays for decisions only, so a seed still
reproduces a run's decisions) and not between two replicas. 48 bits of Unix milliseconds, then 74 random bits
from the operating system; within one millisecond of one process the 12 bits after the time count up (RFC 9562
§6.2, method 1), so the ids of one process sort in the order they were made. Python's own ``uuid.uuid7`` comes
with 3.14; these lines stand in for it until the oldest Python we support has it.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def new_id() -> str:
    """A fresh UUIDv7 in its canonical form (``0190…-7…``); ids made later sort after earlier ones."""
    global _last_ms, _counter
    random_bits = int.from_bytes(os.urandom(10), "big")
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms > _last_ms:
            _last_ms, _counter = now_ms, (random_bits >> 68) & 0x7FF  # a random start, room to count up
        else:  # the same millisecond (or the clock stepped back): count on from the last id
            _counter += 1
            if _counter > 0xFFF:
                _last_ms, _counter = _last_ms + 1, 0
        ms, counter = _last_ms, _counter
    value = (ms & (2**48 - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | random_bits & (2**62 - 1)
    return str(uuid.UUID(int=value))
