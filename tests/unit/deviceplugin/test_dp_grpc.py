"""The plugin against a kubelet-side peer (tests/deviceplugin_peer.py) over real unix sockets:
registration, re-registration after a kubelet restart, health streaming, Allocate over gRPC,
a missing kubelet socket at start, and NVML being absent."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from dp_fakes import KEY, FakeNodeApi

from deviceplugin_peer import FakeKubelet, assignment_annotations, pod_manifest
from horus.api.inventory import decode_inventory, simulated_gpu_uuid
from horus.common import constants as c
from horus.deviceplugin.app import build
from horus.deviceplugin.manager import PluginManager
from horus.deviceplugin.settings import DevicePluginSettings
from horus.node.gpus import GpuDiscoveryError, SimulatedGpus, open_backend
from horus.node.gpus import discover_until_found as discover
from signing_keys import OTHER

NODE = "gpu-node-0007"
CORE, MEM = c.RESOURCE_GPU_CORE, c.RESOURCE_GPU_MEMORY


class Running:
    def __init__(self, manager: PluginManager, backend: SimulatedGpus) -> None:
        self.manager = manager
        self.backend = backend
        self.stop = threading.Event()
        self.thread = threading.Thread(target=manager.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


@pytest.fixture
def start_plugin(plugin_dir: Path, fake_api: FakeNodeApi) -> Iterator[object]:
    running: list[Running] = []

    def start(gpus: int = 2, memory_mib: int = 16384, **more: Any) -> Running:
        settings = DevicePluginSettings(
            node_name=NODE,
            plugin_dir=plugin_dir,
            backend="simulated",
            sim_gpu_count=gpus,
            sim_gpu_memory_mib=memory_mib,
            health_interval_s=0.1,
            socket_poll_s=0.05,
            **more,
        )
        backend = SimulatedGpus(NODE, gpus, "H100", memory_mib)
        manager = build(settings, backend, backend.discover(), fake_api)
        r = Running(manager, backend)
        running.append(r)
        return r

    yield start
    for r in running:
        r.close()


def test_registers_both_resources_and_streams_devices(
    plugin_dir: Path, start_plugin: object, fake_api: FakeNodeApi
) -> None:
    kubelet = FakeKubelet(plugin_dir).start()
    try:
        start_plugin()  # type: ignore[operator]
        assert kubelet.wait(lambda: set(kubelet.lists) == {CORE, MEM})
        regs = {r.resource_name: r for r in kubelet.registrations}
        assert regs[CORE].version == "v1beta1" and regs[CORE].endpoint == "horus-gpu-core.sock"
        assert regs[MEM].options.get_preferred_allocation_available
        assert len(kubelet.lists[CORE]) == 200  # 100 per GPU
        assert len(kubelet.lists[MEM]) == 2 * 16384 // 256
        assert set(kubelet.lists[CORE].values()) == {"Healthy"}
        assert all(len(i) <= 63 for i in kubelet.lists[MEM])
        # the node's inventory annotation and memory unit are published
        ann = fake_api.node_annotations[NODE]
        gpus = decode_inventory(ann[c.ANNOTATION_GPU_INVENTORY])
        assert [g.uuid for g in gpus] == [simulated_gpu_uuid(NODE, i) for i in range(2)]
        assert ann[c.ANNOTATION_GPU_MEMORY_UNIT] == "256"
    finally:
        kubelet.stop()


def test_reregisters_after_kubelet_restart(plugin_dir: Path, start_plugin: object) -> None:
    kubelet = FakeKubelet(plugin_dir).start()
    running = start_plugin()  # type: ignore[operator]
    assert kubelet.wait(lambda: running.manager.registrations == 1)
    kubelet.stop()  # kubelet.sock removed ...
    time.sleep(0.3)
    restarted = FakeKubelet(plugin_dir).start()  # ... and re-created
    try:
        assert restarted.wait(lambda: set(restarted.lists) == {CORE, MEM}, timeout=10)
        assert {r.resource_name for r in restarted.registrations} == {CORE, MEM}
        assert running.manager.registrations == 2
    finally:
        restarted.stop()


def test_reregisters_when_kubelet_deletes_our_sockets(
    plugin_dir: Path, start_plugin: object
) -> None:
    kubelet = FakeKubelet(plugin_dir).start()
    running = start_plugin()  # type: ignore[operator]
    assert kubelet.wait(lambda: running.manager.registrations == 1)
    kubelet.stop()
    for sock in plugin_dir.glob("horus-*.sock"):  # a starting kubelet empties the directory
        sock.unlink()
    restarted = FakeKubelet(plugin_dir).start()
    try:
        assert restarted.wait(lambda: set(restarted.lists) == {CORE, MEM}, timeout=10)
        assert (plugin_dir / "horus-gpu-core.sock").exists()
    finally:
        restarted.stop()


def test_health_transitions_stream_to_the_kubelet(
    plugin_dir: Path, start_plugin: object, fake_api: FakeNodeApi
) -> None:
    kubelet = FakeKubelet(plugin_dir).start()
    try:
        running = start_plugin()  # type: ignore[operator]
        assert kubelet.wait(lambda: set(kubelet.lists) == {CORE, MEM})
        sick = simulated_gpu_uuid(NODE, 1)
        running.backend.set_health(1, c.GPU_UNHEALTHY)

        def gpu1(resource: str, health: str) -> bool:
            ids = {i: h for i, h in kubelet.lists[resource].items() if i.startswith(sick)}
            return bool(ids) and set(ids.values()) == {health}

        assert kubelet.wait(lambda: gpu1(CORE, "Unhealthy") and gpu1(MEM, "Unhealthy"))
        others = {h for i, h in kubelet.lists[CORE].items() if not i.startswith(sick)}
        assert others == {"Healthy"}
        inv = decode_inventory(fake_api.node_annotations[NODE][c.ANNOTATION_GPU_INVENTORY])
        assert [g.health for g in inv] == ["Healthy", "Unhealthy"]
        running.backend.set_health(1, c.GPU_HEALTHY)
        assert kubelet.wait(lambda: gpu1(CORE, "Healthy"))
    finally:
        kubelet.stop()


def test_allocate_over_grpc(plugin_dir: Path, start_plugin: object, fake_api: FakeNodeApi) -> None:
    uuid = simulated_gpu_uuid(NODE, 1)
    ann = assignment_annotations(KEY, "ml", "good", NODE, uuid, 1, 25, 2048)
    fake_api.add(pod_manifest("ml", "good", NODE, 25, 8, ann))
    kubelet = FakeKubelet(plugin_dir).start()
    try:
        start_plugin()  # type: ignore[operator]
        assert kubelet.wait(lambda: set(kubelet.lists) == {CORE, MEM})
        # the preferred allocation keeps the IDs on the assigned GPU
        chosen = kubelet.preferred(CORE, list(kubelet.lists[CORE]), 25)
        assert len(chosen) == 25 and all(i.startswith(uuid) for i in chosen)
        response = kubelet.allocate(CORE, chosen)
        assert response.envs["CUDA_VISIBLE_DEVICES"] == uuid
        assert response.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
        assert response.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=2048M"
        assert response.mounts[0].host_path == c.MPS_PIPE_DIRECTORY_DEFAULT
        response = kubelet.allocate_n(MEM, 8)
        assert response.envs[c.ENV_POD_NAME] == "good"
        # a forged pod is refused with FAILED_PRECONDITION and a clear message
        ann = assignment_annotations(OTHER, "ml", "evil", NODE, uuid, 1, 30, 2048)
        fake_api.add(pod_manifest("ml", "evil", NODE, 30, 8, ann))
        with pytest.raises(grpc.RpcError) as info:
            kubelet.allocate_n(CORE, 30)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "invalid horus.io/gpu-assignment-signature" in info.value.details()
        assert fake_api.events[-1][:2] == ("evil", c.EVENT_REASON_ALLOCATE_REFUSED)
    finally:
        kubelet.stop()


def test_mps_clients_get_the_daemons_shm_as_dev_shm(
    plugin_dir: Path, start_plugin: object, fake_api: FakeNodeApi
) -> None:
    """With mps_shm_dir (the chart: <node.mps.root>/shm, the agent's /dev/shm), every MPS
    client gets that host directory as /dev/shm beside the pipe directory, as NVIDIA's
    device plugin mounts <mps root>/shm; with enforcement none neither is mounted."""
    pipe, shm = "/run/horus/mps/pipe", "/run/horus/mps/shm"
    uuid = simulated_gpu_uuid(NODE, 0)
    fake_api.add(
        pod_manifest(
            "ml",
            "mps",
            NODE,
            20,
            8,
            assignment_annotations(KEY, "ml", "mps", NODE, uuid, 0, 20, 2048),
        )
    )
    kubelet = FakeKubelet(plugin_dir).start()
    try:
        start_plugin(mps_pipe_dir=Path(pipe), mps_shm_dir=Path(shm))  # type: ignore[operator]
        assert kubelet.wait(lambda: set(kubelet.lists) == {CORE, MEM})
        for response in (kubelet.allocate_n(CORE, 20), kubelet.allocate_n(MEM, 8)):
            mounts = {(m.container_path, m.host_path, m.read_only) for m in response.mounts}
            assert mounts == {(pipe, pipe, False), ("/dev/shm", shm, False)}
            assert response.envs["CUDA_MPS_PIPE_DIRECTORY"] == pipe
    finally:
        kubelet.stop()


def test_no_mps_mounts_without_mps(
    plugin_dir: Path, start_plugin: object, fake_api: FakeNodeApi
) -> None:
    uuid = simulated_gpu_uuid(NODE, 0)
    ann = assignment_annotations(KEY, "ml", "plain", NODE, uuid, 0, 20, 2048)
    fake_api.add(pod_manifest("ml", "plain", NODE, 20, 8, ann))
    kubelet = FakeKubelet(plugin_dir).start()
    try:
        start_plugin(enforcement="none", mps_shm_dir=Path("/run/horus/mps/shm"))  # type: ignore[operator]
        assert kubelet.wait(lambda: set(kubelet.lists) == {CORE, MEM})
        response = kubelet.allocate_n(CORE, 20)
        assert list(response.mounts) == [] and "CUDA_MPS_PIPE_DIRECTORY" not in response.envs
    finally:
        kubelet.stop()


def _node_with_nvidia_gpus(count: str) -> dict[str, Any]:
    capacity = {"cpu": "8", c.RESOURCE_NVIDIA_GPU: count}
    return {"metadata": {"name": NODE, "uid": "uid-node"}, "status": {"capacity": capacity}}


def test_does_not_advertise_beside_another_gpu_plugin(
    plugin_dir: Path,
    start_plugin: object,
    fake_api: FakeNodeApi,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A node whose capacity lists nvidia.com/gpu (NVIDIA's plugin): the plugin keeps
    running but does not register, withdraws the inventory, says why once (log, Event on
    the Node); when the other plugin is gone it registers and publishes again."""
    fake_api.nodes[NODE] = _node_with_nvidia_gpus("2")
    fake_api.node_annotations[NODE] = {c.ANNOTATION_GPU_INVENTORY: "[stale]", "other": "x"}
    kubelet = FakeKubelet(plugin_dir).start()
    try:
        with caplog.at_level(logging.WARNING):
            running = start_plugin(node_check_interval_s=0.1)  # type: ignore[operator]
            time.sleep(1.0)  # ten checks, fifty looks at kubelet.sock
        assert running.thread.is_alive()
        assert kubelet.registrations == [] and running.manager.registrations == 0
        assert not list(plugin_dir.glob("horus-*.sock"))
        assert fake_api.node_annotations[NODE] == {"other": "x"}  # inventory withdrawn
        assert running.manager.guard.checks >= 5
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1, errors  # said once, not at every check
        for words in ("nvidia.com/gpu: 2", "does not advertise", "allow_other_gpu_plugin"):
            assert words in errors[0], errors[0]
        assert [e[:2] for e in fake_api.events] == [(NODE, c.EVENT_REASON_GPU_PLUGIN_CONFLICT)]
        assert fake_api.events[0][2] == errors[0]
        # NVIDIA's plugin removed: the kubelet drops its resource from the capacity
        fake_api.nodes[NODE] = _node_with_nvidia_gpus("0")
        assert kubelet.wait(lambda: set(kubelet.lists) == {CORE, MEM})
        assert kubelet.wait(
            lambda: c.ANNOTATION_GPU_INVENTORY in fake_api.node_annotations[NODE], timeout=5
        )
    finally:
        kubelet.stop()


def test_stops_advertising_when_another_gpu_plugin_appears(
    plugin_dir: Path, start_plugin: object, fake_api: FakeNodeApi
) -> None:
    kubelet = FakeKubelet(plugin_dir).start()
    try:
        running = start_plugin(node_check_interval_s=0.1)  # type: ignore[operator]
        assert kubelet.wait(lambda: set(kubelet.lists) == {CORE, MEM})
        assert c.ANNOTATION_GPU_INVENTORY in fake_api.node_annotations[NODE]
        fake_api.nodes[NODE] = _node_with_nvidia_gpus("8")
        assert kubelet.wait(lambda: not list(plugin_dir.glob("horus-*.sock")), timeout=5)
        assert c.ANNOTATION_GPU_INVENTORY not in fake_api.node_annotations[NODE]
        assert fake_api.events[-1][:2] == (NODE, c.EVENT_REASON_GPU_PLUGIN_CONFLICT)
        assert running.thread.is_alive()
    finally:
        kubelet.stop()


def test_allow_other_gpu_plugin_advertises_anyway(
    plugin_dir: Path, start_plugin: object, fake_api: FakeNodeApi
) -> None:
    fake_api.nodes[NODE] = _node_with_nvidia_gpus("2")
    kubelet = FakeKubelet(plugin_dir).start()
    try:
        running = start_plugin(allow_other_gpu_plugin=True, node_check_interval_s=0.1)  # type: ignore[operator]
        assert kubelet.wait(lambda: set(kubelet.lists) == {CORE, MEM})
        assert running.manager.guard.checks == 0 and fake_api.events == []
    finally:
        kubelet.stop()


def test_an_unreadable_node_does_not_stop_the_plugin(
    plugin_dir: Path,
    start_plugin: object,
    fake_api: FakeNodeApi,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_api.node_error = ConnectionRefusedError("apiserver down")
    kubelet = FakeKubelet(plugin_dir).start()
    try:
        with caplog.at_level(logging.WARNING):
            running = start_plugin(node_check_interval_s=0.1)  # type: ignore[operator]
            assert kubelet.wait(lambda: set(kubelet.lists) == {CORE, MEM})
            assert kubelet.wait(lambda: running.manager.guard.checks >= 3)
        said = [r.getMessage() for r in caplog.records if "cannot read node" in r.getMessage()]
        assert len(said) == 1 and "apiserver down" in said[0]
    finally:
        kubelet.stop()


def test_kubelet_socket_missing_at_start_waits_then_registers(
    plugin_dir: Path, start_plugin: object, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    running = start_plugin()  # type: ignore[operator]
    time.sleep(0.5)
    assert running.thread.is_alive()
    assert "kubelet socket" in caplog.text and "not found" in caplog.text
    assert caplog.text.count("not found") == 1  # said once, not every poll
    kubelet = FakeKubelet(plugin_dir).start()
    try:
        assert kubelet.wait(lambda: set(kubelet.lists) == {CORE, MEM})
    finally:
        kubelet.stop()


def test_registration_refused_is_retried(plugin_dir: Path, start_plugin: object) -> None:
    kubelet = FakeKubelet(plugin_dir, accept=False).start()
    try:
        running = start_plugin()  # type: ignore[operator]
        time.sleep(0.5)
        assert running.thread.is_alive() and running.manager.registrations == 0
        kubelet.accept = True
        # Retries back off exponentially up to 30 s (server.py), so wait past that cap.
        assert kubelet.wait(lambda: len(kubelet.registrations) == 2, timeout=35)
    finally:
        kubelet.stop()


def test_nvml_absent_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    with pytest.raises(GpuDiscoveryError, match="nvidia-ml-py"):
        open_backend("nvml", NODE)


def _has_gpu() -> bool:
    try:
        open_backend("nvml", NODE).close()
        return True
    except GpuDiscoveryError:
        return False


def test_nvml_without_driver_is_a_clear_error() -> None:
    if _has_gpu():
        pytest.skip("this machine has a working NVIDIA driver")
    with pytest.raises(GpuDiscoveryError, match="NVIDIA driver installed"):
        open_backend("nvml", NODE)


def test_discovery_failure_waits_instead_of_crashing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    settings = DevicePluginSettings(node_name=NODE, backend="nvml", retry_interval_s=0.05)
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    assert discover(settings, stop) is None
    assert len([r for r in caplog.records if "nvidia-ml-py" in r.message]) == 1  # not per retry
    strict = DevicePluginSettings(node_name=NODE, backend="nvml", fail_on_init_error=True)
    with pytest.raises(GpuDiscoveryError):
        discover(strict, threading.Event())


def test_cli_without_nvml_keeps_running(plugin_dir: Path) -> None:
    """`python -m horus.deviceplugin` on a GPU-less node: one clear message, no exit."""
    code = (
        "import sys; sys.modules['pynvml'] = None; "
        "from horus.cli import main; "
        f"main(['deviceplugin', 'run', '--node-name', 'n1', '--plugin-dir', '{plugin_dir}'])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        time.sleep(3)
        assert proc.poll() is None, proc.communicate()[1]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert "nvidia-ml-py" in err and "retrying every 30s" in err
    assert "Traceback" not in err


def test_cli_needs_a_node_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.delenv("HORUS_DEVICEPLUGIN_NODE_NAME", raising=False)
    proc = subprocess.run(
        [sys.executable, "-m", "horus.deviceplugin", "--backend", "simulated"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "node name is unknown" in proc.stderr


def test_settings_precedence(tmp_path: Path) -> None:
    from horus.deviceplugin.settings import load

    cfg = tmp_path / "c.yaml"
    cfg.write_text("deviceplugin:\n  memory_unit_mib: 128\n  backend: simulated\n")
    s = load(cli={}, env={"NODE_NAME": "n1"}, config_file=cfg)
    assert (s.memory_unit_mib, s.backend, s.node_name) == (128, "simulated", "n1")
    env = {"HORUS_DEVICEPLUGIN_MEMORY_UNIT_MIB": "512", c.ASSIGNMENT_KEY_FILE_ENV: "/k"}
    s = load(cli={}, env=env, config_file=cfg)
    assert s.memory_unit_mib == 512 and s.assignment_key_file == Path("/k")
    s = load(cli={"memory_unit_mib": "64"}, env=env, config_file=cfg)
    assert s.memory_unit_mib == 64
    from horus.common.errors import ConfigError

    with pytest.raises(ConfigError, match="memory_unit_mib"):
        load(cli={"memory_unit_mib": "0"}, env={})
    cfg.write_text("deviceplugin:\n  memory_unit: 128\n")
    with pytest.raises(ConfigError, match="unknown key"):
        load(cli={}, env={}, config_file=cfg)


def test_mps_and_coexistence_settings(tmp_path: Path) -> None:
    from horus.common.errors import ConfigError
    from horus.deviceplugin.settings import load

    s = load(cli={}, env={})
    assert s.mps_shm_dir is None and s.allow_other_gpu_plugin is False
    assert s.node_check_interval_s == 60.0
    cfg = tmp_path / "c.yaml"
    cfg.write_text("deviceplugin:\n  mps_shm_dir: /run/horus/mps/shm\n")
    env = {"HORUS_DEVICEPLUGIN_ALLOW_OTHER_GPU_PLUGIN": "true"}
    s = load(cli={}, env=env, config_file=cfg)
    assert s.mps_shm_dir == Path("/run/horus/mps/shm") and s.allow_other_gpu_plugin
    assert load(cli={"mps_shm_dir": ""}, env={}, config_file=cfg).mps_shm_dir is None
    with pytest.raises(ConfigError, match=r"mps_shm_dir must be an absolute host path.*'shm'"):
        load(cli={"mps_shm_dir": "shm"}, env={})
    with pytest.raises(ConfigError, match="mps_pipe_dir must be an absolute"):
        load(cli={"mps_pipe_dir": "pipes"}, env={})
    with pytest.raises(ConfigError, match="node_check_interval_s"):
        load(cli={"node_check_interval_s": "0"}, env={})
    with pytest.raises(ConfigError, match=r"--allow-other-gpu-plugin: .perhaps. is not a boolean"):
        load(cli={"allow_other_gpu_plugin": "perhaps"}, env={})
