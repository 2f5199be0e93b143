"""Who may call the scheduler extender (issue 24): mutual TLS, through its real server.

The verbs listen on TLS that requires a client certificate from the extender's client CA
(``horus.operator.extender.tls``). Every case below attacks the listener as a stranger on
the network would — no certificate, a certificate from another CA, the extender's own server
certificate, plain HTTP — and must be refused at the handshake with nothing written; a good
client (kube-scheduler's certificate) still works afterwards. Then, as an authenticated
caller, /bind must still refuse a pod that asks for no Horus GPU and a node the pod's own
constraints rule out. The cluster behind the server is the in-memory ``FakeSource``.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from extfixtures import FakeSource, plain_pod
from opfixtures import KEY, node

from horus.common import constants as c
from horus.operator.extender import Extender, ExtenderServer
from horus.operator.extender.tls import TlsSource, generate_tls_secret_data
from horus.predictor import load_default_predictor


def _write(folder: Path, data: dict[str, bytes]) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, value in data.items():
        (folder / name).write_bytes(value)
        out[name] = folder / name
    return out


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _write(tmp_path_factory.mktemp("pki") / "ours", generate_tls_secret_data())


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A complete set from another CA: its client certificate is valid — elsewhere."""
    return _write(tmp_path_factory.mktemp("pki") / "foreign", generate_tls_secret_data())


