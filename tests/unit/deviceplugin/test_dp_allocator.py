"""Allocate's decisions on an in-memory API: which pod, which refusals, which environment."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from dp_fakes import KEY, FakeNodeApi

from deviceplugin_peer import assignment_annotations, pod_manifest
from horus.api.assignment import GpuAssignment
from horus.api.inventory import GpuDevice
from horus.api.resources import memory_units, node_memory_unit_mib, pod_gpu_requests
from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.common.errors import ValidationError
from horus.deviceplugin.allocator import AllocationRefused, Allocator, AssignmentKey, candidates
from signing_keys import OTHER, key_ring, write_public_keys

NODE = "gpu-node-0000"
GPUS = [
    GpuDevice(0, "GPU-aaaa", "H100", 81920),
    GpuDevice(1, "GPU-bbbb", "H100", 81920),
]
CORE, MEM = c.RESOURCE_GPU_CORE, c.RESOURCE_GPU_MEMORY


def make_allocator(api: FakeNodeApi, gpus: list[GpuDevice] = GPUS, **kw: object) -> Allocator:
    return Allocator(api, NODE, AssignmentKey(api, None), lambda: gpus, 256, **kw)  # type: ignore[arg-type]


def add_pod(
    api: FakeNodeApi,
    name: str,
    core: int = 40,
    mem_mib: int = 12288,
    request_core: int | None = None,
    key: KeyRing | None = KEY,
    gpu: int = 1,
    created: str = "2026-01-01T00:00:00Z",
    annotations: dict[str, str] | None = None,
) -> None:
    ann = annotations
    if ann is None:
        ann = assignment_annotations(key, "ml", name, NODE, GPUS[gpu].uuid, gpu, core, mem_mib)
    pod = pod_manifest("ml", name, NODE, request_core or core, memory_units(mem_mib, 256), ann)
    api.add(pod, created)


def test_signed_pod_gets_its_gpu_and_share(fake_api: FakeNodeApi) -> None:
    add_pod(fake_api, "p1")
    alloc = make_allocator(fake_api)
    grant = alloc.allocate(CORE, 40)
    env = grant.envs
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-bbbb" == env["CUDA_VISIBLE_DEVICES"]
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=12288M"
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == c.MPS_PIPE_DIRECTORY_DEFAULT
    assert env[c.ENV_GPU_INDEX] == "1" and env[c.ENV_GPU_UUID] == "GPU-bbbb"
    assert env[c.ENV_GPU_CORE_PERCENT] == "40" and env[c.ENV_GPU_MEMORY_MIB] == "12288"
    assert env[c.ENV_POD_NAME] == "p1" and env[c.ENV_POD_NAMESPACE] == "ml"
    assert env[c.ENV_POD_UID] == "uid-p1" and env[c.ENV_NODE_NAME] == NODE
    assert [(m.host_path, m.container_path) for m in grant.mounts] == [
        (c.MPS_PIPE_DIRECTORY_DEFAULT, c.MPS_PIPE_DIRECTORY_DEFAULT)
    ]
    marks = json.loads(fake_api.get("p1")["metadata"]["annotations"][c.ANNOTATION_GPU_ALLOCATED])
    assert set(marks) == {CORE}
    # the memory plugin's call finds the same pod (12288 MiB = 48 units of 256 MiB)
    assert alloc.allocate(MEM, 48).envs == env
    marks = json.loads(fake_api.get("p1")["metadata"]["annotations"][c.ANNOTATION_GPU_ALLOCATED])
    assert set(marks) == {CORE, MEM}
    # allocated for both: a second call for the same amount has no pod left
    with pytest.raises(AllocationRefused, match="no pod on node"):
        alloc.allocate(CORE, 40)
    assert fake_api.events == []


def test_enforcement_none_and_device_specs(fake_api: FakeNodeApi) -> None:
    add_pod(fake_api, "p1")
    grant = make_allocator(fake_api, enforcement="none", pass_device_specs=True).allocate(CORE, 40)
    assert not any(k.startswith("CUDA_MPS") for k in grant.envs)
    assert grant.mounts == []
    assert {d.host_path for d in grant.devices} >= {"/dev/nvidia1", "/dev/nvidiactl"}


def test_oldest_pending_pod_first(fake_api: FakeNodeApi) -> None:
    add_pod(fake_api, "young", created="2026-01-02T00:00:00Z")
    add_pod(fake_api, "old", created="2026-01-01T00:00:00Z")
    add_pod(fake_api, "running-older", created="2025-12-01T00:00:00Z")
    fake_api.get("running-older")["status"]["phase"] = "Running"
    add_pod(fake_api, "done", created="2025-01-01T00:00:00Z")
    fake_api.get("done")["status"]["phase"] = "Succeeded"
    add_pod(fake_api, "other-amount", core=30, created="2024-01-01T00:00:00Z")
    order = [p["metadata"]["name"] for p in candidates(fake_api.pods, CORE, 40)]
    assert order == ["old", "young", "running-older"]
    assert make_allocator(fake_api).allocate(CORE, 40).pod == "old"


@pytest.mark.parametrize(
    ("case", "expect"),
    [
        ("forged", "invalid horus.io/gpu-assignment-signature"),
        ("unsigned", "has no horus.io/gpu-assignment-signature"),
        ("copied", "invalid horus.io/gpu-assignment-signature"),
        ("missing", "has no horus.io/gpu-assignment annotation"),
        ("mismatch", "requests horus.io/gpu-core=50 but its assignment grants 40"),
        ("malformed-json", "malformed assignment: .*not valid JSON"),
        ("malformed-field", "malformed assignment: .*corePercent"),
        ("other-node", "assignment is for node 'elsewhere'"),
        ("unknown-gpu", "assigned GPU GPU-zzzz is not on node"),
    ],
)
def test_refusals_say_why_and_record_an_event(
    fake_api: FakeNodeApi, case: str, expect: str
) -> None:
    amount = 40
    if case == "forged":
        add_pod(fake_api, "p", key=OTHER)
    elif case == "unsigned":
        add_pod(fake_api, "p", key=None)
    elif case == "copied":
        ann = assignment_annotations(KEY, "ml", "p", NODE, "GPU-bbbb", 1, 40, 12288, ("ml", "q"))
        add_pod(fake_api, "p", annotations=ann)
    elif case == "missing":
        add_pod(fake_api, "p", annotations={})
    elif case == "mismatch":
        add_pod(fake_api, "p", request_core=50)
        amount = 50
    elif case == "malformed-json":
        add_pod(fake_api, "p", annotations={c.ANNOTATION_GPU_ASSIGNMENT: "{not json"})
    elif case == "malformed-field":
        bad = '{"node":"%s","gpuUUID":"GPU-bbbb","gpuIndex":1,"corePercent":"forty","memoryMiB":1}'
        add_pod(fake_api, "p", annotations={c.ANNOTATION_GPU_ASSIGNMENT: bad % NODE})
    elif case == "other-node":
        ann = assignment_annotations(KEY, "ml", "p", "elsewhere", "GPU-bbbb", 1, 40, 12288)
        add_pod(fake_api, "p", annotations=ann)
    elif case == "unknown-gpu":
        ann = assignment_annotations(KEY, "ml", "p", NODE, "GPU-zzzz", 1, 40, 12288)
        add_pod(fake_api, "p", annotations=ann)
    with pytest.raises(AllocationRefused, match=expect):
        make_allocator(fake_api).allocate(CORE, amount)
    assert len(fake_api.events) == 1
    pod, reason, _message = fake_api.events[0]
    assert (pod, reason) == ("p", c.EVENT_REASON_ALLOCATE_REFUSED)
    assert c.ANNOTATION_GPU_ALLOCATED not in fake_api.get("p")["metadata"]["annotations"]


def test_unhealthy_gpu_is_refused(fake_api: FakeNodeApi) -> None:
    add_pod(fake_api, "p")
    sick = [GPUS[0], GpuDevice(1, "GPU-bbbb", "H100", 81920, c.GPU_UNHEALTHY)]
    with pytest.raises(AllocationRefused, match="Unhealthy"):
        make_allocator(fake_api, gpus=sick).allocate(CORE, 40)


def test_no_matching_pod(fake_api: FakeNodeApi) -> None:
    with pytest.raises(AllocationRefused, match="no pod on node gpu-node-0000 awaits"):
        make_allocator(fake_api).allocate(CORE, 40)


def test_a_pod_without_assignment_is_told_its_real_choices(fake_api: FakeNodeApi) -> None:
    """The refusal names the ways a pod gets a signed assignment (issue 21): a DLJob, the
    chart's Horus scheduler by its schedulerName, or the extender in the control plane's
    scheduler — not horus-scheduler, the name the operator's own pods carry."""
    add_pod(fake_api, "p", annotations={})
    with pytest.raises(AllocationRefused) as info:
        make_allocator(fake_api).allocate(CORE, 40)
    message = str(info.value)
    for words in (
        "has no horus.io/gpu-assignment annotation",
        "Create a DLJob",
        f"spec.schedulerName: {c.KUBE_SCHEDULER_NAME}",
        "scheduler.enabled=true",
        "extender",
        "horus-scheduler-config",
    ):
        assert words in message, message
    assert re.findall(r"schedulerName: (\S+)", message) == [c.KUBE_SCHEDULER_NAME]
    assert f"{c.SCHEDULER_NAME} " not in message and f"{c.SCHEDULER_NAME}," not in message


