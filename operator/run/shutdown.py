"""How the daemon stops: SIGTERM/SIGINT set the stop event, and a hung call never holds the exit.

The cycle checks the stop event before every mutating call (the executor's ``stop_requested``), so a
signal means "send nothing more". On the way out the daemon waits for the cycle in flight at most until
``shutdownTimeoutSeconds`` minus a margin; a call still hanging then is abandoned — it was recorded
(cooldown, pending verification) before it was sent, so the next start verifies it.
"""

from __future__ import annotations

import signal
import threading
import time

EXIT_MARGIN_S = 2.0  # left of shutdownTimeoutSeconds for closing the probes and the audit spool


def on_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT set ``stop`` (only the main thread may install handlers; elsewhere: nothing)."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())


def wait_for_cycle(cycle_lock: threading.Lock, deadline: float) -> bool:
    """True when the cycle in flight (if any) ended before ``deadline`` (time.monotonic); False: abandoned."""
    if cycle_lock.acquire(timeout=max(0.0, deadline - time.monotonic() - EXIT_MARGIN_S)):
        cycle_lock.release()
        return True
    return False
