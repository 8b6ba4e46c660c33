"""The exceptions pslite raises. Each one carries the Rust error's text unchanged."""

import builtins


class Error(Exception):
    """Anything pslite reports: a configuration variable missing or malformed, a transport
    failure, a server's error answer ("server rank 0 (id 8) answered with an error: ..."),
    a stopped postoffice."""


class InvalidArgumentError(Error, ValueError):
    """A call's arguments are wrong: unsorted or duplicate keys, lengths that do not add up,
    a buffer of the wrong dtype, a non-contiguous or read-only array, an output of the wrong
    size. The text names what was wrong ("invalid argument: keys must be sorted and unique:
    keys[1] = 3 follows keys[0] = 5")."""


class TimeoutError(Error, builtins.TimeoutError):
    """A wait ran past its deadline (PS_TIMEOUT, or ``timeout=`` of ``pslite.start``); the
    text names who did not answer."""


class PeerLostError(Error):
    """A node of the job is gone (no heartbeat within PS_HEARTBEAT_TIMEOUT, or its channel
    failed), or the scheduler declared this node lost: the job cannot complete."""
