"""The packaging e2e tests' fixtures, defined in :mod:`chart_support` (which the tests import
their helpers from: a module named ``conftest`` is ambiguous when several test folders have
one, so nothing imports from ``conftest``)."""

from chart_support import helm

__all__ = ["helm"]
