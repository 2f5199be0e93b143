"""The commit leaves the objects a pass read untouched (issue 27).

The operator reads pods from the watch-fed view, which hands every pass — and the extender —
the same dicts until the object changes. A Binding used to set ``spec.nodeName`` in place in
the listed pod, so every other reader of the view saw a pod bound that the apiserver (and the
view's own version) did not yet show, and a memo keyed by the pod's resourceVersion kept the
wrong answer. The view learns of the Binding by ``Informer.assume``
(:meth:`horus.operator.jobapi.KubeJobApi.bind`); the pass keeps a bound copy of its own.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from fakeapi import FakeJobApi
from opfixtures import KEY, dljob, node

from horus.operator.jobapi import bound_pod
from horus.operator.reconcile import Reconciler
from horus.predictor import load_default_predictor

PREDICTOR = load_default_predictor()


class SharedListApi(FakeJobApi):
    """Serves its pod lists as the view does — the caller gets objects someone else holds —
    and remembers each with a copy taken when it was served; one Binding fails once."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        super().__init__(nodes)
        self.served: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.fail_bind_once: set[str] = set()

    def list_pods(self) -> list[dict[str, Any]]:
        pods = super().list_pods()
        self.served += [(p, copy.deepcopy(p)) for p in pods]
        return pods

    def bind(
        self,
        namespace: str,
        name: str,
        node: str,
        uid: str = "",
        annotations: Mapping[str, str] | None = None,
    ) -> bool:
        if name in self.fail_bind_once:
            self.fail_bind_once.discard(name)
            raise RuntimeError("connection reset by peer")
        return super().bind(namespace, name, node, uid, annotations)


def test_binding_a_listed_pod_does_not_change_the_listed_object() -> None:
    api = SharedListApi([node("n1", gpus=2)])
    api.add_dljob(dljob("a", gpu={"mode": "explicit", "corePercent": 50, "memoryMiB": 4000}))
    api.fail_bind_once.add("a-0")
    rec = Reconciler(api, PREDICTOR, KEY, workers=2)
    try:
        first = rec.run_pass()  # record, pod created, its Binding fails
        assert (first.placed, first.pods_created, first.pods_bound) == (1, 1, 0)
        assert not api.pods[("default", "a-0")]["spec"].get("nodeName")
        second = rec.run_pass()  # the listed, unbound pod is bound now
        assert second.pods_bound == 1
    finally:
        rec.close()
    assert api.pods[("default", "a-0")]["spec"]["nodeName"] == "n1"
    listed = [(p, was) for p, was in api.served if p["metadata"]["name"] == "a-0"]
    assert listed, "the pass never read the pod"
    for pod, was in listed:
        assert pod == was, "the pass changed a pod it read"


def test_bound_pod_is_a_copy() -> None:
    pod = {"metadata": {"name": "p", "annotations": {"k": "v"}}, "spec": {"containers": []}}
    was = copy.deepcopy(pod)
    out = bound_pod(pod, "n1", {"horus.io/assignment-signature": "s"})
    assert pod == was
    assert out["spec"]["nodeName"] == "n1"
    assert out["metadata"]["annotations"] == {"k": "v", "horus.io/assignment-signature": "s"}
