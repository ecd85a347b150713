"""Value types for the command line's numbers: a bad one is argparse's one-line usage error (exit 2), never a
value that makes a command wait forever (NaN) or spin (infinity)."""

from __future__ import annotations

import argparse


def positive(text: str) -> float:
    """A finite number above 0 (``--speed``, ``--minutes``, ``--timeout``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):  # NaN compares false both ways
        raise argparse.ArgumentTypeError(f"{text} must be a positive number, e.g. 15")
    return value
