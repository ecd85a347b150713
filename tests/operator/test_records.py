"""The executor's record is typed, and the state file keeps its format: a file written before is read and
written back unchanged."""

from pathlib import Path

from pulsar_lb_operator.records import ExecutorState, Pending
from pulsar_lb_operator.store import statefile

# Written by pulsar-lb-operator 0.1.0 (pending entries as plain objects) after five unloads of a live cycle on the
# simulator's demo cluster.
WRITTEN_BEFORE = Path(__file__).parent / "fixtures" / "state-written-by-0.1.0.json"


def test_a_state_file_written_before_reads_back_typed_and_is_written_back_byte_for_byte(tmp_path):
    state = statefile.load(WRITTEN_BEFORE)
    pending = state.executor.pending
    assert len(pending) == 5 and all(isinstance(p, Pending) and p.type == "unload" for p in pending)
    assert state.executor.awaiting() == set(state.executor.last_moved)  # each bundle sent is awaiting verification
    assert {(p.source, p.destination) for p in pending} == {("127.0.0.1:39643", "127.0.0.1:35687")}
    statefile.save(tmp_path / "state.json", state)
    assert (tmp_path / "state.json").read_bytes() == WRITTEN_BEFORE.read_bytes()


def test_a_pending_entry_from_before_splits_is_an_unload():
    doc = {"lastMoved": {"t/n/0x0_0x1": 5}, "pending": [{"bundle": "t/n/0x0_0x1", "source": "b:1", "at": 5}]}
    state = ExecutorState.from_json(doc)
    assert state.pending == (Pending("unload", "t/n/0x0_0x1", "b:1", None, 5),)
    assert state.to_json()["pending"] == [{**doc["pending"][0], "type": "unload", "destination": None}]
