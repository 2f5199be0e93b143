"""Raw Kubernetes client responses (``_preload_content=False``): always read them whole.

Why this module exists: the Python client's model deserialisation costs about a millisecond
per object, so every hot path asks for the raw urllib3 response and decodes JSON itself. Such
a response keeps its pooled HTTPS connection until its body has been read. A response dropped
unread (an Event post, a Binding, a delete whose answer nobody needs) leaks that connection, and
the next request pays a fresh TLS handshake — on both sides. Measured on the operator benchmark
before this module: a fifth of the operator's CPU samples were in ``SSLSocket.do_handshake``.

Takes ``Any`` (a urllib3 ``HTTPResponse``) so this layer stays free of the Kubernetes client.
"""

from __future__ import annotations

from typing import Any

from horus.common.documents import loads_api_json


def read_json(resp: Any) -> Any:
    """The decoded JSON body of a raw response; its connection goes back to the pool.

    One object nested absurdly deep (the apiserver stores a DLJob thousands of levels deep)
    must not make a whole list undecodable: see :func:`horus.common.documents.loads_api_json`.
    """
    try:
        return loads_api_json(resp.data)
    finally:
        resp.release_conn()


def read_object(resp: Any) -> dict[str, Any]:
    """A raw response whose body is one JSON object (``{}`` if it is anything else)."""
    body = read_json(resp)
    return body if isinstance(body, dict) else {}


def read_items(resp: Any) -> list[dict[str, Any]]:
    """The ``items`` of a raw list response (only the JSON objects among them)."""
    items = read_object(resp).get("items") or []
    return [i for i in items if isinstance(i, dict)]


def discard(resp: Any) -> None:
    """Read and drop a raw response's body, so its connection can be reused."""
    try:
        resp.drain_conn()
    finally:
        resp.release_conn()
