"""The agent verifies with the published public keys only and picks up a new one without a
restart (the mounted ConfigMap changes: the new key is added, the old one stays until an
administrator removes it). Runs whole agent cycles; the apiserver is replaced at the ApiClient
seam."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import KEY, NodeApiserver, assignment, pod_obj, sim_agent_settings

from horus.agent.agent import Agent
from horus.agent.kube import AgentApi
from horus.api.signing import KeyRing
from horus.common import constants as c
from signing_keys import OTHER, sign_pod, write_public_keys

NODE = "n1"
NEW = OTHER


def signed_pod(name: str, key: KeyRing, gpu: int) -> dict[str, Any]:
    return sign_pod(pod_obj(name, NODE, assignment(NODE, gpu), sign=False), key)


def test_a_rotated_key_is_used_from_the_next_cycle(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key_file = write_public_keys(tmp_path / "keys.pem", KEY)
    api = NodeApiserver(NODE)
    api.pods = [signed_pod("before", KEY, 0), signed_pod("after", NEW, 1)]
    settings = sim_agent_settings(NODE, key_file)
    agent = Agent(settings, AgentApi(api), predictor=lambda: None)
    assert set(agent.cycle().pods) == {"uid-before"}  # the new key is not published yet
    # the new public key is published beside the old one
    write_public_keys(key_file, NEW, KEY)
    assert set(agent.cycle().pods) == {"uid-before", "uid-after"}
    # an administrator revokes the old key: the running pod it signed stays enforced with the
    # share it verified with (revoking never un-polices a pod); a new one it signed gets none
    write_public_keys(key_file, NEW)
    api.pods.append(signed_pod("late", KEY, 1))
    assert set(agent.cycle().pods) == {"uid-before", "uid-after"}
    api.pods.pop()
    # an unreadable key file keeps the ring in use, said once
    key_file.write_text("-----BEGIN PUBLIC KEY-----\ngarbage\n-----END PUBLIC KEY-----\n")
    with caplog.at_level(logging.WARNING):
        assert set(agent.cycle().pods) == {"uid-before", "uid-after"}
        assert set(agent.cycle().pods) == {"uid-before", "uid-after"}
    said = [
        r.getMessage()
        for r in caplog.records
        if "verifying with the key read before" in r.getMessage()
    ]
    assert len(said) == 1 and "not a PEM public key" in said[0]


def test_an_edited_assignment_is_enforced_as_it_verified(tmp_path: Path) -> None:
    """Issue 24: a tenant raised memoryMiB in its running pod's assignment (or stripped the
    signature). The agent holds only public keys; it keeps enforcing and reporting the share
    that verified, never the one claimed now, and never leaves the pod unpoliced."""
    key_file = write_public_keys(tmp_path / "keys.pem", KEY)
    api = NodeApiserver(NODE)
    pod = signed_pod("p", KEY, 0)
    api.pods = [pod]
    agent = Agent(sim_agent_settings(NODE, key_file), AgentApi(api), predictor=lambda: None)
    assert agent.cycle().pods["uid-p"].assignment.memory_mib == 2048
    ann = pod["metadata"]["annotations"]
    ann[c.ANNOTATION_GPU_ASSIGNMENT] = ann[c.ANNOTATION_GPU_ASSIGNMENT].replace("2048", "81920")
    assert agent.cycle().pods["uid-p"].assignment.memory_mib == 2048
    del ann[c.ANNOTATION_ASSIGNMENT_SIGNATURE]
    assert agent.cycle().pods["uid-p"].assignment.memory_mib == 2048
    # a pod never seen verified gets nothing from its claim
    api.pods = [pod, pod_obj("q", NODE, assignment(NODE, 1), sign=False)]
    assert set(agent.cycle().pods) == {"uid-p"}


def test_the_agent_starts_before_the_keys_are_published(tmp_path: Path) -> None:
    """First install: the node pods may start before the operator published its key (the
    ConfigMap is mounted optional). The agent runs, verifies nothing, and picks the keys up."""
    key_file = tmp_path / "keys.pem"
    api = NodeApiserver(NODE)
    api.pods = [signed_pod("p", KEY, 0)]
    agent = Agent(sim_agent_settings(NODE, key_file), AgentApi(api), predictor=lambda: None)
    assert agent.cycle().pods == {}
    write_public_keys(key_file, KEY)
    assert set(agent.cycle().pods) == {"uid-p"}
