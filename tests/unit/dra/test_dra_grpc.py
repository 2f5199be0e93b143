"""The DRA driver over real unix sockets, talked to as the kubelet does (tests/dra_peer.py):
registration, Prepare/Unprepare, idempotence, restarts, bad input, the ResourceSlice."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dra_fakes import FakeDraApi

from dra_peer import POD_UID, FakeKubelet, allocated_claim, result
from horus.api.inventory import simulated_gpu_uuid
from horus.common import constants as c
from horus.dra.app import DraPlugin
from horus.dra.settings import DraSettings, load
from horus.kube.errors import ApiError
from horus.node.gpus import discover_until_found as discover
from horus.progress.mount import CONTAINER_DIR
from horus.progress.report import ENV_DIR

NODE = "gpu-node-0003"


@dataclass
class Running:
    settings: DraSettings
    plugin: DraPlugin
    stop: threading.Event
    thread: threading.Thread

    def halt(self) -> None:
        self.stop.set()
        self.thread.join(10)


def settings_in(root: Path, **kw: object) -> DraSettings:
    base: dict[str, object] = {
        "node_name": NODE,
        "registry_dir": root / "reg",
        "plugin_dir": root / "plug",
        "cdi_dir": root / "cdi",
        "backend": "simulated",
        "sim_gpu_count": 2,
        "sim_gpu_memory_mib": 81559,
        "health_interval_s": 0.1,
        "socket_poll_s": 0.05,
        "progress_root": root / "progress",
    }
    return DraSettings(**{**base, **kw})  # type: ignore[arg-type]


def start(settings: DraSettings, api: FakeDraApi) -> Running:
    stop = threading.Event()
    found = discover(settings, stop)
    assert found is not None
    plugin = DraPlugin(settings, found[0], found[1], api)
    thread = threading.Thread(target=plugin.run, args=(stop,), daemon=True)
    thread.start()
    # the start-up claim sweep done, so its apiserver reads never land inside a test's count
    assert wait(lambda: plugin.sweeper.counts.sweeps >= 1)
    return Running(settings, plugin, stop, thread)


def wait(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def api() -> FakeDraApi:
    api = FakeDraApi({NODE: "node-uid"})
    api.add_claim(
        allocated_claim("ml", "c1", "uid-1", NODE, [result(NODE, 1, "45", "40000Mi", "s-1")])
    )
    return api


@pytest.fixture
def running(short_dir: Path, api: FakeDraApi) -> Iterator[Running]:
    r = start(settings_in(short_dir), api)
    yield r
    r.halt()


def env_of(spec_file: Path) -> dict[str, str]:
    spec = json.loads(spec_file.read_text())
    return dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])


def test_registration_as_the_kubelet_sees_it(running: Running) -> None:
    kubelet = FakeKubelet(running.settings.registry_dir)
    info = kubelet.register()
    assert (info.type, info.name) == ("DRAPlugin", "gpu.horus.io")
    assert list(info.supported_versions) == ["v1.DRAPlugin"]
    assert info.endpoint == str(running.settings.plugin_dir / "dra.sock")
    assert kubelet.wait_socket().name == "gpu.horus.io-reg.sock"
    assert running.plugin.servers.registration.registered.is_set()
    kubelet.close()


def test_prepare_writes_the_cdi_spec_and_returns_its_id(running: Running, api: FakeDraApi) -> None:
    kubelet = FakeKubelet(running.settings.registry_dir)
    kubelet.register()
    out = kubelet.prepare(("ml", "c1", "uid-1")).claims["uid-1"]
    assert out.error == ""
    (device,) = out.devices
    assert (device.pool_name, device.device_name, device.share_id) == (NODE, "gpu-1", "s-1")
    assert list(device.request_names) == ["gpu"]
    assert list(device.cdi_device_ids) == ["horus.io/gpu=uid-1"]
    env = env_of(running.settings.cdi_dir / "horus.io-gpu_uid-1.json")
    assert env[c.ENV_MPS_ACTIVE_THREAD_PERCENTAGE] == "45"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=40000M"
    assert env[c.ENV_GPU_UUID] == simulated_gpu_uuid(NODE, 1)
    assert env[c.ENV_GPU_INDEX] == "1"
    assert (env[c.ENV_CLAIM_NAME], env[c.ENV_POD_NAME]) == ("c1", "p1")
    # the reserving pod's own progress directory, as the device plugin mounts it (issue 26)
    spec = json.loads((running.settings.cdi_dir / "horus.io-gpu_uid-1.json").read_text())
    mounts = {
        m["containerPath"]: m["hostPath"] for m in spec["devices"][0]["containerEdits"]["mounts"]
    }
    progress = running.settings.progress_root / POD_UID  # type: ignore[operator]
    assert mounts[CONTAINER_DIR] == str(progress) and progress.is_dir()
    assert env[ENV_DIR] == CONTAINER_DIR
    # idempotent: same answer, from the checkpoint, without reading the claim again
    reads = api.claim_reads
    again = kubelet.prepare(("ml", "c1", "uid-1")).claims["uid-1"]
    assert again == out and api.claim_reads == reads
    # unprepare removes spec and checkpoint entry; twice is fine
    assert kubelet.unprepare(("ml", "c1", "uid-1")).claims["uid-1"].error == ""
    assert not (running.settings.cdi_dir / "horus.io-gpu_uid-1.json").exists()
    assert running.plugin.driver.checkpoint.uids() == []
    assert kubelet.unprepare(("ml", "c1", "uid-1")).claims["uid-1"].error == ""
    kubelet.close()


def test_bad_claims_get_their_own_error_and_the_good_one_is_prepared(
    running: Running, api: FakeDraApi
) -> None:
    api.add_claim(allocated_claim("ml", "other-node", "uid-3", NODE, [result("gpu-node-0099", 0)]))
    kubelet = FakeKubelet(running.settings.registry_dir)
    kubelet.register()
    out = kubelet.prepare(
        ("ml", "c1", "uid-1"),
        ("ml", "missing", "uid-2"),
        ("ml", "other-node", "uid-3"),
        ("ml", "c1", "uid-WRONG"),
        ("ml", "c1", "../../x"),
        ("", "", ""),
    ).claims
    assert out["uid-1"].error == "" and len(out["uid-1"].devices) == 1
    assert "does not exist" in out["uid-2"].error
    assert "another node's GPU" in out["uid-3"].error
    assert "deleted and made again" in out["uid-WRONG"].error
    assert "not a UID" in out["../../x"].error
    assert "namespace" in out[""].error
    assert not [p for p in running.settings.cdi_dir.iterdir() if "uid-1" not in p.name]
    # the apiserver down: that claim's error, the driver keeps serving
    api.fail = ApiError(0, "connection refused")
    api.add_claim(allocated_claim("ml", "c4", "uid-4", NODE, [result(NODE, 0)]))
    assert "connection refused" in kubelet.prepare(("ml", "c4", "uid-4")).claims["uid-4"].error
    api.fail = None
    assert kubelet.prepare(("ml", "c4", "uid-4")).claims["uid-4"].error == ""
    kubelet.close()


def test_prepared_claims_survive_a_plugin_restart(short_dir: Path, api: FakeDraApi) -> None:
    first = start(settings_in(short_dir), api)
    kubelet = FakeKubelet(first.settings.registry_dir)
    kubelet.register()
    before = kubelet.prepare(("ml", "c1", "uid-1")).claims["uid-1"]
    first.halt()
    kubelet.close()
    assert not first.settings.registration_socket.exists()
    # the apiserver is down now: only the checkpoint can answer (and the stale-claim sweep,
    # with no answer to trust, keeps the claim)
    api.fail = ApiError(0, "connection refused")
    reads = api.claim_reads
    second = start(settings_in(short_dir), api)
    try:
        kubelet = FakeKubelet(second.settings.registry_dir)
        kubelet.register()
        assert kubelet.prepare(("ml", "c1", "uid-1")).claims["uid-1"] == before
        assert api.claim_reads == reads
        assert kubelet.unprepare(("ml", "c1", "uid-1")).claims["uid-1"].error == ""
        assert list(second.settings.cdi_dir.iterdir()) == []
        kubelet.close()
    finally:
        second.halt()


def test_a_removed_spec_is_written_again_from_the_claim(running: Running) -> None:
    kubelet = FakeKubelet(running.settings.registry_dir)
    kubelet.register()
    kubelet.prepare(("ml", "c1", "uid-1"))
    spec = running.settings.cdi_dir / "horus.io-gpu_uid-1.json"
    spec.unlink()  # /var/run is a tmpfs: a reboot empties it, the kubelet prepares again
    assert kubelet.prepare(("ml", "c1", "uid-1")).claims["uid-1"].error == ""
    assert spec.is_file()
    kubelet.close()


def test_removed_sockets_are_served_again(running: Running) -> None:
    kubelet = FakeKubelet(running.settings.registry_dir)
    kubelet.register()
    running.settings.registration_socket.unlink()
    assert wait(running.settings.registration_socket.exists)
    kubelet.register()
    assert kubelet.prepare(("ml", "c1", "uid-1")).claims["uid-1"].error == ""
    kubelet.close()


def test_the_slice_follows_gpu_health(short_dir: Path, api: FakeDraApi) -> None:
    health = short_dir / "health.json"
    r = start(settings_in(short_dir, sim_health_file=health), api)
    try:
        assert wait(lambda: len(api.slices) == 1)
        devices = next(iter(api.slices.values()))["spec"]["devices"]
        assert [d["name"] for d in devices] == ["gpu-0", "gpu-1"]
        assert devices[1]["attributes"]["uuid"] == {"string": simulated_gpu_uuid(NODE, 1)}
        health.write_text(json.dumps({"1": "Unhealthy"}))

        def tainted() -> bool:
            (s,) = api.slices.values()
            return "taints" in s["spec"]["devices"][1]

        assert wait(tainted)
        # and a claim on the sick GPU is refused at Prepare
        kubelet = FakeKubelet(r.settings.registry_dir)
        kubelet.register()
        assert "Unhealthy" in kubelet.prepare(("ml", "c1", "uid-1")).claims["uid-1"].error
        kubelet.close()
    finally:
        r.halt()


def test_settings_precedence_cli_env_file(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("dra:\n  cdi_dir: /from/file\n  sim_gpu_count: 3\n  node_name: file-node\n")
    s = load(
        cli={"cdi_dir": "/from/cli"},
        env={"HORUS_DRA_SIM_GPU_COUNT": "5", "NODE_NAME": "env-node"},
        config_file=config,
    )
    assert (s.cdi_dir, s.sim_gpu_count, s.node_name) == (Path("/from/cli"), 5, "file-node")
    assert load(env={"NODE_NAME": "env-node"}).node_name == "env-node"
    assert s.registration_socket == Path("/var/lib/kubelet/plugins_registry/gpu.horus.io-reg.sock")
    assert s.dra_socket == Path("/var/lib/kubelet/plugins/gpu.horus.io/dra.sock")


def test_bad_settings_are_refused(tmp_path: Path) -> None:
    from horus.common.errors import ConfigError

    with pytest.raises(ConfigError, match="absolute"):
        DraSettings(cdi_dir=Path("relative"))
    with pytest.raises(ConfigError, match="longer than"):
        DraSettings(plugin_dir=Path("/" + "x" * 120))


def test_cli_without_a_node_name_says_so() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "horus", "dra", "run"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert proc.returncode == 2
    assert "node name is unknown" in proc.stderr


def test_malformed_calls_are_refused_and_the_driver_keeps_serving(running: Running) -> None:
    import grpc

    from horus.dra.server import MAX_CLAIMS

    kubelet = FakeKubelet(running.settings.registry_dir)
    kubelet.register()
    too_many = [("ml", f"c{i}", f"u{i}") for i in range(MAX_CLAIMS + 1)]
    with pytest.raises(grpc.RpcError) as err:
        kubelet.prepare(*too_many)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert kubelet.channel is not None
    garbage = kubelet.channel.unary_unary(
        "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.RpcError):
        garbage(b"\xff\xff\xff\xff not a protobuf", timeout=5)
    huge = ("ml", "c1", "u" * (5 << 20))  # over the 4 MiB message bound
    with pytest.raises(grpc.RpcError) as err:
        kubelet.prepare(huge)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert kubelet.prepare(("ml", "c1", "uid-1")).claims["uid-1"].error == ""
    kubelet.close()
