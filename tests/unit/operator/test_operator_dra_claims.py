"""A placement as ResourceClaims (horus.operator.claim_manifests): what the kube-scheduler is asked."""

from __future__ import annotations

from typing import Any

import pytest

from horus.common import constants as c
from horus.common.errors import ValidationError
from horus.operator.claim_manifests import claim_name, replica_claim, use_claim
from horus.operator.podspec import placement_record

JOB: dict[str, Any] = {"metadata": {"name": "train", "namespace": "ml", "uid": "job-uid"}}


class Gpu:
    def __init__(self, uuid: str, index: int, core: int, mib: int) -> None:
        self.gpu_uuid, self.gpu_index, self.core_percent, self.memory_mib = uuid, index, core, mib


def test_one_gpu_claim_pins_the_chosen_gpu_and_asks_its_share() -> None:
    claim = replica_claim(
        JOB, 1, [placement_record(1, "train-1", "n1", Gpu("GPU-a", 3, 40, 16384))]
    )
    assert claim["metadata"]["name"] == claim_name("train", 1) == "train-1-gpu"
    assert claim["metadata"]["namespace"] == "ml"
    assert claim["metadata"]["ownerReferences"][0]["uid"] == "job-uid"
    (request,) = claim["spec"]["devices"]["requests"]
    exactly = request["exactly"]
    assert exactly["deviceClassName"] == "gpu.horus.io" and exactly["count"] == 1
    assert exactly["selectors"] == [
        {"cel": {"expression": 'device.attributes["gpu.horus.io"].uuid == "GPU-a"'}}
    ]
    assert exactly["capacity"] == {"requests": {"cores": "40", "memory": "16384Mi"}}


def test_a_multi_gpu_replica_asks_each_of_its_gpus() -> None:
    records = [
        placement_record(0, "train-0", "n1", Gpu("GPU-a", 0, 50, 8192)),
        placement_record(0, "train-0", "n1", Gpu("GPU-b", 1, 50, 8192)),
    ]
    exactly = replica_claim(JOB, 0, records)["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["count"] == 2
    assert exactly["selectors"][0]["cel"]["expression"].endswith('in ["GPU-a", "GPU-b"]')
    records[1] = placement_record(0, "train-0", "n1", Gpu("GPU-b", 1, 60, 8192))
    with pytest.raises(ValidationError, match="different shares"):
        replica_claim(JOB, 0, records)


def test_the_pod_uses_the_claim_instead_of_device_plugin_resources() -> None:
    pod = {
        "metadata": {"name": "train-0"},
        "spec": {
            "schedulerName": c.SCHEDULER_NAME,
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "requests": {
                            c.RESOURCE_GPU_CORE: "40",
                            c.RESOURCE_GPU_MEMORY: "64",
                            "cpu": "1",
                        },
                        "limits": {c.RESOURCE_GPU_CORE: "40", c.RESOURCE_GPU_MEMORY: "64"},
                    },
                }
            ],
        },
    }
    out = use_claim(pod, "train-0-gpu")
    assert "schedulerName" not in out["spec"]
    assert out["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "train-0-gpu"}]
    res = out["spec"]["containers"][0]["resources"]
    assert res == {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}
    assert pod["spec"]["schedulerName"] == c.SCHEDULER_NAME  # the input is not changed
    assert use_claim(out, "train-0-gpu") == out  # idempotent


def test_a_replica_pod_may_go_only_to_the_node_horus_chose() -> None:
    from horus.operator.podspec import pin_to_node

    pod = {"spec": {"containers": [{"name": "main"}]}}
    out = use_claim(pod, "train-0-gpu", "n1")
    terms = out["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    ]
    assert use_claim(out, "train-0-gpu", "n1") == out  # idempotent
    assert "affinity" not in use_claim(pod, "train-0-gpu")["spec"]
    # the template's own required terms stay alternatives, each now also naming the node
    spec: dict[str, Any] = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                        {"matchFields": [{"key": "metadata.name", "operator": "In",
                                          "values": ["elsewhere"]}]},
                    ]
                }
            }
        }
    }  # fmt: skip
    pin_to_node(spec, "n2")
    got = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    for term in got["nodeSelectorTerms"]:
        assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]
    assert got["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "zone"
