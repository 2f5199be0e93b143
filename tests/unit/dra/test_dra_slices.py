"""This node's ResourceSlice: what it offers, and how the publisher keeps it in sync."""

from __future__ import annotations

from dataclasses import replace

from dra_fakes import FakeDraApi

from horus.api.inventory import GpuDevice
from horus.dra.slices import SlicePublisher, build_device, build_slice_spec, normalize

NODE = "gpu-node-0001"
H100 = GpuDevice(index=0, uuid="GPU-aaaa", model="H100", memory_mib=81559)
GPUS = [H100, GpuDevice(index=1, uuid="GPU-bbbb", model="H100", memory_mib=81559)]


def test_one_device_per_gpu_with_the_contract_names() -> None:
    device = build_device(H100)
    assert device["name"] == "gpu-0"
    assert device["attributes"] == {
        "uuid": {"string": "GPU-aaaa"},
        "model": {"string": "H100"},
        "index": {"int": 0},
        "memoryMiB": {"int": 81559},
    }
    assert device["allowMultipleAllocations"] is True
    assert "taints" not in device
    cores, memory = device["capacity"]["cores"], device["capacity"]["memory"]
    assert cores == {
        "value": "100",
        "requestPolicy": {"default": "100", "validRange": {"min": "1", "step": "1"}},
    }
    assert memory == {
        "value": "81559Mi",
        "requestPolicy": {"default": "81559Mi", "validRange": {"min": "1Mi", "step": "1Mi"}},
    }


def _rounded(request_mib: int, min_mib: int = 1, step_mib: int = 1) -> int:
    """What the kube-scheduler consumes for a request under validRange (KEP-5075: round up to
    min + n * step)."""
    if request_mib <= min_mib:
        return min_mib
    return min_mib + -(-(request_mib - min_mib) // step_mib) * step_mib


def test_81559_mib_takes_a_whole_gpu_job_or_two_half_jobs() -> None:
    # memory policy as published: every consumed amount is whole MiB, nothing rounds past the GPU
    policy = build_device(H100)["capacity"]["memory"]["requestPolicy"]["validRange"]
    assert (policy["min"], policy["step"]) == ("1Mi", "1Mi")
    assert _rounded(81559) == 81559  # the whole GPU (also the default of a request without it)
    half = 81559 // 2
    assert 2 * _rounded(half) <= 81559
    # with the device plugin's 256 MiB unit as the step the same two halves would not fit:
    assert 2 * _rounded(half, 256, 256) > 81559


def test_an_unhealthy_gpu_is_tainted_no_schedule() -> None:
    device = build_device(replace(H100, health="Unhealthy"))
    assert device["taints"] == [
        {"key": "gpu.horus.io/unhealthy", "value": "Unhealthy", "effect": "NoSchedule"}
    ]


def test_the_pool_is_the_node() -> None:
    spec = build_slice_spec(NODE, list(reversed(GPUS)), 3)
    assert spec["driver"] == "gpu.horus.io" and spec["nodeName"] == NODE
    assert spec["pool"] == {"name": NODE, "generation": 3, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"]


def test_normalize_ignores_what_the_apiserver_rewrites() -> None:
    a = build_slice_spec(NODE, GPUS, 1)
    b = build_slice_spec(NODE, GPUS, 7)
    b["devices"][0]["capacity"]["memory"]["value"] = str(81559 * 2**20)  # canonical bytes
    assert normalize(a) == normalize(b)
    b["devices"][0]["capacity"]["cores"]["value"] = "99"
    assert normalize(a) != normalize(b)


def test_publisher_creates_owned_by_the_node_then_only_writes_on_change() -> None:
    api = FakeDraApi({NODE: "node-uid"})
    pub = SlicePublisher(api, NODE)
    assert pub.sync(GPUS) is True
    (live,) = api.slices.values()
    assert live["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "node-uid", "controller": True}
    ]
    assert live["spec"]["pool"]["generation"] == 1
    assert pub.sync(GPUS) is False  # nothing changed: no write
    sick = [replace(GPUS[0], health="Unhealthy"), GPUS[1]]
    assert pub.sync(sick) is True
    (live,) = api.slices.values()
    assert live["spec"]["pool"]["generation"] == 2
    assert live["spec"]["devices"][0]["taints"][0]["key"] == "gpu.horus.io/unhealthy"
    assert pub.sync(sick) is False  # the apiserver's timeAdded is not a change
    assert (
        pub.sync(GPUS) is True
        and "taints" not in next(iter(api.slices.values()))["spec"]["devices"][0]
    )


def test_publisher_repairs_a_deleted_or_edited_slice_and_removes_extras() -> None:
    api = FakeDraApi({NODE: "node-uid"})
    pub = SlicePublisher(api, NODE)
    pub.sync(GPUS)
    name = next(iter(api.slices))
    api.slices[name]["spec"]["devices"][0]["capacity"]["cores"]["value"] = "1000"  # edited
    assert pub.sync(GPUS) is True
    assert api.slices[name]["spec"]["devices"][0]["capacity"]["cores"]["value"] == "100"
    api.slices.clear()  # deleted
    assert pub.sync(GPUS) is True and len(api.slices) == 1
    extra = dict(next(iter(api.slices.values())))
    api.slices["zz-extra"] = {
        **extra,
        "metadata": {
            **extra["metadata"],
            "name": "zz-extra",
            "creationTimestamp": "2026-11-26T13:00:00Z",
        },
    }
    assert pub.sync(GPUS) is True
    assert list(api.slices) != ["zz-extra"] and len(api.slices) == 1


def test_a_field_the_apiserver_drops_does_not_make_every_resync_write() -> None:
    api = FakeDraApi({NODE: "node-uid"})
    api.drop_taints = True  # DRADeviceTaints off (Kubernetes 1.34)
    pub = SlicePublisher(api, NODE)
    sick = [replace(GPUS[0], health="Unhealthy")]
    assert pub.sync(sick) is True
    assert pub.sync(sick) is False


def test_no_node_no_slice() -> None:
    api = FakeDraApi({})
    assert SlicePublisher(api, NODE).sync(GPUS) is False
    assert api.slices == {}
