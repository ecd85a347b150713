"""The root of every error the project raises, and the exit code each branch means.

PulsarLbError
├── UserError       bad input a person can fix: settings, files, a snapshot, a state, a scenario,
│                   a command line, a missing runtime (exit 2)
├── ClusterError    what the cluster (or its Kubernetes API) answered or failed to: the admin API,
│                   the extensible load manager's data, the audit topic (exit 1)
├── InternalError   an invariant of ours broke: a bug (exit 1)
└── AnotherInstanceError (operator/store/statefile.py) another operator holds the state (exit 3)

Each class is defined in the lowest layer that raises it and names its branch as a base; it keeps the
built-in base it always had (``ValueError``, ``OSError``, …) beside it, so code that catches those still
does. The command line (``operator/cli.py``) takes the exit code from ``exit_code``: a new error class
is placed in the tree, and its exit code follows. This module sits in ``strategies`` because that is
the lowest layer and nothing may import upwards.
"""

from __future__ import annotations


class PulsarLbError(Exception):
    """Any error of pulsar-lb-operator; its message is one line meant for the person who ran it."""

    exit_code = 1


class UserError(PulsarLbError):
    """Bad input: the message names what to change."""

    exit_code = 2


class ClusterError(PulsarLbError):
    """The cluster refused, failed or answered something unusable; nothing of ours is wrong."""

    exit_code = 1


class InternalError(PulsarLbError):
    """A broken invariant of ours: a bug to report."""

    exit_code = 1