@pytest.fixture
def source() -> FakeSource:
    tainted = node("control-plane", gpus=1)
    tainted["spec"]["taints"] = [{"key": "node-role.kubernetes.io/control-plane",
                                  "effect": "NoSchedule"}]  # fmt: skip
    pool_b = node("pool-b", gpus=1)
    pool_b["metadata"]["labels"] = {"pool": "b"}
    pool_a = node("pool-a", gpus=1)
    pool_a["metadata"]["labels"] = {"pool": "a"}
    pinned = plain_pod("pinned")
    pinned["spec"]["nodeSelector"] = {"pool": "a"}
    web = {
        "metadata": {"name": "web", "namespace": "default", "uid": "uid-web",
                     "resourceVersion": "1"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }  # fmt: skip
    return FakeSource([node("n1", gpus=1), tainted, pool_a, pool_b], [plain_pod("p"), pinned, web])


@pytest.fixture
def server(source: FakeSource, pki: dict[str, Path]) -> Iterator[ExtenderServer]:
    ext = Extender(source, load_default_predictor(), key=KEY, cache_seconds=0)
    tls = TlsSource(None, (pki["tls.crt"], pki["tls.key"], pki["ca.crt"]))
    srv = ExtenderServer(ext, "127.0.0.1", 0, tls=tls.context, health_port=0).start()
    yield srv
    srv.close()


def client_context(pki: dict[str, Path], cert: str | None = "client") -> ssl.SSLContext:
    """What kube-scheduler's tlsConfig builds: trust ``ca.crt`` (caFile), present
    ``<cert>.crt``/``<cert>.key`` (certFile/keyFile) — or nothing."""
    ctx = ssl.create_default_context(cafile=str(pki["ca.crt"]))
    if cert == "client":
        ctx.load_cert_chain(pki["client.crt"], pki["client.key"])
    elif cert == "server":
        ctx.load_cert_chain(pki["tls.crt"], pki["tls.key"])
    return ctx


def post(srv: ExtenderServer, ctx: ssl.SSLContext, verb: str, body: object) -> tuple[int, Any]:
    conn = http.client.HTTPSConnection("127.0.0.1", srv.port, timeout=30, context=ctx)
    try:
        conn.request("POST", f"/{verb}", body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})  # fmt: skip
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def refused(srv: ExtenderServer, ctx: ssl.SSLContext) -> str:
    """Send a /bind over ``ctx``; return how the connection ended (never an HTTP answer).

    Under TLS 1.3 the client's handshake completes before the server has checked the client
    certificate, so the refusal arrives as an alert on the first read."""
    body = {"PodName": "web", "PodNamespace": "default", "PodUID": "uid-web", "Node": "n1"}
    try:
        status, answer = post(srv, ctx, "bind", body)
    except (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"
    raise AssertionError(f"answered without a valid client certificate: {status} {answer}")


def refusals(srv: ExtenderServer, at_least: float = 1.0, wait_s: float = 10.0) -> float:
    """The server's refused-handshake counter, once it reaches ``at_least`` (or after
    ``wait_s``). The client sees the TLS alert while the server's connection thread is still
    inside its handshake: the count it makes next may not be there yet (CI read 0 once)."""
    url = f"{srv.health_url}/metrics"
    deadline = time.monotonic() + wait_s
    while True:
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode()
        line = next(x for x in text.splitlines() if x.startswith(c.METRIC_EXTENDER_TLS_REFUSED))
        value = float(line.split()[-1])
        if value >= at_least or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def good_filter(srv: ExtenderServer, pki: dict[str, Path]) -> None:
    status, body = post(srv, client_context(pki), "filter",
                        {"Pod": plain_pod("p"), "NodeNames": ["n1"]})  # fmt: skip
    assert status == 200 and body["NodeNames"] == ["n1"] and body["Error"] == "", body


def no_writes(source: FakeSource) -> None:
    assert not [call for call in source.calls if call[0] in ("patch", "bind")], source.calls


# --- the handshake: strangers never reach HTTP ---------------------------------------------------


def test_a_client_without_a_certificate_is_refused_at_the_handshake(
    server: ExtenderServer, source: FakeSource, pki: dict[str, Path]
) -> None:
    how = refused(server, client_context(pki, cert=None))
    assert "certificate" in how.lower() or "EOF" in how or "reset" in how.lower(), how
    assert refusals(server) == 1
    no_writes(source)
    good_filter(server, pki)


def test_a_client_certificate_from_another_ca_is_refused(
    server: ExtenderServer, source: FakeSource, pki: dict[str, Path], foreign: dict[str, Path]
) -> None:
    ctx = ssl.create_default_context(cafile=str(pki["ca.crt"]))  # it trusts our server ...
    ctx.load_cert_chain(foreign["client.crt"], foreign["client.key"])  # ... but is not ours
    refused(server, ctx)
    assert refusals(server) == 1
    no_writes(source)
    good_filter(server, pki)


def test_the_servers_own_certificate_cannot_call_it(
    server: ExtenderServer, source: FakeSource, pki: dict[str, Path]
) -> None:
    """Same CA, but the server certificate carries serverAuth only: whoever reads the
    extender's key from its pod still cannot act as kube-scheduler."""
    refused(server, client_context(pki, cert="server"))
    assert refusals(server) == 1
    no_writes(source)


def test_plain_http_is_refused(
    server: ExtenderServer, source: FakeSource, pki: dict[str, Path]
) -> None:
    body = b'{"PodName":"web","PodNamespace":"default","PodUID":"uid-web","Node":"n1"}'
    req = (f"POST /bind HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(req + body)
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    assert not got.startswith(b"HTTP/"), got[:200]
    assert refusals(server) == 1
    no_writes(source)
    good_filter(server, pki)


def test_the_server_certificate_names_the_service_and_loopback(pki: dict[str, Path]) -> None:
    """kube-scheduler checks the server against caFile and the urlPrefix host: both the
    Service name (control-plane scheduler) and 127.0.0.1 (the Horus scheduler pod) verify."""
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(pki["tls.crt"].read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = san.get_values_for_type(x509.DNSName)
    assert f"{c.EXTENDER_SERVICE}.{c.HORUS_NAMESPACE}.svc" in names
    assert "127.0.0.1" in [str(a) for a in san.get_values_for_type(x509.IPAddress)]


# --- the plain port: probes and metrics only -----------------------------------------------------


def test_health_and_metrics_are_plain_and_the_plain_port_serves_no_verb(
    server: ExtenderServer, source: FakeSource
) -> None:
    for path in ("/healthz", "/readyz", "/livez", "/metrics"):
        with urllib.request.urlopen(f"{server.health_url}{path}", timeout=10) as resp:
            assert resp.status == 200
    port = server.health_port
    assert port is not None
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = json.dumps({"PodName": "p", "PodNamespace": "default", "PodUID": "uid-p", "Node": "n1"})
    conn.request("POST", "/bind", body=body)
    resp = conn.getresponse()
    answer = json.loads(resp.read())
    conn.close()
    assert resp.status == 404 and "TLS" in answer["Error"], answer
    no_writes(source)


# --- an authenticated caller still binds only what Horus decided ---------------------------------


def test_bind_of_a_pod_requesting_no_horus_resource_is_refused(
    server: ExtenderServer, source: FakeSource, pki: dict[str, Path]
) -> None:
    for target in ("n1", "control-plane"):
        status, answer = post(server, client_context(pki), "bind",
                              {"PodName": "web", "PodNamespace": "default", "PodUID": "uid-web",
                               "Node": target})  # fmt: skip
        assert status == 200 and "requests no Horus resource" in answer["Error"], answer
    no_writes(source)
    assert source.pods[("default", "web")]["spec"].get("nodeName") is None


@pytest.mark.parametrize(
    ("pod", "target", "why"),
    [
        ("pinned", "pool-b", "nodeSelector pool=a does not match"),
        ("p", "control-plane", "node-role.kubernetes.io/control-plane"),
        ("p", "no-such-node", "does not exist"),
    ],
)
def test_bind_to_a_node_the_pods_constraints_forbid_is_refused(
    server: ExtenderServer, source: FakeSource, pki: dict[str, Path], pod: str, target: str,
    why: str,
) -> None:  # fmt: skip
    status, answer = post(server, client_context(pki), "bind",
                          {"PodName": pod, "PodNamespace": "default", "PodUID": f"uid-{pod}",
                           "Node": target})  # fmt: skip
    assert status == 200 and why in answer["Error"], answer
    no_writes(source)


def test_filter_and_prioritize_are_neutral_for_a_pod_requesting_no_horus_resource(
    server: ExtenderServer, source: FakeSource, pki: dict[str, Path]
) -> None:
    """A misconfigured scheduler that sends every pod gets no verdict and no score from Horus
    (refusing would hold ordinary pods Pending), and the cluster is not even read."""
    web = source.pods[("default", "web")]
    source.fail_list = True  # reading the cluster would fail the answer
    args = {"Pod": web, "NodeNames": ["n1", "control-plane"]}
    status, body = post(server, client_context(pki), "filter", args)
    assert status == 200 and body["NodeNames"] == ["n1", "control-plane"], body
    assert body["FailedNodes"] == {} and body["Error"] == ""
    status, scores = post(server, client_context(pki), "prioritize", args)
    assert scores == [{"Host": "n1", "Score": 0}, {"Host": "control-plane", "Score": 0}]


# --- rotation: new handshakes use the new material -----------------------------------------------


def test_changed_files_are_served_to_the_next_handshake(source: FakeSource, tmp_path: Path) -> None:
    old = _write(tmp_path / "old", generate_tls_secret_data())
    live = _write(tmp_path / "live", {k: p.read_bytes() for k, p in old.items()})
    now = [0.0]
    tls = TlsSource(None, (live["tls.crt"], live["tls.key"], live["ca.crt"]),
                    refresh_seconds=30, clock=lambda: now[0])  # fmt: skip
    ext = Extender(source, load_default_predictor(), key=KEY, cache_seconds=0)
    srv = ExtenderServer(ext, "127.0.0.1", 0, tls=tls.context, health_port=0).start()
    try:
        good_filter(srv, old)
        new = _write(tmp_path / "new", generate_tls_secret_data())
        _write(tmp_path / "live", {k: p.read_bytes() for k, p in new.items()})
        good_filter(srv, old)  # not re-read yet
        now[0] = 31.0
        good_filter(srv, new)
        stale = ssl.create_default_context(cafile=str(new["ca.crt"]))
        stale.load_cert_chain(old["client.crt"], old["client.key"])
        refused(srv, stale)  # the old client certificate: from another CA now
        # garbled material is logged and the working one kept
        (tmp_path / "live" / "tls.key").write_text("not a key")
        now[0] = 62.0
        good_filter(srv, new)
    finally:
        srv.close()