def test_the_published_keys_are_read_again_when_a_signature_does_not_verify(
    fake_api: FakeNodeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new key published in the ConfigMap: the cached keys fail, the plugin re-reads the
    ConfigMap (at most every KEY_RETRY_S) and then allocates the pod signed with the new key."""
    from horus.deviceplugin import allocator as allocator_mod

    monkeypatch.setattr(allocator_mod, "KEY_RETRY_S", 0.0)
    alloc = make_allocator(fake_api)
    add_pod(fake_api, "p1")
    assert alloc.allocate(CORE, 40).pod == "p1"
    fake_api.key = OTHER
    add_pod(fake_api, "p2", core=30, key=fake_api.key, gpu=0)
    assert alloc.allocate(CORE, 30).pod == "p2"
    assert fake_api.events == []


def test_keys_from_the_mounted_configmap(fake_api: FakeNodeApi, tmp_path: Path) -> None:
    """The mounted keys.pem verifies; a key published moments ago that the mount does not
    have yet is found by re-reading the ConfigMap through the API; a key published nowhere
    is refused."""
    key_file = write_public_keys(tmp_path / "keys.pem", KEY)
    add_pod(fake_api, "p")
    alloc = Allocator(fake_api, NODE, AssignmentKey(fake_api, key_file), lambda: GPUS, 256)
    assert alloc.allocate(CORE, 40).pod == "p"
    fake_api.key = KeyRing(KEY.verify.union(OTHER.verify))  # published, mount not refreshed
    add_pod(fake_api, "q", core=30, key=OTHER, gpu=0)
    assert alloc.allocate(CORE, 30).pod == "q"
    fake_api.key = KEY
    add_pod(fake_api, "r", core=20, key=key_ring("never-published"), gpu=0)
    with pytest.raises(AllocationRefused, match="invalid"):
        alloc.allocate(CORE, 20)


def test_missing_key_file_is_a_clear_refusal(fake_api: FakeNodeApi, tmp_path: Path) -> None:
    add_pod(fake_api, "p")
    alloc = Allocator(fake_api, NODE, AssignmentKey(fake_api, tmp_path / "nope"), lambda: GPUS, 256)
    with pytest.raises(AllocationRefused, match=r"cannot verify.*does not exist"):
        alloc.allocate(CORE, 40)


def test_multi_gpu_assignment_env(fake_api: FakeNodeApi) -> None:
    from horus.api.assignment import GpuRef, encode_assignment

    refs = (GpuRef("GPU-aaaa", 0, 50, 20000), GpuRef("GPU-bbbb", 1, 30, 10000))
    a = GpuAssignment(NODE, "GPU-aaaa", 0, 50, 20000, gpus=refs)
    text = encode_assignment(a)
    ann = {
        c.ANNOTATION_GPU_ASSIGNMENT: text,
        c.ANNOTATION_ASSIGNMENT_SIGNATURE: KEY.sign_assignment("ml", "m", "uid-m", "", 0, text),
    }
    req = pod_gpu_requests(a, 256)
    assert req == {CORE: 80, MEM: memory_units(20000, 256) + memory_units(10000, 256)}
    fake_api.add(pod_manifest("ml", "m", NODE, req[CORE], req[MEM], ann))
    env = make_allocator(fake_api).allocate(MEM, req[MEM]).envs
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-aaaa,GPU-bbbb"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20000M,1=10000M"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
    assert env[c.ENV_GPU_INDEX] == "0,1"


def test_memory_units_and_node_unit() -> None:
    assert memory_units(12288, 256) == 48
    assert memory_units(12289, 256) == 48  # the whole units it covers, as a GPU's IDs
    assert memory_units(100, 256) == 1  # at least one
    assert memory_units(5, 1) == 5
    assert node_memory_unit_mib(None) == 1
    assert node_memory_unit_mib({c.ANNOTATION_GPU_MEMORY_UNIT: "256"}) == 256
    with pytest.raises(ValidationError, match="whole number of MiB"):
        node_memory_unit_mib({c.ANNOTATION_GPU_MEMORY_UNIT: "big"})
    with pytest.raises(ValidationError, match=r"1\.\.65536"):
        node_memory_unit_mib({c.ANNOTATION_GPU_MEMORY_UNIT: "0"})


H100_MIB = 81559  # what a real H100 80GB reports: not a multiple of the 256 MiB unit


def test_a_gpu_of_81559_mib_offers_what_a_whole_gpu_share_and_two_halves_ask() -> None:
    """Issue 25, "Memory units": the plugin offers floor(M / unit) IDs per GPU; a whole-GPU
    share, two half shares, and any split of the GPU into shares of at least one unit ask at
    most that many (requests used to round up: 319 and 320 of 318)."""
    import random

    from horus.deviceplugin.devices import memory_kind

    gpu = GpuDevice(0, "GPU-h100", "H100", H100_MIB)
    offered = memory_kind(256).ids_per_gpu(gpu)
    assert offered == 318
    assert memory_units(H100_MIB, 256) == offered
    assert memory_units(H100_MIB // 2, 256) + memory_units(H100_MIB - H100_MIB // 2, 256) == 318
    rng = random.Random(25)
    for _ in range(2000):
        cuts = sorted(rng.sample(range(256, H100_MIB - 256), rng.randint(1, 7)))
        parts = [b - a for a, b in zip([0, *cuts], [*cuts, H100_MIB], strict=True)]
        if min(parts) < 256:
            continue
        assert sum(memory_units(p, 256) for p in parts) <= offered, parts


def test_whole_gpu_share_of_an_81559_mib_gpu_is_allocated(fake_api: FakeNodeApi) -> None:
    """The pod of a whole-GPU assignment asks the GPU's 318 IDs, and Allocate grants it the
    GPU's full 81,559 MiB (the share's MiB, not its units)."""
    gpus = [GpuDevice(0, "GPU-aaaa", "H100", H100_MIB), GpuDevice(1, "GPU-bbbb", "H100", H100_MIB)]
    add_pod(fake_api, "whole", core=100, mem_mib=H100_MIB)
    env = make_allocator(fake_api, gpus).allocate(MEM, 318).envs
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={H100_MIB}M"
    assert env[c.ENV_GPU_MEMORY_MIB] == str(H100_MIB)


def test_a_share_that_would_over_commit_the_gpu_is_refused(fake_api: FakeNodeApi) -> None:
    # Two placers raced: both pods hold valid assignments for GPU 1, 60 % core each.
    add_pod(fake_api, "first", core=60, created="2026-01-01T00:00:00Z")
    add_pod(fake_api, "second", core=60, created="2026-01-01T00:00:01Z")
    alloc = make_allocator(fake_api)
    assert alloc.allocate(CORE, 60).envs[c.ENV_POD_NAME] == "first"
    with pytest.raises(AllocationRefused, match=r"GPU 1 \(GPU-bbbb\) would be over-committed"):
        alloc.allocate(CORE, 60)
    (event,) = fake_api.events
    assert event[0] == "second" and "ml/first already hold 60% core" in event[2]
    # memory as well: 12 GiB is allocated on GPU 1; 70 GiB more does not fit 80 GiB
    add_pod(fake_api, "big", core=10, mem_mib=71680, created="2026-01-01T00:00:02Z")
    with pytest.raises(AllocationRefused, match="over-committed"):
        alloc.allocate(CORE, 10)


def test_only_allocated_unfinished_shares_count(fake_api: FakeNodeApi) -> None:
    add_pod(fake_api, "done", core=90)
    fake_api.get("done")["metadata"]["annotations"][c.ANNOTATION_GPU_ALLOCATED] = json.dumps(
        {CORE: "2026-01-01T00:00:00Z"}
    )
    fake_api.get("done")["status"] = {"phase": "Succeeded"}
    add_pod(fake_api, "waiting", core=95)  # assigned, not allocated yet: holds nothing
    add_pod(fake_api, "p", core=60, created="2026-01-02T00:00:00Z")
    assert make_allocator(fake_api).allocate(CORE, 60).envs[c.ENV_POD_NAME] == "p"


def test_an_allocated_share_counts_after_its_key_is_revoked(fake_api: FakeNodeApi) -> None:
    """Issue 24: a share this plugin allocated stays counted when its signature stops
    verifying (the key that signed it was removed from the ConfigMap): its containers still
    hold the GPU, so a new pod that would over-commit the GPU is refused."""
    add_pod(fake_api, "old", core=90, key=OTHER)
    fake_api.get("old")["metadata"]["annotations"][c.ANNOTATION_GPU_ALLOCATED] = json.dumps(
        {CORE: "2026-01-01T00:00:00Z"}
    )
    fake_api.get("old")["status"] = {"phase": "Running"}
    add_pod(fake_api, "p", core=60, created="2026-01-02T00:00:00Z")
    with pytest.raises(AllocationRefused, match=r"ml/old already hold 90% core"):
        make_allocator(fake_api).allocate(CORE, 60)


def test_allocate_reads_the_inventory_once_for_all_its_checks(fake_api: FakeNodeApi) -> None:
    # The assignment check and the capacity check must see the same GPUs: a GPU that leaves
    # the inventory between two reads once made the second check fail with a KeyError.
    add_pod(fake_api, "p1")
    answers = [GPUS, []]

    def inventory() -> list[GpuDevice]:
        return answers.pop(0) if answers else []

    alloc = Allocator(fake_api, NODE, AssignmentKey(fake_api, None), inventory, 256)  # type: ignore[arg-type]
    assert alloc.allocate(CORE, 40).pod == "p1"
    assert answers == [[]]  # one read for the whole Allocate


def test_an_earlier_key_still_verifies_after_a_rotation(
    fake_api: FakeNodeApi, tmp_path: Path
) -> None:
    """A new key signs; the earlier public key stays published, so a pod signed with it just
    before is still allocated; once an administrator removes it, such a pod is refused."""
    key_file = write_public_keys(tmp_path / "keys.pem", OTHER, KEY)
    fake_api.key = KeyRing(OTHER.verify.union(KEY.verify))
    add_pod(fake_api, "p")  # signed with KEY, now the earlier key
    alloc = Allocator(fake_api, NODE, AssignmentKey(fake_api, key_file), lambda: GPUS, 256)
    assert alloc.allocate(CORE, 40).pod == "p"
    write_public_keys(key_file, OTHER)
    fake_api.key = OTHER
    add_pod(fake_api, "q", core=30)
    with pytest.raises(AllocationRefused, match="invalid"):
        alloc.allocate(CORE, 30)
