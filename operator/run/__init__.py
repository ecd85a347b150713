"""Run: what drives the cycle — one cycle end to end (``cycle.py``), the daemon that schedules it, its HTTP
endpoints, signals and leader election, the settings, the workflows (drain, proposals) and the one-shot
commands against a live cluster (``live.py``)."""
