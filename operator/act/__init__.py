"""Act: the plan sent behind the rails (``safety.py``), one action at a time, verified where it landed
(``executor.py``); the conflict guard that keeps Pulsar's own shedder from fighting the operator (``guard.py``)."""
