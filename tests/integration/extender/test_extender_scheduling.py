"""The real kube-scheduler, configured with the shipped extender snippet, places plain Pods
where the Horus extender prefers, with a valid signed assignment, and refuses what does not
fit — the pod stays Pending with the extender's reason in its PodScheduled condition."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from extcluster import ExtenderCluster

from horus.api.assignment import decode_assignment, decode_predicted
from horus.api.signing import SigningKey, VerifyKeys
from horus.common import constants as c

ROOT_PROFILES = Path(__file__).resolve().parents[3] / "examples" / "profiles"


def _pod(name: str, core: int = 40, memory: int = 10000, profile: bool = True) -> dict[str, Any]:
    ann = {}
    if profile:
        ann[c.ANNOTATION_GRAPH_PROFILE] = (ROOT_PROFILES / "resnet50-bs64.yaml").read_text()
    res = {c.RESOURCE_GPU_CORE: str(core), c.RESOURCE_GPU_MEMORY: str(memory)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": ann},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": res, "limits": res},
                }
            ],
            "tolerations": [{"operator": "Exists"}],
        },
    }


def _raw_pod(ec: ExtenderCluster, name: str) -> dict[str, Any]:
    resp = ec.core.read_namespaced_pod(name, "default", _preload_content=False)
    return dict(json.loads(resp.data))


def _bound(ec: ExtenderCluster, name: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        pod = _raw_pod(ec, name)
        return pod if pod["spec"].get("nodeName") else None

    return dict(ec.wait_for(f"pod {name} bound", check))


def _unschedulable_message(ec: ExtenderCluster, name: str) -> str:
    def check() -> str | None:
        pod = _raw_pod(ec, name)
        assert not pod["spec"].get("nodeName"), f"{name} was bound to {pod['spec']['nodeName']}"
        for cond in pod.get("status", {}).get("conditions") or []:
            if cond["type"] == "PodScheduled" and cond["status"] == "False":
                return str(cond.get("message") or "") or None
        return None

    return str(ec.wait_for(f"pod {name} marked unschedulable", check))


def _keys(ec: ExtenderCluster) -> VerifyKeys:
    """The public half of the signing key the extender made (Secret horus-signing-key)."""
    secret = ec.core.read_namespaced_secret(c.SIGNING_KEY_SECRET, c.HORUS_NAMESPACE)
    pem = base64.b64decode(secret.data[c.SIGNING_KEY_SECRET_ENTRY])
    return SigningKey.from_pem(pem, "test").public


def _check_assignment(ec: ExtenderCluster, pod: dict[str, Any]) -> Any:
    ann = pod["metadata"]["annotations"]
    text = ann[c.ANNOTATION_GPU_ASSIGNMENT]
    a = decode_assignment(text, "test")
    assert a.node == pod["spec"]["nodeName"]
    # bound to this pod's UID; a plain pod has no DLJob (job UID "")
    meta = pod["metadata"]
    signature = ann[c.ANNOTATION_ASSIGNMENT_SIGNATURE]
    keys = _keys(ec)
    assert keys.verify_assignment("default", meta["name"], meta["uid"], "", text, signature) == 0
    assert keys.verify_assignment("default", meta["name"], "other", "", text, signature) is None
    predicted = decode_predicted(ann[c.ANNOTATION_PREDICTED], "test")
    assert predicted.util_mean > 0
    # the shipped pair head learned on K80/P100/V100 pairs: on these H100s it is extrapolating
    assert predicted.pair_low_confidence
    return a


def test_pods_go_where_the_extender_prefers(ext_cluster: ExtenderCluster) -> None:
    ec = ext_cluster
    ec.core.create_namespaced_pod("default", _pod("first"))
    first = _bound(ec, "first")
    a1 = _check_assignment(ec, first)
    assert (a1.core_percent, a1.memory_mib, a1.gpu_index) == (40, 10000, 0)

    # The first pod's GPU is now shared-only; the extender scores the idle GPU higher ...
    second_pod = _pod("second")
    second_pod["metadata"]["uid"] = "probe"
    verdicts = ec.server.extender.evaluate(second_pod, ec.nodes)
    scores = {n: v.score for n, v in verdicts.items()}
    other = next(n for n in ec.nodes if n != a1.node)
    assert scores[other] == 10 and scores[a1.node] < 10, scores

    # ... and the real scheduler follows it.
    ec.core.create_namespaced_pod("default", _pod("second"))
    second = _bound(ec, "second")
    a2 = _check_assignment(ec, second)
    if a2.node != other:  # say everything that could explain it
        events = ec.core.list_namespaced_event(
            "default", field_selector="involvedObject.name=second"
        ).items
        log = (Path(ec.local.directory) / "logs" / "kube-scheduler.log").read_text()[-4000:]
        raise AssertionError(
            f"second landed on {a2.node}, not {other}; extender scores before: {scores}; "
            f"events: {[(e.reason, e.message) for e in events]}; scheduler log tail:\n{log}"
        )
    assert a2.gpu_uuid != a1.gpu_uuid

    # kwok runs what was bound
    ec.wait_for(
        "pods Running",
        lambda: all(
            _raw_pod(ec, n)["status"].get("phase") == "Running" for n in ("first", "second")
        ),
    )


def _ensure_bound(ec: ExtenderCluster, name: str) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        ec.core.create_namespaced_pod("default", _pod(name))
    except ApiException as exc:
        assert exc.status == 409  # made by the test before
    _bound(ec, name)


def test_what_does_not_fit_stays_pending_with_the_reason(ext_cluster: ExtenderCluster) -> None:
    ec = ext_cluster
    for name in ("first", "second"):  # 10000 MiB on each of the two GPUs (one per node)
        _ensure_bound(ec, name)
    ec.core.create_namespaced_pod("default", _pod("huge", memory=200000))
    msg = _unschedulable_message(ec, "huge")
    assert "horus: needs 195.3 GiB per GPU but the largest GPU has 80.0 GiB" in msg, msg

    ec.core.create_namespaced_pod("default", _pod("noprofile", profile=False))
    msg = _unschedulable_message(ec, "noprofile")
    assert "no horus.io/graph-profile annotation" in msg, msg

    # Would fit an idle GPU, but every GPU already holds 10000 MiB of another pod.
    ec.core.create_namespaced_pod("default", _pod("crowded", core=40, memory=75000))
    msg = _unschedulable_message(ec, "crowded")
    assert "horus: no GPU with 73.2 GiB free" in msg, msg

    # The same reason reaches the pod's events (kubectl describe).
    events = ec.core.list_namespaced_event(
        "default", field_selector="involvedObject.name=crowded,reason=FailedScheduling"
    ).items
    assert any("no GPU with 73.2 GiB free" in (e.message or "") for e in events)


def test_cli_serves_and_stops_cleanly(ext_cluster: ExtenderCluster, tmp_path: Path) -> None:
    """`horus operator extender` with settings from env and config file; SIGTERM stops it."""
    import http.client
    import os
    import signal
    import socket
    import subprocess
    import sys

    ports = []
    for _ in range(2):  # the verbs (TLS) and the plain health port
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
    port, health = ports
    cfg = tmp_path / "config.yaml"
    cfg.write_text("extender:\n  host: 127.0.0.1\n  port: 1\nscheduler:\n  min_gain: 0.3\n")
    env = {**os.environ, "HORUS_EXTENDER_PORT": str(port), "HORUS_EXTENDER_HEALTH_PORT": str(health),
           "KUBECONFIG": ext_cluster.kubeconfig}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "horus", "operator", "extender", "--config", str(cfg)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:

        def healthy() -> bool:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", health, timeout=2)
                conn.request("GET", "/healthz")
                ok = conn.getresponse().status == 200
                conn.close()
                return ok
            except OSError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                return False

        ext_cluster.wait_for("the CLI extender to answer /healthz", healthy, timeout=60)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out
        assert "listening on 127.0.0.1" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_hostile_pods_stay_pending_with_the_reason(ext_cluster: ExtenderCluster) -> None:
    """Issue 20: an init container asking for a GPU share, and a profile annotation nested
    thousands deep, each keep only that pod Pending with the extender's reason; the extender
    (real HTTP, called by the real kube-scheduler) goes on binding good pods."""
    ec = ext_cluster
    init = _pod("init-share", core=10, memory=1000)
    res = {c.RESOURCE_GPU_CORE: "10"}
    init["spec"]["initContainers"] = [
        {"name": "grab", "image": "busybox", "resources": {"requests": res, "limits": res}}
    ]
    ec.core.create_namespaced_pod("default", init)
    msg = _unschedulable_message(ec, "init-share")
    assert "init container(s) grab request Horus GPU resources" in msg, msg

    deep = _pod("deep-profile", core=10, memory=1000)
    deep["metadata"]["annotations"][c.ANNOTATION_GRAPH_PROFILE] = "[" * 3000 + "]" * 3000
    ec.core.create_namespaced_pod("default", deep)
    msg = _unschedulable_message(ec, "deep-profile")
    assert "nested deeper than" in msg, msg

    ec.core.create_namespaced_pod("default", _pod("after-hostile", core=10, memory=1000))
    _check_assignment(ec, _bound(ec, "after-hostile"))
