"""Errors that reach a person.

Every error Horus raises on bad input says *what* was wrong and *how to fix it*; the CLI prints
``HorusError`` without a traceback and exits 2, so a user never has to read a stack to learn
that a flag was misspelled.
"""


class HorusError(Exception):
    """A problem a user can fix; the message says what was wrong and how to fix it."""


class ConfigError(HorusError):
    """A setting (CLI flag, environment variable or config file entry) is invalid."""


class ValidationError(HorusError):
    """An input object (DLJob, profile, trace row, RPC request) is invalid."""


class ClusterError(HorusError):
    """The local control plane could not be built, started, used or stopped."""
