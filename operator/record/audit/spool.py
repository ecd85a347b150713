"""The audit spool: a local append-only file every event is written to before anyone tries to send it.

Why an outbox: a cycle must never wait for, or fail because of, the Pulsar broker that receives the
audit trail. An event is durable once it is in the spool; the publisher reads from here and records
the highest sequence number the broker acknowledged in ``sent.json``. After a restart it resumes
after that number, so nothing is lost and nothing already acknowledged is sent twice. When every
event is acknowledged the file is emptied; numbering goes on from the acknowledged number.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import structlog

from pulsar_lb_operator.store import files
from pulsar_lb_operator.strategies import ClusterError

log = structlog.get_logger(__name__)

EVENTS_FILE = "events.jsonl"
SENT_FILE = "sent.json"


def _line(event: dict[str, Any]) -> str:
    return json.dumps(event, sort_keys=True, separators=(",", ":")) + "\n"


class SpoolFullError(ClusterError, OSError):
    """The spool reached its size cap; the event was not written."""


class Spool:
    """Thread-safe: the cycle appends, the publisher thread reads and acknowledges."""

    def __init__(self, directory: str | Path, max_bytes: int = 64 * 2**20) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._events = self.directory / EVENTS_FILE
        self._sent_path = self.directory / SENT_FILE
        self._sent = self._read_sent()
        self._repair_torn_tail()
        self._offset = 0  # where the first event not yet acknowledged may start
        self._ends: dict[int, int] = {}  # end offsets of the events last handed out by pending()
        last = self._sent
        for seq, _payload, _end in self._scan(0):
            last = max(last, seq)
        self._next = last + 1

    # ------------------------------------------------------------------ writing

    def append(self, events: Iterable[dict[str, Any]]) -> list[int]:
        """Number the events and write them with one fsync; returns their sequence numbers."""
        with self._lock:
            lines: list[str] = []
            numbers: list[int] = []
            for event in events:
                numbers.append(self._next + len(numbers))
                lines.append(_line({**event, "seq": numbers[-1]}))
            if not lines:
                return []
            data = "".join(lines).encode("utf-8")
            if self._size() + len(data) > self.max_bytes:
                raise SpoolFullError(f"audit spool {self._events} is at its cap of {self.max_bytes} bytes")
            self.directory.mkdir(parents=True, exist_ok=True)  # removed while we run: make it again
            with open(self._events, "ab") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            self._next += len(numbers)
            return numbers

    # ------------------------------------------------------------------ reading

    def pending(self, limit: int = 1000) -> list[tuple[int, bytes]]:
        """Events not yet acknowledged, oldest first, as (sequence number, JSON payload)."""
        with self._lock:
            out: list[tuple[int, bytes]] = []
            self._ends = {}
            for seq, payload, end in self._scan(self._sent, self._offset):
                out.append((seq, payload))
                self._ends[seq] = end
                if len(out) >= limit:
                    break
            return out

    def backlog(self) -> int:
        with self._lock:
            return self._next - 1 - self._sent

    @property
    def sent(self) -> int:
        return self._sent

    def acknowledge(self, seq: int) -> None:
        """The broker persisted every event up to ``seq``; empty the file once all are."""
        with self._lock:
            if seq <= self._sent:
                return
            self._sent = seq
            files.write_json_atomically(self._sent_path, {"sent": seq})
            self._offset = self._ends.get(seq, self._offset)
            if seq >= self._next - 1:
                # Crash between these two steps: the file still holds acknowledged events, which
                # _scan skips by number. Never the other way round.
                with open(self._events, "wb") as handle:
                    os.fsync(handle.fileno())
                self._offset, self._ends = 0, {}

    def resume_after(self, broker_last: int) -> None:
        """Align with the broker's deduplication record (the producer's last sequence id).

        Inside our numbering: those events were persisted before a crash kept us from writing
        ``sent.json``; acknowledge them rather than send them twice. Beyond it: the spool was wiped
        while the broker remembers; renumber what is left so the broker does not drop it as old.
        """
        if broker_last <= self._sent:
            return
        if broker_last < self._next:
            self.acknowledge(broker_last)
            return
        with self._lock:
            left = [json.loads(payload) for _seq, payload, _end in self._scan(self._sent)]
            for offset, event in enumerate(left, 1):
                event["seq"] = broker_last + offset
            text = "".join(_line(e) for e in left)
            tmp = self._events.with_suffix(".renumbered")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, self._events)
            self._sent = broker_last
            files.write_json_atomically(self._sent_path, {"sent": broker_last})
            self._next = broker_last + len(left) + 1
            self._offset, self._ends = 0, {}
        log.warning("audit spool renumbered after the broker's last sequence id", broker_last=broker_last)

    # ------------------------------------------------------------------ internals

    def _size(self) -> int:
        try:
            return self._events.stat().st_size
        except FileNotFoundError:
            return 0

    def _read_sent(self) -> int:
        if not self._sent_path.exists():
            return 0
        try:
            return int(files.read_json(self._sent_path, "audit spool cursor")["sent"])
        except (files.FileError, KeyError, TypeError, ValueError) as exc:
            # Resending is better than losing: start from the oldest event still in the file.
            log.error("audit spool cursor unreadable; resending the whole spool", reason=str(exc))
            return 0

    def _repair_torn_tail(self) -> None:
        """A crash mid-append leaves a line without its newline; drop it before appending after it."""
        size = self._size()
        if not size:
            return
        with open(self._events, "rb+") as handle:
            data = handle.read()
            if data.endswith(b"\n"):
                return
            keep = data.rfind(b"\n") + 1
            handle.truncate(keep)
            os.fsync(handle.fileno())
        log.warning("audit spool: dropped a partly written last event", bytes=size - keep)

    def _scan(self, after: int, offset: int = 0) -> Iterable[tuple[int, bytes, int]]:
        """(sequence number, payload, end offset) of each event numbered above ``after``."""
        if not self._events.exists():
            return
        with open(self._events, "rb") as handle:
            handle.seek(offset)
            end = offset
            for line in handle:
                end += len(line)
                try:
                    seq = int(json.loads(line)["seq"])
                except (ValueError, KeyError, TypeError):
                    log.warning("audit spool: unreadable line skipped", file=str(self._events), offset=end - len(line))
                    continue
                if seq > after:
                    yield seq, line.rstrip(b"\n"), end
