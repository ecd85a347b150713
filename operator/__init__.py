"""pulsar-lb-operator's daemon, CLI and I/O edges.

This folder is installed as ``pulsar_lb_operator`` because ``operator`` is a standard-library
module. If it is ever imported as ``operator`` (``python -S`` from the repository root puts this
folder ahead of the standard library), it hands the name back to the standard library at once.
"""

if __name__ == "operator":  # pragma: no cover - exercised by a subprocess test
    import importlib
    import os
    import sys

    _root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    del sys.modules["operator"]
    _saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _root]
    try:
        sys.modules["operator"] = importlib.import_module("operator")
    finally:
        sys.path[:] = _saved
else:
    __version__ = "0.1.0"
