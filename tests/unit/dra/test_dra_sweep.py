"""The stale-claim sweep (horus.dra.sweep): a checkpointed claim the apiserver no longer has
(404, or another UID under its name) is unprepared as NodeUnprepareResources would; an
apiserver that gives no answer to trust leaves every entry; one bad entry never stops the
sweep; and the running driver sweeps once as it starts, then on its timer."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dra_fakes import FakeDraApi

from dra_peer import FakeKubelet, allocated_claim, result
from horus.api.inventory import GpuDevice
from horus.dra import cdi
from horus.dra.app import DraPlugin
from horus.dra.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from horus.dra.driver import Driver
from horus.dra.settings import DraSettings
from horus.dra.sweep import ClaimSweeper
from horus.kube.errors import ApiError
from horus.node.claim_checks import ClaimRef
from horus.node.gpus import discover_until_found
from horus.node.grant import GrantPolicy

NODE = "gpu-node-0007"
GPUS = [
    GpuDevice(index=0, uuid="GPU-aaaa", model="H100", memory_mib=81559),
    GpuDevice(index=1, uuid="GPU-bbbb", model="H100", memory_mib=81559),
]


class RecordingApi(FakeDraApi):
    """The fake apiserver, remembering which claims were asked for."""

    def __init__(self) -> None:
        super().__init__({NODE: "node-uid"})
        self.asked: list[tuple[str, str]] = []

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.asked.append((namespace, name))
        return super().get_claim(namespace, name)


def claim(name: str, uid: str, gpu: int = 0) -> dict[str, Any]:
    return allocated_claim("ml", name, uid, NODE, [result(NODE, gpu, "20", "2048Mi", name)])


class Node:
    """A driver with prepared claims: real checkpoint file, real CDI specs."""

    def __init__(self, root: Path, api: RecordingApi) -> None:
        self.root = root
        self.api = api
        self.driver = Driver(
            api,
            GrantPolicy(NODE),
            lambda: GPUS,
            root / "cdi",
            Checkpoint(root / "checkpoint.json"),
        )
        self.sweeper = ClaimSweeper(self.driver, api, 600.0)

    def prepare(self, name: str, uid: str) -> None:
        self.api.add_claim(claim(name, uid))
        self.driver.prepare(ClaimRef("ml", name, uid))
        assert self.spec(uid).is_file()

    def spec(self, uid: str) -> Path:
        return self.root / "cdi" / cdi.spec_file_name(uid)

    def on_disk(self) -> list[str]:
        """The checkpoint as the next driver start reads it."""
        return Checkpoint(self.root / "checkpoint.json").uids()


@pytest.fixture
def api() -> RecordingApi:
    return RecordingApi()


@pytest.fixture
def node(tmp_path: Path, api: RecordingApi) -> Node:
    return Node(tmp_path, api)


def test_a_claim_gone_from_the_apiserver_is_unprepared_and_one_still_there_is_kept(
    node: Node, api: RecordingApi
) -> None:
    node.prepare("c1", "uid-1")
    node.prepare("c2", "uid-2")
    del api.claims[("ml", "c1")]  # deleted while nobody told the driver
    out = node.sweeper.sweep()
    assert (out.unprepared, out.kept, out.left) == (["uid-1"], ["uid-2"], [])
    assert not node.spec("uid-1").exists() and node.spec("uid-2").is_file()
    assert node.driver.checkpoint.uids() == node.on_disk() == ["uid-2"]
    assert (node.sweeper.counts.sweeps, node.sweeper.counts.unprepared) == (1, 1)
    # the kubelet's own late Unprepare of the swept claim is still a success (idempotent)
    node.driver.unprepare(ClaimRef("ml", "c1", "uid-1"))
    again = node.sweeper.sweep()
    assert (again.unprepared, again.kept) == ([], ["uid-2"])


def test_a_claim_made_again_under_its_name_is_unprepared(node: Node, api: RecordingApi) -> None:
    node.prepare("c1", "uid-1")
    api.add_claim(claim("c1", "uid-1-new"))  # deleted and made again: same name, new UID
    out = node.sweeper.sweep()
    assert out.unprepared == ["uid-1"]
    assert not node.spec("uid-1").exists()
    assert node.on_disk() == []


@pytest.mark.parametrize(
    "trouble",
    [
        ApiError(0, "connection refused"),
        ApiError(403, "forbidden"),
        ApiError(500, "etcdserver: request timed out"),
        ApiError(429, "too many requests"),
        {"metadata": {"namespace": "ml", "name": "c1"}},  # an answer without a uid
        {"metadata": "garbage"},
    ],
)
def test_no_answer_to_trust_keeps_the_entry(node: Node, api: RecordingApi, trouble: Any) -> None:
    node.prepare("c1", "uid-1")
    if isinstance(trouble, ApiError):
        api.fail = trouble
    else:
        api.claims[("ml", "c1")] = trouble
    out = node.sweeper.sweep()
    assert (out.unprepared, out.kept, out.left) == ([], [], ["uid-1"])
    assert node.spec("uid-1").is_file() and node.on_disk() == ["uid-1"]
    assert node.sweeper.counts.left == 1
    # once the apiserver answers that the claim is gone, the next sweep unprepares it
    api.fail = None
    del api.claims[("ml", "c1")]
    assert node.sweeper.sweep().unprepared == ["uid-1"]
    assert node.on_disk() == []


def test_one_bad_entry_never_stops_the_sweep(node: Node, api: RecordingApi) -> None:
    # uid-0: a hand-edited entry whose namespace is no namespace name (it would be a path in
    # the GET's URL): never sent to the apiserver, never unprepared
    device = PreparedDevice(("gpu",), NODE, "gpu-0", ("horus.io/gpu=uid-0",), "s")
    node.driver.checkpoint.put(PreparedClaim("../../secrets", "x", "uid-0", (device,)))
    # uid-1: gone from the apiserver, but its spec cannot be removed (a folder stands there)
    node.prepare("c1", "uid-1")
    node.spec("uid-1").unlink()
    node.spec("uid-1").mkdir()
    (node.spec("uid-1") / "keep").write_text("x")
    del api.claims[("ml", "c1")]
    # uid-2: gone from the apiserver, unprepared although the two before it failed
    node.prepare("c2", "uid-2")
    del api.claims[("ml", "c2")]
    node.prepare("c3", "uid-3")
    api.asked.clear()
    out = node.sweeper.sweep()
    assert (out.unprepared, out.kept, out.left) == (["uid-2"], ["uid-3"], ["uid-0", "uid-1"])
    assert not node.spec("uid-2").exists()
    assert node.on_disk() == ["uid-0", "uid-1", "uid-3"]  # uid-1 is tried again next sweep
    assert ("../../secrets", "x") not in api.asked
    assert api.asked == [("ml", "c1"), ("ml", "c2"), ("ml", "c3")]


def test_a_sweep_stops_between_claims_when_told(node: Node, api: RecordingApi) -> None:
    node.prepare("c1", "uid-1")
    node.prepare("c2", "uid-2")
    api.asked.clear()
    stop = threading.Event()
    stop.set()
    out = node.sweeper.sweep(stop)
    assert (out.unprepared, out.kept, out.left) == ([], [], [])
    assert api.asked == []


def wait(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def run_plugin(
    root: Path, api: FakeDraApi, interval_s: float
) -> tuple[DraPlugin, threading.Event, threading.Thread]:
    settings = DraSettings(
        node_name=NODE,
        registry_dir=root / "reg",
        plugin_dir=root / "plug",
        cdi_dir=root / "cdi",
        backend="simulated",
        sim_gpu_count=1,
        socket_poll_s=0.05,
        progress_root=None,
        publish_slices=False,
        claim_sweep_interval_s=interval_s,
    )
    stop = threading.Event()
    found = discover_until_found(settings, stop)
    assert found is not None
    plugin = DraPlugin(settings, found[0], found[1], api)
    thread = threading.Thread(target=plugin.run, args=(stop,), daemon=True)
    thread.start()
    return plugin, stop, thread


def test_the_driver_sweeps_as_it_starts_and_then_on_its_timer(
    short_dir: Path, api: RecordingApi
) -> None:
    api.add_claim(claim("c1", "uid-1"))
    plugin, stop, thread = run_plugin(short_dir, api, 3600.0)
    kubelet = FakeKubelet(short_dir / "reg")
    kubelet.register()
    assert kubelet.prepare(("ml", "c1", "uid-1")).claims["uid-1"].error == ""
    kubelet.close()
    stop.set()
    thread.join(10)
    spec = short_dir / "cdi" / cdi.spec_file_name("uid-1")
    assert spec.is_file()
    # deleted while the driver was down: the first sweep of the next start unprepares it,
    # long before the hour the timer would take
    del api.claims[("ml", "c1")]
    plugin, stop, thread = run_plugin(short_dir, api, 3600.0)
    try:
        assert wait(lambda: not spec.exists() and plugin.driver.checkpoint.uids() == [])
        assert plugin.sweeper.counts.unprepared == 1
    finally:
        stop.set()
        thread.join(10)
    # and while it runs, the timer's sweeps find a claim deleted later
    plugin, stop, thread = run_plugin(short_dir, api, 0.1)
    try:
        api.add_claim(claim("c2", "uid-2"))
        plugin.driver.prepare(ClaimRef("ml", "c2", "uid-2"))
        assert plugin.driver.checkpoint.uids() == ["uid-2"]
        sweeps = plugin.sweeper.counts.sweeps
        del api.claims[("ml", "c2")]
        assert wait(lambda: plugin.driver.checkpoint.uids() == [])
        assert plugin.sweeper.counts.sweeps > sweeps
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    assert not [t for t in threading.enumerate() if t.name == "claim-sweep"]


def test_the_sweep_interval_is_a_validated_setting() -> None:
    from horus.common.errors import ConfigError
    from horus.dra.settings import load

    assert DraSettings().claim_sweep_interval_s == 600.0
    assert load(env={"HORUS_DRA_CLAIM_SWEEP_INTERVAL_S": "30"}).claim_sweep_interval_s == 30.0
    for bad in (0.0, -1.0, 10 * 24 * 3600.0):
        with pytest.raises(ConfigError, match="claim_sweep_interval_s"):
            DraSettings(claim_sweep_interval_s=bad)
