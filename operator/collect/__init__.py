"""Collect: every broker's load and bundle stats, read through the admin REST API (``collector.py``) or,
on clusters with the extensible load manager, from its system topics through pulsar-client (``elm.py``)."""
