"""Hostile requests to the scheduler extender, through its real HTTP server.

The cluster behind it is the in-memory ``FakeSource`` of the extender tests (standing in for
the apiserver); everything in front of it — socket, HTTP parsing, body limits, JSON decoding,
the ``k8s.io/kube-scheduler/extender/v1`` shapes — is the production code. After every case
the server must still answer a good ``filter`` correctly, and nothing may have been written.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from extfixtures import FakeSource, plain_pod
from opfixtures import KEY, node

from horus.common import constants as c
from horus.operator import extender as ext_mod
from horus.operator.extender import Extender, ExtenderServer
from horus.operator.extender import http as ext_http
from horus.predictor import load_default_predictor

LIMIT = 256 * 1024


@pytest.fixture(scope="module")
def source() -> FakeSource:
    return FakeSource([node("n1", gpus=1), node("n2", gpus=1)], [plain_pod("p")])


@pytest.fixture(scope="module")
def server(source: FakeSource) -> Iterator[ExtenderServer]:
    ext = Extender(source, load_default_predictor(), key=KEY, cache_seconds=0)
    srv = ExtenderServer(ext, "127.0.0.1", 0, max_body_bytes=LIMIT).start()
    yield srv
    srv.close()


def raw_http(srv: ExtenderServer, data: bytes, half_close: bool = False) -> tuple[int, str]:
    """Send raw bytes; return the status (0 for an HTTP/0.9 answer, which has no status
    line) and the body of the answer (all of it when there are no headers)."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            chunks.append(chunk)
            text = b"".join(chunks)
            head, sep, body = text.partition(b"\r\n\r\n")
            if sep and b"content-length:" in head.lower():
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                if len(body) >= length:
                    break
    text = b"".join(chunks).decode("utf-8", "replace")
    if not text.startswith("HTTP/"):
        return 0, text
    return int(text.split(" ", 2)[1]), text.partition("\r\n\r\n")[2]


def post(srv: ExtenderServer, verb: str, body: bytes) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    try:
        conn.request("POST", f"/{verb}", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data) if data else None
    finally:
        conn.close()


def good_filter(srv: ExtenderServer) -> None:
    """The server is alive and still decides correctly."""
    args = {"Pod": plain_pod("p"), "NodeNames": ["n1", "n2"]}
    status, body = post(srv, "filter", json.dumps(args).encode())
    assert status == 200 and body["NodeNames"] == ["n1", "n2"] and body["Error"] == "", body


def no_writes(source: FakeSource) -> None:
    assert not [call for call in source.calls if call[0] in ("patch", "bind")], source.calls


def request(head: str, body: bytes = b"") -> bytes:
    return head.replace("\n", "\r\n").encode() + b"\r\n" + body


# --- HTTP framing: bounded before a byte of the body is read -------------------------------------

