"""The operator tests' fixtures, defined in :mod:`operator_support` (which the tests import
their helpers from: a module named ``conftest`` is ambiguous when several test folders have
one, so nothing imports from ``conftest``)."""

from operator_support import dljob_crd, gpu_nodes, kube, operator_factory

__all__ = ["dljob_crd", "gpu_nodes", "kube", "operator_factory"]
