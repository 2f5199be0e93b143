"""Reading a claim's allocation (horus.node.claim_checks): what is ours, and every refusal."""

from __future__ import annotations

from typing import Any

import pytest

from dra_peer import POD_UID, allocated_claim, result
from horus.api.inventory import GpuDevice
from horus.node.claim_checks import ClaimRef, ClaimRefused, check_claim_ref, read_share

NODE = "gpu-node-0001"
GPUS = [
    GpuDevice(index=0, uuid="GPU-aaaa", model="H100", memory_mib=81559),
    GpuDevice(index=1, uuid="GPU-bbbb", model="H100", memory_mib=81559),
]
REF = ClaimRef("ml", "c1", "uid-1")


def claim(*results: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return allocated_claim("ml", "c1", "uid-1", NODE, list(results), **kw)


def test_a_shared_gpu_reads_its_consumed_capacity_and_share_id() -> None:
    share = read_share(REF, claim(result(NODE, 1, "45", "40000Mi", "s-9")), NODE, GPUS)
    (d,) = share.devices
    assert (d.device, d.gpu.uuid, d.cores, d.memory_mib, d.share_id) == (
        "gpu-1",
        "GPU-bbbb",
        45,
        40000,
        "s-9",
    )
    assert share.consumer == ("ml", "p1", POD_UID)
    a = share.assignment(NODE)
    assert (a.gpu_uuid, a.gpu_index, a.core_percent, a.memory_mib) == ("GPU-bbbb", 1, 45, 40000)


def test_quantities_in_canonical_form_are_read() -> None:
    # the apiserver may return 40000Mi as bytes or 1k cores as "1k": parse, do not int()
    share = read_share(REF, claim(result(NODE, 0, "1", str(40000 * 2**20))), NODE, GPUS)
    assert (share.devices[0].cores, share.devices[0].memory_mib) == (1, 40000)


def test_a_whole_device_allocation_without_consumed_capacity_is_the_whole_gpu() -> None:
    share = read_share(REF, claim(result(NODE, 0, None, None, "")), NODE, GPUS)
    assert (share.devices[0].cores, share.devices[0].memory_mib) == (100, 81559)


def test_other_drivers_results_are_left_to_them() -> None:
    other = result(NODE, 5, driver="other.example.com")
    share = read_share(REF, claim(other, result(NODE, 0)), NODE, GPUS)
    assert [d.device for d in share.devices] == ["gpu-0"]


def test_two_gpus_of_one_request_are_one_multi_gpu_share() -> None:
    share = read_share(
        REF, claim(result(NODE, 0, share_id="a"), result(NODE, 1, share_id="b")), NODE, GPUS
    )
    a = share.assignment(NODE)
    assert [g.gpu_uuid for g in a.all_gpus] == ["GPU-aaaa", "GPU-bbbb"]


def test_no_single_pod_means_no_pod_names() -> None:
    assert read_share(REF, claim(result(NODE, 0), pod=None), NODE, GPUS).consumer is None


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        (None, "does not exist"),
        (
            allocated_claim("ml", "c1", "uid-OTHER", NODE, [result(NODE, 0)]),
            "deleted and made again",
        ),
        ({"metadata": {"namespace": "ml", "name": "c1", "uid": "uid-1"}}, "not allocated"),
        (claim(result(NODE, 0, driver="other.example.com")), "no device of driver"),
        (claim(result("gpu-node-0002", 0)), "another node's GPU"),
        (claim(result(NODE, 7)), "not a GPU of node"),
        (claim({**result(NODE, 0), "device": "gpu-01"}), "not a GPU of node"),
        (claim({**result(NODE, 0), "device": "../../etc"}), "not a GPU of node"),
        (claim(result(NODE, 0, "0")), "consumed 0 cores"),
        (claim(result(NODE, 0, "101")), "consumed 101 cores"),
        (claim(result(NODE, 0, "40", "81560Mi")), "consumed 81560 MiB"),
        (claim(result(NODE, 0, "40", "1000")), "not a whole number of MiB"),
        (claim(result(NODE, 0, "4.5")), "not a whole number"),
        (claim(result(NODE, 0, "lots")), "not a Kubernetes quantity"),
        (claim({**result(NODE, 0), "adminAccess": True}), "adminAccess"),
        (claim(result(NODE, 0, request="a"), result(NODE, 1, request="b")), "one request"),
        (claim(result(NODE, 0), result(NODE, 0)), "allocated twice"),
        (
            {
                **claim(result(NODE, 0)),
                "status": {
                    **claim(result(NODE, 0))["status"],
                    "reservedFor": [
                        {"resource": "pods", "name": "a", "uid": "1"},
                        {"resource": "pods", "name": "b", "uid": "2"},
                    ],
                },
            },
            "reserved for 2 consumers",
        ),
    ],
)
def test_refusals_say_why(doc: dict[str, Any] | None, needle: str) -> None:
    with pytest.raises(ClaimRefused, match=needle):
        read_share(REF, doc, NODE, GPUS)


def test_an_unhealthy_gpu_is_refused() -> None:
    sick = [
        GPUS[0].__class__(
            index=0, uuid="GPU-aaaa", model="H100", memory_mib=81559, health="Unhealthy"
        )
    ]
    with pytest.raises(ClaimRefused, match="Unhealthy"):
        read_share(REF, claim(result(NODE, 0)), NODE, sick)


@pytest.mark.parametrize(
    ("ns", "name", "uid"),
    [
        ("", "c", "u"),
        ("ml", "", "u"),
        ("ml", "c", ""),
        ("ml", "c", "../../etc/passwd"),
        ("ml", "c", "a/b"),
        ("ML", "c", "u"),
        ("ml", "c" * 254, "u"),
        ("ml", "c", "u" * 129),
    ],
)
def test_bad_claim_references_are_refused(ns: str, name: str, uid: str) -> None:
    with pytest.raises(ClaimRefused):
        check_claim_ref(ns, name, uid)


def test_a_real_uid_is_accepted() -> None:
    ref = check_claim_ref("ml", "job-0-gpu", "6f1c2b9e-3d4a-4e5f-8a7b-0c1d2e3f4a5b")
    assert ref.uid.startswith("6f1c")