FRAMING_CASES: list[tuple[str, bytes, int, str]] = [
    (
        "no-length",
        request("POST /filter HTTP/1.1\nHost: x\nConnection: close\n"),
        411,
        "Content-Length: required",
    ),
    (
        "chunked",
        request(
            "POST /filter HTTP/1.1\nHost: x\nTransfer-Encoding: chunked\n", b"2\r\n{}\r\n0\r\n\r\n"
        ),
        411,
        "Transfer-Encoding",
    ),
    (
        "chunked-and-length",
        request(
            "POST /filter HTTP/1.1\nHost: x\nTransfer-Encoding: chunked\nContent-Length: 2\n", b"{}"
        ),
        411,
        "Transfer-Encoding",
    ),
    (
        "negative-length",
        request("POST /filter HTTP/1.1\nHost: x\nContent-Length: -5\n"),
        400,
        "Content-Length",
    ),
    (
        "text-length",
        request("POST /filter HTTP/1.1\nHost: x\nContent-Length: abc\n"),
        400,
        "Content-Length",
    ),
    (
        "plus-length",
        request("POST /filter HTTP/1.1\nHost: x\nContent-Length: +2\n", b"{}"),
        400,
        "Content-Length",
    ),
    (
        "float-length",
        request("POST /filter HTTP/1.1\nHost: x\nContent-Length: 2.0\n", b"{}"),
        400,
        "Content-Length",
    ),
    (
        "two-lengths",
        request("POST /filter HTTP/1.1\nHost: x\nContent-Length: 2\nContent-Length: 3\n", b"{}"),
        400,
        "Content-Length",
    ),
    (
        "huge-length",
        request("POST /filter HTTP/1.1\nHost: x\nContent-Length: 99999999999\n"),
        413,
        "over the limit",
    ),
    (
        "absurd-length",
        request(f"POST /filter HTTP/1.1\nHost: x\nContent-Length: {'9' * 40}\n"),
        400,
        "Content-Length",
    ),
    (
        "empty-body",
        request("POST /filter HTTP/1.1\nHost: x\nContent-Length: 0\n"),
        400,
        "not valid JSON",
    ),
    ("long-header", request(f"POST /filter HTTP/1.1\nHost: x\nX-Junk: {'a' * 70000}\n"), 431, ""),
    (
        "many-headers",
        request("POST /filter HTTP/1.1\n" + "".join(f"X-{i}: 1\n" for i in range(150))),
        431,
        "",
    ),
    ("long-path", request(f"POST /{'f' * 70000} HTTP/1.1\nHost: x\n"), 414, ""),
    (  # a TLS ClientHello: the standard library answers in HTTP/0.9 form, no status line
        "not-http",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(64) + b"\r\n\r\n",
        0,
        "Bad request syntax",
    ),
    ("put", request("PUT /filter HTTP/1.1\nHost: x\nContent-Length: 2\n", b"{}"), 501, ""),
]


@pytest.mark.parametrize(
    ("case", "data", "status", "words"), FRAMING_CASES, ids=[c[0] for c in FRAMING_CASES]
)
def test_hostile_framing_is_refused(
    server: ExtenderServer, source: FakeSource, case: str, data: bytes, status: int, words: str
) -> None:
    got, body = raw_http(server, data, half_close=case in ("no-length", "empty-body"))
    assert got == status, (got, body)
    if words and got:
        assert words in json.loads(body)["Error"], body
    elif words:
        assert words in body, body
    good_filter(server)
    no_writes(source)


def test_short_body_is_refused(server: ExtenderServer, source: FakeSource) -> None:
    data = request("POST /filter HTTP/1.1\nHost: x\nContent-Length: 100\n", b'{"Pod": 1')
    got, body = raw_http(server, data, half_close=True)
    assert got == 400 and "got 9 of the 100 bytes" in json.loads(body)["Error"]
    good_filter(server)


