"""An in-memory apiserver for the DRA driver's unit tests (:class:`horus.dra.kube.DraApi`)."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from horus.kube.errors import ApiError


class FakeDraApi:
    def __init__(self, node_uids: dict[str, str] | None = None) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.slices: dict[str, dict[str, Any]] = {}
        self.node_uids = node_uids if node_uids is not None else {}
        self.claim_reads = 0
        self.fail: ApiError | None = None  # raised by every call while set
        self.drop_taints = False  # as an apiserver with DRADeviceTaints off
        self._names = itertools.count()

    def _check(self) -> None:
        if self.fail is not None:
            raise self.fail

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._check()
        self.claim_reads += 1
        claim = self.claims.get((namespace, name))
        return copy.deepcopy(claim) if claim is not None else None

    def add_claim(self, claim: dict[str, Any]) -> None:
        meta = claim["metadata"]
        self.claims[(meta["namespace"], meta["name"])] = claim

    def list_slices(self, node: str) -> list[dict[str, Any]]:
        self._check()
        return [
            copy.deepcopy(s)
            for s in self.slices.values()
            if s["spec"]["nodeName"] == node and s["spec"]["driver"] == "gpu.horus.io"
        ]

    def _store(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        body = copy.deepcopy(body)
        if self.drop_taints:
            for device in body["spec"]["devices"]:
                device.pop("taints", None)
        else:
            for device in body["spec"]["devices"]:
                for taint in device.get("taints", []):
                    taint.setdefault("timeAdded", "2026-11-26T12:00:00Z")
        body["metadata"]["name"] = name
        body["metadata"].pop("generateName", None)
        body["metadata"].setdefault(
            "creationTimestamp", f"2026-11-26T12:00:{len(self.slices):02d}Z"
        )
        self.slices[name] = body
        return copy.deepcopy(body)

    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        self._check()
        return self._store(body["metadata"]["generateName"] + f"x{next(self._names)}", body)

    def update_slice(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self._check()
        if name not in self.slices:
            raise ApiError(404, "not found")
        return self._store(name, body)

    def delete_slice(self, name: str) -> None:
        self._check()
        self.slices.pop(name, None)

    def node_uid(self, node: str) -> str | None:
        self._check()
        return self.node_uids.get(node)
