"""A faithful simulator of a Pulsar cluster's admin REST API and load, for tests, the demo and benchmarks.

No real Pulsar runs on our machines; this package serves every broker's admin API on its own
127.0.0.1 port with the paths, status codes, redirects and JSON shapes Pulsar uses, and moves load
between brokers as bundles are unloaded, split and looked up. It never imports the operator.

Conformance with Pulsar master is tested in tests/conformance/test_simulator_*.py. Known differences
from a real broker (modular load manager), kept as short as we could:

* A broker's report is checked for a rewrite at each sample (``report_interval_seconds``), not every
  ``loadBalancerReportUpdateMinIntervalMillis`` (5 s): a write forced by
  ``loadBalancerReportUpdateMaxIntervalMinutes`` can come up to one report interval late (report_writes.py).
* Heartbeat bundles are listed in a report's ``bundles`` but not in ``lastStats``; a real broker lists a
  bundle in both (with its health-check topic loaded) or in neither.
* A split body that is not a JSON list of longs is answered 412; Jersey's own answer to an unreadable
  entity was not checked.
* A ``loadManagerClassName`` set through dynamic config is stored, not applied (a real broker swaps its
  load manager); the extensible load manager's own unload, split and report cadence are not modelled
  (simulator/elm.py).
* Java exceptions' stack traces in text/plain 500 bodies are one simulated frame long.
* A request a broker cannot read gets Jetty's bad-message page with its status's own phrase as the reason,
  where Jetty names the parser's complaint (simulator/connection.py); answers carry no ``Server`` header.
"""