def test_a_stalled_client_is_dropped(
    server: ExtenderServer, source: FakeSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that announces a body and never sends it frees its thread (408)."""
    monkeypatch.setattr(ext_http._Handler, "timeout", 1.0)
    started = time.monotonic()
    got, body = raw_http(
        server, request("POST /filter HTTP/1.1\nHost: x\nContent-Length: 100\n", b"{")
    )
    assert got == 408 and "not received within" in json.loads(body)["Error"]
    assert time.monotonic() - started < 20
    good_filter(server)


# --- bodies: JSON bounded and depth-checked, every field of the wire types checked --------------


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def args(**over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"Pod": plain_pod("q"), "NodeNames": ["n1"]}
    out.update(over)
    return out


def pod_with(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    pod = plain_pod("q")
    target = pod
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return pod


BODY_CASES: list[tuple[str, str, bytes, str]] = [
    ("binary", "filter", bytes(range(256)), "not UTF-8"),
    ("deep-10000", "filter", deep(10_000).encode(), "nested deeper"),
    (
        "deep-in-pod",
        "filter",
        json.dumps(args()).replace('"spec": {', '"spec": {"x": ' + deep(100) + ", ", 1).encode(),
        "nested deeper",
    ),
    ("deep-bind", "bind", ('{"PodName": ' + deep(5000) + "}").encode(), "nested deeper"),
    ("top-array", "filter", b"[]", "must be a JSON object"),
    ("top-string", "prioritize", b'"Pod"', "must be a JSON object"),
    ("trailing-garbage", "filter", json.dumps(args()).encode() + b"}}", "not valid JSON"),
    ("names-not-list", "filter", json.dumps(args(NodeNames="n1")).encode(), "NodeNames"),
    ("names-int", "filter", json.dumps(args(NodeNames=[1])).encode(), "NodeNames[0]"),
    ("names-empty-string", "filter", json.dumps(args(NodeNames=[""])).encode(), "NodeNames[0]"),
    ("names-too-many", "filter", json.dumps(args(NodeNames=["n"] * 60_000)).encode(), "more than"),
    ("name-too-long", "filter", json.dumps(args(NodeNames=["n" * 300])).encode(), "at most 253"),
    ("names-nan", "filter", json.dumps(args()).replace('["n1"]', "[NaN]").encode(), "NodeNames[0]"),
    ("no-nodes", "filter", json.dumps({"Pod": plain_pod("q")}).encode(), "NodeNames or Nodes"),
    ("no-pod", "filter", json.dumps({"NodeNames": ["n1"]}).encode(), "Pod: required"),
    ("pod-list", "filter", json.dumps(args(Pod=[1])).encode(), "Pod: must be a JSON object"),
    ("no-metadata", "filter", json.dumps(args(Pod={"spec": {}})).encode(), "Pod.metadata"),
    (
        "empty-name",
        "filter",
        json.dumps(args(Pod=pod_with(("metadata", "name"), ""))).encode(),
        "Pod.metadata.name",
    ),
    (
        "name-int",
        "prioritize",
        json.dumps(args(Pod=pod_with(("metadata", "name"), 7))).encode(),
        "Pod.metadata.name",
    ),
    (
        "namespace-dict",
        "filter",
        json.dumps(args(Pod=pod_with(("metadata", "namespace"), {}))).encode(),
        "Pod.metadata.namespace",
    ),
    (
        "uid-int",
        "filter",
        json.dumps(args(Pod=pod_with(("metadata", "uid"), 5))).encode(),
        "Pod.metadata.uid",
    ),
    (
        "annotation-int",
        "filter",
        json.dumps(args(Pod=pod_with(("metadata", "annotations"), {"a": 1}))).encode(),
        "Pod.metadata.annotations",
    ),
    (
        "containers-dict",
        "filter",
        json.dumps(args(Pod=pod_with(("spec", "containers"), {}))).encode(),
        "Pod.spec.containers",
    ),
    (
        "containers-missing",
        "filter",
        json.dumps(args(Pod=pod_with(("spec",), {}))).encode(),
        "Pod.spec.containers: required",
    ),
    (
        "containers-300",
        "filter",
        json.dumps(args(Pod=pod_with(("spec", "containers"), [{}] * 300))).encode(),
        "300 entries",
    ),
    (
        "requests-list",
        "filter",
        json.dumps(
            args(Pod=pod_with(("spec", "containers"), [{"resources": {"requests": [1]}}]))
        ).encode(),
        "resources.requests",
    ),
    (
        "init-not-list",
        "filter",
        json.dumps(args(Pod=pod_with(("spec", "initContainers"), "x"))).encode(),
        "Pod.spec.initContainers",
    ),
    (
        "nodes-items-dict",
        "filter",
        json.dumps({"Pod": plain_pod("q"), "Nodes": {"items": {}}}).encode(),
        "Nodes.items",
    ),
    (
        "nodes-item-unnamed",
        "filter",
        json.dumps({"Pod": plain_pod("q"), "Nodes": {"items": [{"metadata": {}}]}}).encode(),
        "Nodes.items[0].metadata.name",
    ),
    ("bind-no-name", "bind", b'{"PodNamespace": "default", "Node": "n1"}', "PodName: required"),
    (
        "bind-long-uid",
        "bind",
        json.dumps(
            {"PodName": "p", "PodNamespace": "d", "PodUID": "u" * 500, "Node": "n1"}
        ).encode(),
        "PodUID",
    ),
    (
        "bind-node-int",
        "bind",
        json.dumps({"PodName": "p", "PodNamespace": "d", "Node": 3}).encode(),
        "Node",
    ),
    (
        "bind-node-list",
        "bind",
        json.dumps({"PodName": "p", "PodNamespace": "d", "Node": ["n1"]}).encode(),
        "Node",
    ),
]


@pytest.mark.parametrize(
    ("case", "verb", "body", "words"), BODY_CASES, ids=[c[0] for c in BODY_CASES]
)
def test_hostile_body_is_refused(
    server: ExtenderServer, source: FakeSource, case: str, verb: str, body: bytes, words: str
) -> None:
    assert len(body) <= LIMIT or case == "names-too-many"
    if len(body) > LIMIT:  # this one needs a server that accepts big bodies: check the parser
        with pytest.raises(ext_mod.RequestError, match=words):
            ext_mod.parse_extender_args(json.loads(body))
        return
    status, answer = post(server, verb, body)
    assert status == 400, (status, answer)
    assert words in answer["Error"], answer
    good_filter(server)
    no_writes(source)


# --- pods that parse but ask for something hostile: refused per node, with the reason ------------


def hostile_pod(kind: str) -> dict[str, Any]:
    ann_key = c.ANNOTATION_GRAPH_PROFILE
    if kind == "quantity-exponent":
        return plain_pod("q", core="1e400")
    if kind == "quantity-huge":
        return plain_pod("q", core="9" * 30 + "Ei")
    if kind == "quantity-fraction":
        return plain_pod("q", core="0.5")
    if kind == "quantity-long":
        return plain_pod("q", core="1" * 100)
    if kind == "core-150":
        return plain_pod("q", core=150)
    if kind == "init-container-more":
        pod = plain_pod("q", core=40)
        pod["spec"]["initContainers"] = [
            {"name": "init", "resources": {"requests": {c.RESOURCE_GPU_CORE: "150"}}}
        ]
        return pod
    if kind == "two-containers":
        pod = plain_pod("q", core=40)
        pod["spec"]["containers"].append(dict(pod["spec"]["containers"][0], name="second"))
        return pod
    if kind == "no-profile":
        return plain_pod("q", profile=None)
    pod = plain_pod("q")
    texts = {
        "profile-deep": deep(5000),
        "profile-binaryish": "\x00\x01\x02",
        "profile-nan": json.dumps(
            {"model": "m", "batchSize": 8, "features": {"params": 1}}
        ).replace("1}", "NaN}"),
        "profile-aliases": "a: &a [1]\nb: *a\n",
        "profile-huge": "x" * (2 << 20),
    }
    pod["metadata"]["annotations"][ann_key] = texts[kind]
    return pod


POD_CASES: list[tuple[str, str]] = [
    ("quantity-exponent", "not a Kubernetes quantity"),
    ("quantity-huge", "far larger than any GPU share"),
    ("quantity-fraction", "not a whole number"),
    ("quantity-long", "not a Kubernetes quantity"),
    ("core-150", "must be 1..100"),
    ("init-container-more", "never in initContainers"),
    ("two-containers", "in one container only"),
    ("no-profile", c.ANNOTATION_GRAPH_PROFILE),
    ("profile-deep", "nested deeper"),
    ("profile-binaryish", c.ANNOTATION_GRAPH_PROFILE),
    ("profile-nan", "features.params"),
    ("profile-aliases", "anchors"),
    ("profile-huge", "larger than"),
]


@pytest.mark.parametrize(("case", "words"), POD_CASES, ids=[c[0] for c in POD_CASES])
def test_hostile_pod_is_unresolvable_with_its_reason(
    server: ExtenderServer, source: FakeSource, case: str, words: str
) -> None:
    pod = hostile_pod(case)
    if case == "profile-huge":  # bigger than this server's body limit: decide without HTTP
        verdicts = server.extender.evaluate(pod, ["n1"])
        assert words in str(verdicts["n1"].reason)
        return
    status, body = post(server, "filter", json.dumps({"Pod": pod, "NodeNames": ["n1"]}).encode())
    assert status == 200 and body["NodeNames"] == [], body
    reason = body["FailedAndUnresolvableNodes"]["n1"]
    assert reason.startswith("horus: ") and words in reason, reason
    status, scores = post(
        server, "prioritize", json.dumps({"Pod": pod, "NodeNames": ["n1"]}).encode()
    )
    assert status == 200 and scores == [{"Host": "n1", "Score": 0}]
    good_filter(server)
    no_writes(source)
