"""The operator (DLJobs) and the scheduler extender (plain pods) give the same answer for the
same cluster and the same job: one placement session, one core call per node.

The cluster holds a DLJob resident with a known profile, a plain pod nobody profiled (the
pessimistic pair-speed rule applies to both placers) and a measured pair speed; the new job
asks for the same explicit share with the same profile, once as a DLJob restricted to one
node by its nodeSelector, once as a plain pod the extender evaluates on that node.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from extfixtures import FakeSource, plain_pod
from fakeapi import FakeJobApi
from opfixtures import KEY, dljob, node, pod, share

from horus.api.assignment import GpuAssignment, decode_predicted
from horus.api.inventory import simulated_gpu_uuid
from horus.common import constants as c
from horus.operator.extender import Extender
from horus.operator.reconcile import Reconciler
from horus.predictor import load_default_predictor

PREDICTOR = load_default_predictor()


def _cluster() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [node("n1", gpus=1), node("n2", gpus=1)]
    for n in nodes:
        n["metadata"]["labels"] = {"kubernetes.io/hostname": n["metadata"]["name"]}
    resident = dljob("res", [share("n1", 0, core=50, mem=20000)], phase="Running")
    resident["status"]["observed"] = {
        "pairs": [{"other": "resnet50@64", "gpuModel": "H100", "speed": 0.55, "samples": 9}]
    }
    anon = pod("anon", GpuAssignment("n2", simulated_gpu_uuid("n2", 0), 0, 40, 15000))
    return nodes, [anon], [resident]


def _operator_choice(target: str) -> tuple[Any, dict[str, Any]]:
    nodes, pods, jobs = _cluster()
    api = FakeJobApi(nodes)
    for j in jobs:
        api.add_dljob(j)
    for p in pods:
        api.pods[(p["metadata"]["namespace"], p["metadata"]["name"])] = p
    new = dljob("new", gpu={"mode": "explicit", "corePercent": 30, "memoryMiB": 8000})
    new["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": target}
    api.add_dljob(new)
    rec = Reconciler(api, PREDICTOR, KEY, workers=2)
    try:
        rec.run_pass()
    finally:
        rec.close()
    status = api.job("new")["status"]
    (record,) = status["placements"]
    return record, status


@pytest.mark.parametrize("target", ["n1", "n2"])
def test_operator_and_extender_choose_the_same_gpu_and_share(target: str) -> None:
    record, status = _operator_choice(target)
    nodes, pods, jobs = _cluster()
    newpod = plain_pod("new", core=30, memory=8000)
    source = FakeSource(nodes, [*pods, newpod], jobs)
    ext = Extender(source, PREDICTOR, key=KEY, cache_seconds=0)
    verdict = ext.evaluate(newpod, [target])[target]
    assert verdict.placement is not None, verdict.reason
    gpu = verdict.placement.shares[0]
    assert (record["node"], record["gpuIndex"]) == (gpu.node, gpu.gpu_index)
    assert (record["corePercent"], record["memoryMiB"]) == (gpu.core_percent, gpu.memory_mib)
    assert f"predicted speed {verdict.placement.predicted_speed:.2f}" in status["message"]
    # the prediction record is the same conversion too
    ext.bind(_binding(target))
    written = source.pods[("default", "new")]["metadata"]["annotations"]
    assert decode_predicted(written[c.ANNOTATION_PREDICTED]).to_json() == status["predicted"]


def _binding(target: str) -> Any:
    from horus.operator.extender import BindingArgs

    return BindingArgs("new", "default", "uid-new", target)


def test_the_measured_pair_moves_both_placers_alike() -> None:
    """n1 holds a resnet50 measured at 0.55× next to resnet50: both placers see that number."""
    _, status_n1 = _operator_choice("n1")
    _, status_n2 = _operator_choice("n2")
    speed = {
        n: float(s["message"].rsplit("predicted speed ", 1)[1])
        for n, s in (("n1", status_n1), ("n2", status_n2))
    }
    nodes, pods, jobs = _cluster()
    newpod = plain_pod("new", core=30, memory=8000)
    ext = Extender(FakeSource(nodes, [*pods, newpod], jobs), PREDICTOR, key=KEY, cache_seconds=0)
    verdicts = ext.evaluate(newpod, ["n1", "n2"])
    for n in ("n1", "n2"):
        placement = verdicts[n].placement
        assert placement is not None
        assert round(placement.predicted_speed, 2) == speed[n]
    assert json.dumps(status_n1["predicted"]) == json.dumps(status_n2["predicted"])
