"""Kubernetes Events: one builder for every role's Events (core/v1, as kubectl describe
shows them), so reasons, sources and timestamps look the same whoever posts them."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from horus.api.raw import discard
from horus.common.clock import now_rfc3339

__all__ = ["event_body", "pod_involved", "post_event"]

log = logging.getLogger(__name__)
_MAX_MESSAGE = 1024


def pod_involved(
    namespace: str, name: str, uid: str = "", resource_version: str = ""
) -> dict[str, str]:
    """A pod as an Event's ``involvedObject`` (uid and resourceVersion when known)."""
    out = {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name}
    if uid:
        out["uid"] = uid
    if resource_version:
        out["resourceVersion"] = resource_version
    return out


def event_body(
    involved: Mapping[str, str],
    reason: str,
    message: str,
    *,
    warning: bool = False,
    component: str,
    instance: str = "",
    host: str = "",
) -> dict[str, Any]:
    """An Event about ``involved`` (apiVersion, kind, name, namespace, uid of the object)."""
    now = now_rfc3339()
    namespace = involved.get("namespace") or "default"
    source: dict[str, str] = {"component": component}
    if host:
        source["host"] = host
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved.get('name', 'horus')}.", "namespace": namespace},
        "involvedObject": dict(involved),
        "reason": reason,
        "message": message[:_MAX_MESSAGE],
        "type": "Warning" if warning else "Normal",
        "source": source,
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    if instance:
        body["reportingInstance"] = instance[:128]
    return body


def post_event(core_v1: Any, body: Mapping[str, Any]) -> bool:
    """Post an Event (best effort: an Event never blocks a decision, not even when the
    apiserver cannot be reached); False if it was not posted."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    namespace = str((body.get("metadata") or {}).get("namespace") or "default")
    try:
        discard(core_v1.create_namespaced_event(namespace, body, _preload_content=False))
    except (ApiException, HTTPError, OSError) as exc:
        log.warning(
            "could not post event %s on %s: %s",
            body.get("reason"),
            (body.get("involvedObject") or {}).get("name"),
            getattr(exc, "reason", None) or exc,
        )
        return False
    return True
