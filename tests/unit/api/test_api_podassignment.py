"""api.podassignment: the one reader of a pod's signed GPU assignment (the device plugin, the
node agent and the operator's live state all ask it)."""

from __future__ import annotations

from typing import Any

import pytest

from horus.api.assignment import GpuAssignment, encode_assignment
from horus.api.podassignment import AssignmentProblem, read_pod_assignment
from horus.api.signing import KeyRing
from horus.common import constants as c

KEY = KeyRing.generate()
OLD = KeyRing.generate()
SHARE = GpuAssignment("n1", "GPU-a", 0, 40, 4096)
TEXT = encode_assignment(SHARE)


OWNER = {"apiVersion": "horus.io/v1", "kind": "DLJob", "uid": "job-1", "controller": True}


def pod(
    annotations: Any, name: str = "p", namespace: str = "ml", uid: str = "uid-p", owner: bool = True
) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": namespace, "name": name, "annotations": annotations}
    meta["uid"] = uid
    if owner:
        meta["ownerReferences"] = [OWNER]
    return {"metadata": meta}


def signed(
    key: KeyRing = KEY, as_pod: str = "p", text: str = TEXT, uid: str = "uid-p", epoch: int = 2
) -> dict[str, str]:
    return {
        c.ANNOTATION_GPU_ASSIGNMENT: text,
        c.ANNOTATION_ASSIGNMENT_SIGNATURE: key.sign_assignment(
            "ml", as_pod, uid, "job-1", epoch, text
        ),
    }


def test_a_signed_assignment_is_trusted_with_its_epoch() -> None:
    read = read_pod_assignment(pod(signed()), KEY)
    assert read.trusted and read.problem is None and read.assignment == SHARE
    assert read.who == "pod ml/p" and read.detail == "" and read.epoch == 2


def test_a_rotation_keeps_the_previous_key_valid() -> None:
    both = KeyRing(KEY.verify.union(OLD.verify), KEY.signer)
    assert read_pod_assignment(pod(signed(OLD)), both).trusted
    assert not read_pod_assignment(pod(signed(OLD)), KEY).trusted


def test_a_replayed_pod_does_not_verify() -> None:
    """The same annotations on a pod re-created under the same name (a new UID), or on a pod
    that no longer names the DLJob it was signed for, are not trusted."""
    annotations = signed()
    assert read_pod_assignment(pod(annotations), KEY).trusted
    replay = read_pod_assignment(pod(annotations, uid="uid-replayed"), KEY)
    assert replay.problem is AssignmentProblem.FORGED and replay.epoch is None
    assert "copied from another or an earlier pod" in replay.detail
    assert not read_pod_assignment(pod(annotations, owner=False), KEY).trusted


@pytest.mark.parametrize(
    ("annotations", "problem", "words"),
    [
        ({}, AssignmentProblem.MISSING, "pod ml/p has no horus.io/gpu-assignment annotation"),
        (
            {c.ANNOTATION_GPU_ASSIGNMENT: "{not json"},
            AssignmentProblem.MALFORMED,
            "pod ml/p annotation horus.io/gpu-assignment: not valid JSON",
        ),
        (
            {c.ANNOTATION_GPU_ASSIGNMENT: TEXT.replace('"corePercent":40', '"corePercent":400')},
            AssignmentProblem.MALFORMED,
            "corePercent",
        ),
        ({c.ANNOTATION_GPU_ASSIGNMENT: 7}, AssignmentProblem.MALFORMED, "not a string"),
        (
            {c.ANNOTATION_GPU_ASSIGNMENT: TEXT},
            AssignmentProblem.UNSIGNED,
            "pod ml/p has no horus.io/gpu-assignment-signature",
        ),
        (
            {c.ANNOTATION_GPU_ASSIGNMENT: TEXT, c.ANNOTATION_ASSIGNMENT_SIGNATURE: ["v1:"]},
            AssignmentProblem.UNSIGNED,
            "has no horus.io/gpu-assignment-signature",
        ),
        (signed(OLD), AssignmentProblem.FORGED, "invalid horus.io/gpu-assignment-signature"),
        (signed(as_pod="q"), AssignmentProblem.FORGED, "copied from another or an earlier pod"),
        (
            {**signed(), c.ANNOTATION_GPU_ASSIGNMENT: TEXT.replace("4096", "8192")},
            AssignmentProblem.FORGED,
            "does not verify for this pod (its UID), its job and its assignment",
        ),
    ],
    ids=[
        "missing",
        "not-json",
        "bad-field",
        "not-a-string",
        "unsigned",
        "signature-not-a-string",
        "other-key",
        "copied",
        "edited",
    ],
)
def test_each_problem_is_named(annotations: Any, problem: AssignmentProblem, words: str) -> None:
    read = read_pod_assignment(pod(annotations), KEY)
    assert not read.trusted and read.problem is problem
    assert words in read.detail, read.detail
    assert read.problem.signature == (problem in ("unsigned", "forged"))
    # a decoded but untrusted assignment is still shown (what the pod claimed)
    assert (read.assignment is not None) == problem.signature


@pytest.mark.parametrize(
    "obj",
    [{}, {"metadata": None}, {"metadata": []}, pod(None), pod(["x"]), pod("text")],
    ids=["no-metadata", "null-metadata", "list-metadata", "null-ann", "list-ann", "str-ann"],
)
def test_a_hostile_object_is_missing_never_an_exception(obj: dict[str, Any]) -> None:
    read = read_pod_assignment(obj, KEY)
    assert read.problem is AssignmentProblem.MISSING


def test_without_keys_the_assignment_is_read_unverified() -> None:
    read = read_pod_assignment(pod({c.ANNOTATION_GPU_ASSIGNMENT: TEXT}), None)
    assert read.trusted and read.assignment == SHARE
    assert read_pod_assignment(pod({}), None).problem is AssignmentProblem.MISSING
