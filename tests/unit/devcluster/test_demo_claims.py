"""The demo's live table on the dra path (issue 25 item 5): a replica pod carries no
assignment annotation there; its place and share are its ResourceClaim's allocation, as the
kube-scheduler wrote it (``kubectl get resourceclaims`` shows the same, CLAIM_COLUMNS)."""

from __future__ import annotations

from typing import Any

from horus.common import constants as c
from horus.devcluster.demo_table import CLAIM_COLUMNS, render_table


def _job(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"}, "status": {"phase": "Running"}}


def _pod(job: str, replica: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{job}-{replica}",
            "namespace": "default",
            "labels": {c.LABEL_DLJOB_NAME: job},
        },
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": f"{job}-{replica}-gpu"}]},
    }


def _claim(name: str, node: str, device: str, cores: str, memory: str) -> dict[str, Any]:
    result = {
        "driver": c.DRA_DRIVER_NAME,
        "pool": node,
        "device": device,
        "consumedCapacity": {"cores": cores, "memory": memory},
    }
    return {
        "metadata": {"name": name, "namespace": "default"},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def test_a_replicas_place_and_share_come_from_its_claim() -> None:
    claims = [
        _claim("train-0-gpu", "gpu-node-0000", "gpu-1", "45", "40779Mi"),
        _claim("train-1-gpu", "gpu-node-0001", "gpu-0", "45", "40Gi"),
        _claim("other-0-gpu", "gpu-node-0001", "gpu-0", "10", "1Gi"),  # not this job's
    ]
    table = render_table([_job("train")], [_pod("train", 1), _pod("train", 0)], None, claims)
    row = next(line for line in table.splitlines() if line.startswith("train"))
    assert "n0000/1 45% 40779, n0001/0 45% 40960" in row
    assert "10%" not in row


def test_an_unallocated_claim_shows_no_place() -> None:
    pending = {"metadata": {"name": "train-0-gpu", "namespace": "default"}, "status": {}}
    table = render_table([_job("train")], [_pod("train", 0)], None, [pending])
    row = next(line for line in table.splitlines() if line.startswith("train"))
    assert "n0000" not in row and "%" not in row.split("Running", 1)[1]


def test_the_claim_columns_name_the_share() -> None:
    for field in ("consumedCapacity.cores", "consumedCapacity.memory", "results[0].pool"):
        assert field in CLAIM_COLUMNS
