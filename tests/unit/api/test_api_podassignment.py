"""api.podassignment: the one reader of a pod's signed GPU assignment (the device plugin, the
node agent and the operator's live state all ask it)."""

from __future__ import annotations

from typing import Any

import pytest

from horus.api.assignment import GpuAssignment, encode_assignment
from horus.api.podassignment import AssignmentProblem, read_pod_assignment
from horus.api.signing import KeyRing, sign_assignment
from horus.common import constants as c

KEY = b"k" * 32
OLD = b"o" * 32
SHARE = GpuAssignment("n1", "GPU-a", 0, 40, 4096)
TEXT = encode_assignment(SHARE)


def pod(annotations: Any, name: str = "p", namespace: str = "ml") -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "annotations": annotations}}


def signed(key: bytes = KEY, as_pod: str = "p", text: str = TEXT) -> dict[str, str]:
    return {
        c.ANNOTATION_GPU_ASSIGNMENT: text,
        c.ANNOTATION_ASSIGNMENT_SIGNATURE: sign_assignment(key, "ml", as_pod, text),
    }


def test_a_signed_assignment_is_trusted() -> None:
    read = read_pod_assignment(pod(signed()), KeyRing(KEY))
    assert read.trusted and read.problem is None and read.assignment == SHARE
    assert read.who == "pod ml/p" and read.detail == ""


def test_a_rotation_keeps_the_previous_key_valid() -> None:
    assert read_pod_assignment(pod(signed(OLD)), KeyRing(KEY, (OLD,))).trusted
    assert not read_pod_assignment(pod(signed(OLD)), KeyRing(KEY)).trusted


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
        (signed(b"x" * 32), AssignmentProblem.FORGED, "invalid horus.io/gpu-assignment-signature"),
        (signed(as_pod="q"), AssignmentProblem.FORGED, "copied from another pod"),
        (
            {**signed(), c.ANNOTATION_GPU_ASSIGNMENT: TEXT.replace("4096", "8192")},
            AssignmentProblem.FORGED,
            "does not verify for this pod and assignment",
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
    read = read_pod_assignment(pod(annotations), KeyRing(KEY))
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
    read = read_pod_assignment(obj, KeyRing(KEY))
    assert read.problem is AssignmentProblem.MISSING


def test_without_keys_the_assignment_is_read_unverified() -> None:
    read = read_pod_assignment(pod({c.ANNOTATION_GPU_ASSIGNMENT: TEXT}), None)
    assert read.trusted and read.assignment == SHARE
    assert read_pod_assignment(pod({}), None).problem is AssignmentProblem.MISSING
