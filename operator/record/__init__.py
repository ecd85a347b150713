"""Record: what happened, for people and machines — audit events on a Pulsar topic (``audit/``), structured
logs, the plan rendered as a table, Prometheus metrics."""
