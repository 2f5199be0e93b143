"""Hostile objects the node agent reads: pods' annotations, DLJobs, ConfigMaps, its node.

The agent's real ``AgentApi`` client decodes the bytes (the apiserver is replaced at the
``ApiClient`` seam: ``param_serialize``/``call_api``, exactly what the agent calls), and its
real cycle parses, samples (simulated backend), enforces and reports. In every case a good pod
on the same node keeps being sampled, two cycles in a row, and the problem is logged once
naming the pod (rate-limited), never raised out of the cycle.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import KEY, assignment, pod_obj, sim_agent_settings, write_public_keys

from horus.agent.agent import Agent
from horus.agent.kube import AgentApi
from horus.api.assignment import GpuAssignment, encode_assignment
from horus.api.inventory import GpuDevice, encode_inventory, simulated_gpu_uuid
from horus.common import constants as c
from kube_fakes import RawResponse

NODE = "n1"


class FakeApiClient:
    """Answers the agent's raw requests from canned response bodies (bytes, so they may be
    anything an apiserver or a proxy in front of it could send)."""

    def __init__(self, routes: dict[str, bytes]) -> None:
        self.routes = routes
        self.writes: list[tuple[str, str]] = []

    def param_serialize(
        self, method: str, path: str, query_params: Any, header_params: Any, body: Any, **_: Any
    ) -> tuple[Any, ...]:
        return (method, path, query_params, body)

    def call_api(self, method: str, path: str, query: Any, body: Any, **_: Any) -> RawResponse:
        if method != "GET":
            self.writes.append((method, path))
            return RawResponse(200, b"{}")
        data = self.routes.get(path)
        return RawResponse(404, b"not found") if data is None else RawResponse(200, data)


def node_json(inventory: str | None = None) -> bytes:
    gpus = [GpuDevice(i, simulated_gpu_uuid(NODE, i), "H100", 81920) for i in range(2)]
    ann = {
        c.KWOK_NODE_ANNOTATION: c.KWOK_NODE_ANNOTATION_VALUE,
        c.ANNOTATION_GPU_INVENTORY: inventory if inventory is not None else encode_inventory(gpus),
    }
    return json.dumps({"metadata": {"name": NODE, "annotations": ann}}).encode()


def signed(name: str, text: str) -> dict[str, str]:
    return {
        c.ANNOTATION_GPU_ASSIGNMENT: text,
        c.ANNOTATION_ASSIGNMENT_SIGNATURE: KEY.sign_assignment(
            "ns", name, f"uid-{name}", "", 0, text
        ),
    }


def job_pod(name: str, job: str, gpu: int = 0) -> dict[str, Any]:
    a = GpuAssignment(NODE, simulated_gpu_uuid(NODE, gpu), gpu, 40, 2048, job, 0)
    return pod_obj(name, NODE, a)


def with_annotations(name: str, ann: dict[str, str], gpu: int = 1) -> dict[str, Any]:
    pod = pod_obj(name, NODE, assignment(NODE, gpu))
    pod["metadata"]["annotations"] = ann
    return pod


def plain_pod_naming(ref: str) -> dict[str, Any]:
    """A plain pod sharing the good pod's GPU whose profile is in the ConfigMap ``ref`` names
    (so the agent looks it up to name the pair)."""
    return pod_obj(
        "bad", NODE, assignment(NODE, 0), extra={c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP: ref}
    )


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


GOOD = pod_obj("good", NODE, assignment(NODE, 0))
DLJOB_PATH = f"/apis/{c.API_GROUP}/{c.API_VERSION}/namespaces/ns/{c.DLJOB_PLURAL}/train"


def dljob_body(spec_profile: str, extra: str = "") -> bytes:
    return (
        '{"apiVersion": "horus.io/v1alpha1", "kind": "DLJob", "metadata": {"name": "train", '
        '"namespace": "ns"}, "spec": {"replicas": 1, "profile": ' + spec_profile + ", "
        '"template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}}' + extra + "}"
    ).encode()


INLINE = json.dumps(
    {
        "model": "m",
        "batchSize": 8,
        "features": {
            "batch_size": 8,
            "params": 1e6,
            "fwd_flops": 1e9,
            "bwd_flops": 2e9,
            "activation_bytes": 1e7,
            "param_bytes": 4e6,
        },
    }
)

# (case id, extra pod objects as raw JSON text, extra routes, words of the one warning)
CASES: list[tuple[str, list[str], dict[str, bytes], str]] = [
    (
        "assignment-deep",
        [json.dumps(with_annotations("bad", signed("bad", deep(5000))))],
        {},
        "nested deeper",
    ),
    (
        "assignment-huge",
        [json.dumps(with_annotations("bad", signed("bad", "x" * 300_000)))],
        {},
        "larger than",
    ),
    (
        "assignment-not-json",
        [json.dumps(with_annotations("bad", signed("bad", "{node")))],
        {},
        "not valid JSON",
    ),
    (
        "assignment-list",
        [json.dumps(with_annotations("bad", signed("bad", "[1]")))],
        {},
        "must be an object",
    ),
    (
        "assignment-nan",
        [
            json.dumps(
                with_annotations(
                    "bad",
                    signed(
                        "bad",
                        encode_assignment(assignment(NODE, 1)).replace(
                            '"corePercent":50', '"corePercent":NaN'
                        ),
                    ),
                )
            )
        ],
        {},
        "corePercent",
    ),
    (
        "assignment-index-5000",
        [
            json.dumps(
                with_annotations(
                    "bad",
                    signed(
                        "bad",
                        encode_assignment(assignment(NODE, 1)).replace(
                            '"gpuIndex":1', '"gpuIndex":5000'
                        ),
                    ),
                )
            )
        ],
        {},
        "gpuIndex",
    ),
    (
        "assignment-100-gpus",
        [
            json.dumps(
                with_annotations(
                    "bad",
                    signed(
                        "bad",
                        json.dumps(
                            {
                                **assignment(NODE, 1).to_json(),
                                "gpus": [assignment(NODE, 1).all_gpus[0].to_json()] * 100,
                            }
                        ),
                    ),
                )
            )
        ],
        {},
        "at most 16",
    ),
    (
        "signature-missing",
        [
            json.dumps(
                with_annotations(
                    "bad", {c.ANNOTATION_GPU_ASSIGNMENT: encode_assignment(assignment(NODE, 1))}
                )
            )
        ],
        {},
        "has no horus.io/gpu-assignment-signature",
    ),
    (
        "signature-of-other-pod",
        [
            json.dumps(
                with_annotations(
                    "bad",
                    {
                        c.ANNOTATION_GPU_ASSIGNMENT: encode_assignment(assignment(NODE, 1)),
                        c.ANNOTATION_ASSIGNMENT_SIGNATURE: KEY.sign_assignment(
                            "ns", "good", "uid-good", "", 0, encode_assignment(assignment(NODE, 1))
                        ),
                    },
                )
            )
        ],
        {},
        "does not verify",
    ),
    (
        "predicted-deep",
        [
            json.dumps(
                pod_obj(
                    "bad", NODE, assignment(NODE, 1), extra={c.ANNOTATION_PREDICTED: deep(3000)}
                )
            )
        ],
        {},
        "ignoring its prediction",
    ),
    (
        "predicted-nan",
        [
            json.dumps(
                pod_obj(
                    "bad",
                    NODE,
                    assignment(NODE, 1),
                    extra={c.ANNOTATION_PREDICTED: '{"utilMean": NaN}'},
                )
            )
        ],
        {},
        "ignoring its prediction",
    ),
    (
        "simulated-memory-inf",
        [
            json.dumps(
                pod_obj(
                    "bad", NODE, assignment(NODE, 1), extra={c.ANNOTATION_SIMULATED_MEMORY: "inf"}
                )
            )
        ],
        {},
        c.ANNOTATION_SIMULATED_MEMORY,
    ),
    (
        "metadata-string",
        ['{"metadata": "oops", "spec": {}, "status": {"phase": "Running"}}'],
        {},
        "",
    ),
    ("pod-not-an-object", ['"just a string"', "42", "null"], {}, ""),
    (
        "annotations-list",
        ['{"metadata": {"name": "bad", "annotations": [1]}, "status": {}}'],
        {},
        "",
    ),
    (
        "status-list",
        [json.dumps({**pod_obj("bad", NODE, assignment(NODE, 1)), "status": [1]})],
        {},
        "",
    ),
    (
        "dljob-deep-template",
        [json.dumps(job_pod("bad", "train"))],
        {
            DLJOB_PATH: dljob_body(INLINE).replace(
                b'"image": "i"', b'"image": ' + deep(5000).encode()
            )
        },
        "no graph profile",
    ),
    (
        "dljob-not-json",
        [json.dumps(job_pod("bad", "train"))],
        {DLJOB_PATH: b"<html>proxy</html>"},
        "no graph profile",
    ),
    (
        "dljob-nan-profile",
        [json.dumps(job_pod("bad", "train"))],
        {DLJOB_PATH: dljob_body(INLINE.replace("1000000.0", "NaN"))},
        "no graph profile",
    ),
    (
        "dljob-status-garbage",
        [json.dumps(job_pod("bad", "train"))],
        {DLJOB_PATH: dljob_body(INLINE, ', "status": {"phase": [1, {"x": "y"}]}')},
        "",
    ),
    (
        "configmap-deep",
        [json.dumps(job_pod("bad", "train"))],
        {
            DLJOB_PATH: dljob_body('{"configMapRef": {"name": "prof", "key": "p"}}'),
            "/api/v1/namespaces/ns/configmaps/prof": json.dumps(
                {"data": {"p": "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 300))}}
            ).encode(),
        },
        "nested deeper",
    ),
    (
        "configmap-data-list",
        [json.dumps(job_pod("bad", "train"))],
        {
            DLJOB_PATH: dljob_body('{"configMapRef": {"name": "prof", "key": "p"}}'),
            "/api/v1/namespaces/ns/configmaps/prof": b'{"data": ["p"]}',
        },
        "no graph profile",
    ),
    (
        "pod-profile-aliases",
        [
            json.dumps(
                pod_obj(
                    "bad",
                    NODE,
                    assignment(NODE, 0),
                    extra={c.ANNOTATION_GRAPH_PROFILE: "a: &a [1]\nb: *a\n"},
                )
            )
        ],
        {},
        "anchors",
    ),
    *[
        (
            f"pod-configmap-{case}",
            [json.dumps(plain_pod_naming(ref))],
            {"/api/v1/namespaces/ns/configmaps/prof": body} if body is not None else {},
            words,
        )
        for case, ref, body, words in [
            ("missing", "prof", None, "not found"),
            ("no-key", "prof/other", b'{"data": {"p": "x"}}', "no key 'other'"),
            ("data-list", "prof/p", b'{"data": ["p"]}', "no key 'p'"),
            ("not-json", "prof/p", b"<html>proxy</html>", "no graph profile"),
            (
                "deep",
                "prof/p",
                json.dumps(
                    {"data": {"p": "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 300))}}
                ).encode(),
                "nested deeper",
            ),
            ("path-ref", "../../secrets/x", None, "must be '<ConfigMap name>'"),
            ("huge-ref", "x" * 100_000, None, "must be '<ConfigMap name>'"),
        ]
    ],
]


def run_cycles(
    tmp_path: Path, pods_json: list[str], routes: dict[str, bytes], node: bytes | None = None
) -> tuple[Agent, FakeApiClient, list[Any]]:
    key_file = write_public_keys(tmp_path / "keys.pem", KEY)
    items = ", ".join([json.dumps(GOOD), *pods_json])
    api = FakeApiClient(
        {
            "/api/v1/pods": f'{{"items": [{items}]}}'.encode(),
            f"/api/v1/nodes/{NODE}": node if node is not None else node_json(),
            **routes,
        }
    )
    settings = sim_agent_settings(NODE, key_file)
    agent = Agent(settings, AgentApi(api), predictor=lambda: None)
    snaps = [agent.cycle(), agent.cycle()]
    return agent, api, snaps


@pytest.mark.parametrize(("case", "pods", "routes", "words"), CASES, ids=[c[0] for c in CASES])
def test_hostile_object_is_contained(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    case: str,
    pods: list[str],
    routes: dict[str, bytes],
    words: str,
) -> None:
    caplog.set_level(logging.WARNING)
    _agent, _api, snaps = run_cycles(tmp_path, pods, routes)
    for snap in snaps:  # the good pod is read and sampled in both cycles
        assert "uid-good" in snap.pods
        assert any("uid-good" in sample.pods for sample in snap.samples)
    assert "Traceback" not in caplog.text and "cycle failed" not in caplog.text, caplog.text
    if words:
        hits = [r.getMessage() for r in caplog.records if words in r.getMessage()]
        assert len(hits) == 1, caplog.text  # said once, not every cycle
        assert "bad" in hits[0] or "train" in hits[0], hits[0]


@pytest.mark.parametrize(
    ("case", "inventory"),
    [("inventory-deep", deep(4000)), ("inventory-1100-gpus", json.dumps([{}] * 1100))],
    ids=["inventory-deep", "inventory-1100-gpus"],
)
def test_hostile_node_inventory_skips_the_node_not_the_agent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str, inventory: str
) -> None:
    caplog.set_level(logging.WARNING)
    agent, _api, snaps = run_cycles(tmp_path, [], {}, node=node_json(inventory))
    assert all(not snap.samples for snap in snaps)
    hits = [
        r.getMessage() for r in caplog.records if "skipping simulated node n1" in r.getMessage()
    ]
    assert len(hits) == 1, caplog.text
    assert agent.last_snapshot is snaps[-1]  # the loop went on
