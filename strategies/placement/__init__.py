"""Placement strategies: which broker gets an unloaded (or new) bundle."""
