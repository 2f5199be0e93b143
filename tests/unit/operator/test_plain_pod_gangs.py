"""Gangs of plain pods without Kueue (horus.operator.plain_pod_gangs) in whole reconcile passes
on the in-memory API: all pods of a gang get their claims in one decision or none does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fakeapi import FakeJobApi
from opfixtures import KEY
from test_operator_dra_commit_claims import dra_api, generated_pod, job, pinned

from horus.common import constants as c
from horus.operator.plain_pod_gangs import REASON_GANG_INVALID, REASON_GANG_WAITING
from horus.operator.reconcile import Reconciler
from horus.predictor import load_default_predictor

PREDICTOR = load_default_predictor()


@pytest.fixture
def api() -> FakeJobApi:
    return dra_api("n1", "n2")


@pytest.fixture
def rec(api: FakeJobApi) -> Iterator[Reconciler]:
    r = Reconciler(api, PREDICTOR, KEY, workers=4, placement_path=c.PLACEMENT_PATH_DRA)
    yield r
    r.close()


def member(name: str, gang: str = "train", size: int | str = 4, core: int = 40) -> dict[str, Any]:
    pod = generated_pod(name, core, 64)
    pod["metadata"]["labels"] = {c.LABEL_GANG_NAME: gang}
    pod["metadata"]["annotations"][c.ANNOTATION_GANG_SIZE] = str(size)
    return pod


def add(api: FakeJobApi, pod: dict[str, Any]) -> None:
    api.pods[("default", pod["metadata"]["name"])] = pod


def said(rec: Reconciler, api: FakeJobApi, reason: str) -> list[str]:
    rec.writer.drain()
    return [str(e.get("message")) for e in api.events if e.get("reason") == reason]


def test_a_gang_waits_until_all_its_pods_are_there_then_all_get_gpus(
    api: FakeJobApi, rec: Reconciler
) -> None:
    for i in range(3):
        add(api, member(f"train-w-{i}"))
    assert rec.run_pass().claims_created == 0
    assert any("3 of 4 pods wait" in m for m in said(rec, api, REASON_GANG_WAITING))
    add(api, member("train-w-3"))
    assert rec.run_pass().claims_created == 4
    gpus = {pinned(cl).split('"')[-2] for cl in api.claims.values()}
    assert len(gpus) == 4  # one GPU each: the gang spans both nodes
    assert rec.run_pass().claims_created == 0


def test_with_room_for_three_no_pod_of_the_gang_gets_a_gpu(
    api: FakeJobApi, rec: Reconciler
) -> None:
    api.add_dljob(job("whole", core=100, mem=20000))
    rec.run_pass()
    for i in range(4):
        add(api, member(f"train-w-{i}"))
    assert rec.run_pass().claims_created == 0
    assert not [k for k in api.claims if k[1].startswith("horus-gpu-uid-train")]
    rec.writer.drain()
    refused = [
        e["message"] for e in api.events if "does not fit as a whole" in str(e.get("message"))
    ]
    assert len(refused) == 4  # each pod is told
    # without the gang label the same pods are placed one by one: all four get a claim, two
    # of them sharing a GPU (a gang's replicas never share one: each worker gets its own GPU)
    for i in range(4):
        del api.pods[("default", f"train-w-{i}")]
        add(api, generated_pod(f"solo-w-{i}", 40, 64))
    assert rec.run_pass().claims_created == 4
    solo = [pinned(cl) for k, cl in api.claims.items() if k[1].startswith("horus-gpu-uid-solo")]
    assert len(set(solo)) == 3


def test_a_replacement_pod_of_a_placed_gang_is_decided_alone(
    api: FakeJobApi, rec: Reconciler
) -> None:
    for i in range(2):
        add(api, member(f"pair-w-{i}", "pair", 2))
    assert rec.run_pass().claims_created == 2
    api.pods[("default", "pair-w-1")]["status"]["phase"] = "Failed"
    add(api, member("pair-w-2", "pair", 2))
    assert rec.run_pass().claims_created == 1


@pytest.mark.parametrize(
    ("sizes", "why"),
    [((4, 4, 4, 3), "the same whole number"), (("x", "x", "x", "x"), "the same whole number")],
)
def test_a_gang_with_bad_sizes_is_told_and_places_nothing(
    api: FakeJobApi, rec: Reconciler, sizes: tuple[Any, ...], why: str
) -> None:
    for i, size in enumerate(sizes):
        add(api, member(f"bad-w-{i}", "bad", size))
    assert rec.run_pass().claims_created == 0
    assert any(why in m for m in said(rec, api, REASON_GANG_INVALID))


def test_more_pods_than_the_gang_size_places_none(api: FakeJobApi, rec: Reconciler) -> None:
    for i in range(3):
        add(api, member(f"over-w-{i}", "over", 2))
    assert rec.run_pass().claims_created == 0
    assert any("3 pods wait but" in m for m in said(rec, api, REASON_GANG_INVALID))


def test_gangs_are_per_namespace(api: FakeJobApi, rec: Reconciler) -> None:
    add(api, member("a-w-0", "g", 2))
    other = member("b-w-0", "g", 2)
    other["metadata"]["namespace"] = "other"
    api.pods[("other", "b-w-0")] = other
    assert rec.run_pass().claims_created == 0  # one pod of "g" in each namespace: neither is whole
