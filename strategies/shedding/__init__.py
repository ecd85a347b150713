"""Shedding strategies: which bundles to unload from which brokers."""
