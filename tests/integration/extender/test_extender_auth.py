"""Issue 24 against the real apiserver: only kube-scheduler's certificate gets an answer from
the extender, and even that caller binds nothing Horus did not decide.

The cluster's real kube-scheduler calls this same extender over mutual TLS
(``test_extender_scheduling.py`` shows it places pods). Here the attacks: a caller without a
client certificate and one with another CA's certificate are refused at the handshake; an
authenticated ``/bind`` of a pod that requests no Horus resource, or to a node the pod's own
``nodeSelector`` rules out, is refused and the apiserver shows no Binding (``spec.nodeName``
stays empty) and no assignment; then a good bind of the same Horus pod still works.
The pods name a scheduler that does not exist, so nothing but these calls can bind them.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
from extcluster import ExtenderCluster

from horus.common import constants as c
from horus.operator.extender.tls import generate_tls_secret_data

PROFILE = Path(__file__).resolve().parents[3] / "examples" / "profiles" / "resnet50-bs64.yaml"
NOBODY = "no-such-scheduler"  # nothing else binds these pods


def _ctx(ec: ExtenderCluster, cert: tuple[Path, Path] | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ec.pki[c.EXTENDER_TLS_CA]))
    if cert is not None:
        ctx.load_cert_chain(*cert)
    return ctx


def _scheduler_cert(ec: ExtenderCluster) -> tuple[Path, Path]:
    return ec.pki[c.EXTENDER_TLS_CLIENT_CERT], ec.pki[c.EXTENDER_TLS_CLIENT_KEY]


def _bind(ec: ExtenderCluster, ctx: ssl.SSLContext, pod: dict[str, Any], node: str) -> Any:
    meta = pod["metadata"]
    body = {"PodName": meta["name"], "PodNamespace": "default", "PodUID": meta["uid"],
            "Node": node}  # fmt: skip
    conn = http.client.HTTPSConnection("127.0.0.1", ec.server.port, timeout=30, context=ctx)
    try:
        conn.request("POST", "/bind", body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})  # fmt: skip
        resp = conn.getresponse()
        assert resp.status == 200
        return json.loads(resp.read())
    finally:
        conn.close()


def _create(ec: ExtenderCluster, name: str, horus: bool, selector: str | None = None) -> Any:
    res = {c.RESOURCE_GPU_CORE: "20", c.RESOURCE_GPU_MEMORY: "4000"} if horus else {}
    spec: dict[str, Any] = {
        "schedulerName": NOBODY,
        "containers": [{"name": "main", "image": "busybox",
                        "resources": {"requests": res, "limits": res}}],
        "tolerations": [{"operator": "Exists"}],
    }  # fmt: skip
    if selector is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": selector}
    ann = {c.ANNOTATION_GRAPH_PROFILE: PROFILE.read_text()} if horus else {}
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": spec,
           "metadata": {"name": name, "namespace": "default", "annotations": ann}}  # fmt: skip
    return ec.core.create_namespaced_pod("default", pod).to_dict()


def _raw(ec: ExtenderCluster, name: str) -> dict[str, Any]:
    resp = ec.core.read_namespaced_pod(name, "default", _preload_content=False)
    return dict(json.loads(resp.data))


def _untouched(ec: ExtenderCluster, name: str) -> None:
    """No Binding was made (nodeName empty) and nothing Horus-owned was written."""
    time.sleep(0.5)  # a Binding or patch, had one been sent, is visible by now
    pod = _raw(ec, name)
    assert not pod["spec"].get("nodeName"), pod["spec"]["nodeName"]
    ann = pod["metadata"].get("annotations") or {}
    assert c.ANNOTATION_GPU_ASSIGNMENT not in ann and c.ANNOTATION_ASSIGNMENT_SIGNATURE not in ann


def _delete(ec: ExtenderCluster, *names: str) -> None:
    for name in names:
        ec.kubectl("delete", "pod", name, "--grace-period=0", "--force", "--ignore-not-found")


@pytest.mark.parametrize("who", ["no-certificate", "foreign-ca"])
def test_a_caller_without_kube_schedulers_certificate_is_refused(
    ext_cluster: ExtenderCluster, who: str, tmp_path: Path
) -> None:
    ec = ext_cluster
    pod = _create(ec, f"auth-{who}", horus=True)
    try:
        cert = None
        if who == "foreign-ca":
            other = generate_tls_secret_data()
            cert = (tmp_path / "c.crt", tmp_path / "c.key")
            cert[0].write_bytes(other[c.EXTENDER_TLS_CLIENT_CERT])
            cert[1].write_bytes(other[c.EXTENDER_TLS_CLIENT_KEY])
        with pytest.raises((ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)):
            _bind(ec, _ctx(ec, cert), pod, ec.nodes[0])
        _untouched(ec, pod["metadata"]["name"])
        # kube-scheduler's certificate still gets in (and binds what Horus decided)
        assert _bind(ec, _ctx(ec, _scheduler_cert(ec)), pod, ec.nodes[0])["Error"] == ""
        assert _raw(ec, pod["metadata"]["name"])["spec"]["nodeName"] == ec.nodes[0]
    finally:
        _delete(ec, pod["metadata"]["name"])


def test_bind_of_a_pod_requesting_no_horus_resource_is_refused_without_a_binding(
    ext_cluster: ExtenderCluster,
) -> None:
    ec = ext_cluster
    pod = _create(ec, "auth-not-horus", horus=False)
    try:
        answer = _bind(ec, _ctx(ec, _scheduler_cert(ec)), pod, ec.nodes[0])
        assert "requests no Horus resource" in answer["Error"], answer
        _untouched(ec, "auth-not-horus")
    finally:
        _delete(ec, "auth-not-horus")


def test_bind_to_a_node_the_pod_does_not_allow_is_refused_then_the_allowed_one_works(
    ext_cluster: ExtenderCluster,
) -> None:
    ec = ext_cluster
    allowed, other = ec.nodes[0], ec.nodes[1]
    pod = _create(ec, "auth-pinned", horus=True, selector=allowed)
    try:
        ctx = _ctx(ec, _scheduler_cert(ec))
        answer = _bind(ec, ctx, pod, other)
        assert f"node {other} is not one pod default/auth-pinned allows" in answer["Error"]
        assert "nodeSelector kubernetes.io/hostname" in answer["Error"]
        _untouched(ec, "auth-pinned")
        assert _bind(ec, ctx, pod, allowed)["Error"] == ""
        got = _raw(ec, "auth-pinned")
        assert got["spec"]["nodeName"] == allowed
        assert json.loads(got["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT])["node"] == (
            allowed
        )
    finally:
        _delete(ec, "auth-pinned")
