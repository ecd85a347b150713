"""How the daemon stops: SIGTERM, SIGINT and SIGHUP set the stop event, and a hung call never holds the exit.

The cycle checks the stop event before every mutating call (the executor's ``stop_requested``), so a
signal means "send nothing more". On the way out the daemon waits for the cycle in flight at most until
``shutdownTimeoutSeconds`` minus a margin; a call still hanging then is abandoned — it was recorded
(cooldown, pending verification) before it was sent, so the next start verifies it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator

from pulsar_lb_operator import lifecycle

EXIT_MARGIN_S = 2.0  # left of shutdownTimeoutSeconds for closing the probes and the audit spool


@contextlib.contextmanager
def on_signals(stop: threading.Event) -> Iterator[None]:
    """Meanwhile SIGTERM, SIGINT and SIGHUP set ``stop`` (only the main thread may install handlers; elsewhere:
    nothing), from a thread of its own (lifecycle.relayed): whichever thread the signal reaches, and whatever the
    main thread is waiting on. Every signal that ends the command ends the daemon's work first: one that ended the
    process without setting ``stop`` would leave the cycle in flight sending and the aggregation running. A SIGHUP
    the process was started ignoring (``nohup``) stays ignored."""
    signals = tuple(s for s in lifecycle.SIGNALS if s != signal.SIGHUP or signal.getsignal(s) != signal.SIG_IGN)
    with lifecycle.relayed(stop.set, signals) as relay, lifecycle.handlers(dict.fromkeys(signals, relay)):
        yield


def wait_for_cycle(cycle_lock: threading.Lock, deadline: float) -> bool:
    """True when the cycle in flight (if any) ended before ``deadline`` (time.monotonic); False: abandoned."""
    if cycle_lock.acquire(timeout=max(0.0, deadline - time.monotonic() - EXIT_MARGIN_S)):
        cycle_lock.release()
        return True
    return False
