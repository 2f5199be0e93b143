"""Which claim Horus may delete as a pod's placeholder (horus.operator.placeholder_claims):
only the one the resourceclaim controller made from Kueue's template for that very pod, never
allocated — whatever else a tenant names, owns or annotates is left alone."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from test_kueue_check import integration_pod, placeholder

from horus.common import constants as c
from horus.operator.claimcount import converted_claim_name
from horus.operator.placeholder_claims import foreign_claim, is_placeholder

POD = integration_pod("web-1")
UID = POD["metadata"]["uid"]


def test_the_controllers_claim_from_kueues_template_is_the_placeholder() -> None:
    assert is_placeholder(placeholder(POD), UID)


def _allocated(cl: dict[str, Any]) -> None:
    cl["status"] = {"allocation": {"devices": {"results": []}}}


def _other_class(cl: dict[str, Any]) -> None:
    cl["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = c.DRA_DEVICE_CLASS


def _second_request(cl: dict[str, Any]) -> None:
    cl["spec"]["devices"]["requests"].append(
        {"name": "more", "exactly": {"deviceClassName": c.DRA_DEVICE_CLASS}}
    )


def _not_controller(cl: dict[str, Any]) -> None:
    cl["metadata"]["ownerReferences"][0]["controller"] = False


def _other_pod(cl: dict[str, Any]) -> None:
    cl["metadata"]["ownerReferences"][0]["uid"] = "uid-someone-else"


def _other_entry(cl: dict[str, Any]) -> None:
    cl["metadata"]["annotations"][c.POD_CLAIM_ANNOTATION] = "gpu"


@pytest.mark.parametrize(
    "change",
    [_allocated, _other_class, _second_request, _not_controller, _other_pod, _other_entry],
)
def test_anything_else_is_not_a_placeholder(change: Any) -> None:
    claim = copy.deepcopy(placeholder(POD))
    change(claim)
    assert not is_placeholder(claim, UID)


def test_a_kueue_template_pod_is_horus_to_decide_whatever_its_status_records() -> None:
    assert converted_claim_name(POD) == f"{c.CONVERTED_CLAIM_PREFIX}{UID}"


def test_a_recorded_claim_that_is_no_placeholder_is_the_pods_own() -> None:
    claim = placeholder(POD, c.DRA_DEVICE_CLASS)
    claims = {("default", claim["metadata"]["name"]): claim}
    why = foreign_claim(POD, claims)
    assert why is not None and claim["metadata"]["name"] in why
    ok = placeholder(POD)
    assert foreign_claim(POD, {("default", ok["metadata"]["name"]): ok}) is None
    assert foreign_claim(POD, {}) is None  # not listed yet: nothing to tell
