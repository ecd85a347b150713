"""A faithful simulator of a Pulsar cluster's admin REST API and load, for tests, the demo and benchmarks.

No real Pulsar runs on our machines; this package serves every broker's admin API on its own
127.0.0.1 port with the paths, status codes, redirects and JSON shapes Pulsar uses, and moves load
between brokers as bundles are unloaded, split and looked up. It never imports the operator.
"""
