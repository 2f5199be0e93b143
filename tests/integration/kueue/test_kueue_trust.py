"""Horus' Kueue decision as an attacker, on the real apiserver with Kueue, JobSet and Trainer
installed from their own manifests (the ``kueue`` fixture).

The chart's ``horus-kueue-decision-annotations`` policy (rendered with the pinned helm on the
dra path, its Binding narrowed to this module's namespace) keeps ``horus.io/kueue-workload``
and ``horus.io/gpu-slots`` — what a pod of a Workload Horus admitted carries, and what gives
it a claim pinned to one of that Workload's slots — to the operator, Kueue and the controllers
that turn templates into pods. A tenant holds the namespace's ``edit`` and Kueue's
``batch-user`` role (JobSets and TrainJobs), so RBAC lets it write every object tried here and
admission is the only refusal; the operator's ServiceAccount gets the very same roles.

Also: Kueue's own RBAC (its viewer roles aggregate to ``edit``) lets the same tenant read its
Workloads but not write them or their status, so it cannot answer its own admission check.
"""

from __future__ import annotations

import copy
import datetime
import functools
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kueue_support import (
    TRAINER_API,
    KueueEnv,
    condition,
    job,
    jobset,
    pod_spec,
    wait_for,
)

from chart_policy import rendered_policy
from horus.common import constants as c
from horus.devcluster import workload_manifests as wm
from horus.devcluster.workload_specs import manifests_dir

ROOT = Path(__file__).resolve().parents[3]
POLICY = "horus-kueue-decision-annotations"
REFUSAL = "only Horus, Kueue and the controllers named in kueue.trustedControllers"
#: Kueue's ClusterRole that lets people run jobs (JobSets and TrainJobs among them), as its
#: kustomization names it (kueue- prefix).
BATCH_USER = "kueue-batch-user-role"
POINTER = "victim/0b7a1a52-0000-4000-8000-000000000001"
SLOTS = '[{"i":0,"node":"n","gpu":0,"uuid":"GPU-0","core":50,"memoryMiB":4096}]'
DECISION = {c.ANNOTATION_KUEUE_WORKLOAD: POINTER, c.ANNOTATION_GANG_SLOTS: SLOTS}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Team:
    """The module's namespace, the tenant's and the operator's tokens, kubectl as each."""

    def __init__(self, env: KueueEnv, namespace: str, runtime: str) -> None:
        self.env = env
        self.namespace = namespace
        self.runtime = runtime
        self.tokens: dict[str, str] = {}

    def admin(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        out: subprocess.CompletedProcess[str] = self.env.kubectl(*args, input=input, check=check)
        return out

    def as_(
        self, who: str, *args: str, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl`` with ``who``'s token only (a refusal is a real one)."""
        out: subprocess.CompletedProcess[str] = self.env.kubectl(
            f"--token={self.tokens[who]}", "-n", self.namespace, *args, check=False, input=input
        )
        return out

    def create(self, who: str, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return self.as_(who, "create", "-f", "-", input=json.dumps(obj))

    def exists(self, kind: str, name: str) -> bool:
        got = self.admin("get", kind, name, "-n", self.namespace, check=False)
        return got.returncode == 0

    def annotations(self, kind: str, name: str) -> dict[str, str]:
        obj = self.env.get(kind, name, self.namespace)
        ann: dict[str, str] = obj["metadata"].get("annotations") or {}
        return ann

    def diagnose(self) -> str:
        out: str = self.env.diagnose(self.namespace)
        return out


@pytest.fixture(scope="module")
def team(kueue: KueueEnv) -> Iterator[Team]:
    ns = kueue.namespace("ktrust")
    # a ClusterTrainingRuntime of this module's own (a copy of the shipped torch-distributed)
    runtimes = manifests_dir(kueue.cluster.bin_dir) / "trainer" / "runtimes"
    [runtime] = wm.load_documents(runtimes / "torch_distributed.yaml")
    runtime = copy.deepcopy(runtime)
    runtime["metadata"] = {"name": f"trust-{ns}"}
    kueue.apply(runtime)
    t = Team(kueue, ns, runtime["metadata"]["name"])
    if t.admin("get", "namespace", c.HORUS_NAMESPACE, check=False).returncode:
        t.admin("create", "namespace", c.HORUS_NAMESPACE, check=False)
    op = c.OPERATOR_SERVICE_ACCOUNT
    if t.admin("get", "sa", op, "-n", c.HORUS_NAMESPACE, check=False).returncode:
        t.admin("create", "sa", op, "-n", c.HORUS_NAMESPACE, check=False)
    t.admin("create", "sa", "tenant", "-n", ns)
    for role in ("edit", BATCH_USER):
        t.admin(
            "create", "rolebinding", role, "-n", ns, f"--clusterrole={role}",
            f"--serviceaccount={ns}:tenant", f"--serviceaccount={c.HORUS_NAMESPACE}:{op}",
        )  # fmt: skip
    t.tokens["tenant"] = t.admin("create", "token", "tenant", "-n", ns).stdout.strip()
    t.tokens["operator"] = t.admin("create", "token", op, "-n", c.HORUS_NAMESPACE).stdout.strip()
    docs = rendered_policy("kueue-policies.yaml", [ns])
    t.admin(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
    )
    try:
        _wait_ready(t)
        yield t
    finally:
        t.admin("delete", "validatingadmissionpolicybinding", POLICY, check=False)
        t.admin("delete", "validatingadmissionpolicy", POLICY, check=False)
        # Trainer keeps a runtime while a TrainJob refers to it (a finalizer)
        t.admin("delete", "trainjobs", "--all", "-n", ns, "--wait=false", check=False)
        t.admin("delete", "clustertrainingruntime", t.runtime, "--wait=false", check=False)


def _pod(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "spec": pod_spec(),
    }


def _with_template_annotations(obj: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    """``obj`` with ``annotations`` on every pod template it has."""
    out = copy.deepcopy(obj)
    spec = out["spec"]
    templates = (
        [r["template"]["spec"]["template"] for r in spec["replicatedJobs"]]
        if out["kind"] == "JobSet"
        else [spec["template"]]
    )
    for t in templates:
        t.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
    return out


def _deployment(name: str, ns: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {**pod_spec(), "restartPolicy": "Always"},
            },
        },
    }


def _cronjob(name: str, ns: str, annotations: dict[str, str]) -> dict[str, Any]:
    """A suspended CronJob whose Jobs' pods would carry ``annotations``."""
    template = _with_template_annotations(_plain_job(name, ns), annotations)["spec"]
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"schedule": "0 0 1 1 *", "suspend": True, "jobTemplate": {"spec": template}},
    }


def _plain_job(name: str, ns: str) -> dict[str, Any]:
    """A Job Kueue leaves alone (no queue name)."""
    j = job(name, ns, "unused")
    del j["metadata"]["labels"]
    return j


def _plain_jobset(name: str, ns: str) -> dict[str, Any]:
    js = jobset(name, ns, "unused", pods=1)
    del js["metadata"]["labels"]
    js["spec"]["suspend"] = True
    return js


def _trainjob(
    name: str, ns: str, runtime: str, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A suspended TrainJob (no queue name); ``annotations`` in a runtime patch's pod template,
    where Kueue puts a check's podSetUpdates."""
    spec: dict[str, Any] = {
        "runtimeRef": {"name": runtime},
        "suspend": True,
        "trainer": {"numNodes": 1, "resourcesPerNode": {"requests": {"cpu": "1"}}},
    }
    if annotations is not None:
        spec["runtimePatches"] = [
            {
                "manager": "example.com/tenant",
                "trainingRuntimeSpec": {
                    "template": {
                        "spec": {
                            "replicatedJobs": [
                                {
                                    "name": "node",
                                    "template": {
                                        "spec": {
                                            "template": {
                                                "metadata": {"annotations": dict(annotations)}
                                            }
                                        }
                                    },
                                }
                            ]
                        }
                    }
                },
            }
        ]
    return {
        "apiVersion": TRAINER_API,
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def _wait_ready(team: Team) -> None:
    """RoleBindings and a policy take effect a moment after they are created (the
    authorizer's and the apiserver's informers; seconds on a loaded machine)."""
    deadline = time.monotonic() + 90
    for resource in ("jobsets.jobset.x-k8s.io", "trainjobs.trainer.kubeflow.org"):
        while team.as_("tenant", "auth", "can-i", "create", resource).stdout.strip() != "yes":
            assert time.monotonic() < deadline, f"the tenant's {BATCH_USER} is not in effect"
            time.sleep(0.5)
    probe = json.dumps(_pod(f"probe-{uuid.uuid4().hex[:4]}", DECISION))
    while True:
        out = team.as_("tenant", "create", "-f", "-", input=probe)
        if out.returncode and REFUSAL in out.stderr:
            return
        if out.returncode == 0:
            team.admin("delete", "-n", team.namespace, "-f", "-", input=probe, check=False)
        assert time.monotonic() < deadline, f"the policy is not enforced: {out.stderr}"
        time.sleep(0.5)


def _refused(out: subprocess.CompletedProcess[str], what: str, *keys: str) -> None:
    assert out.returncode != 0, f"the tenant could {what}: {out.stdout}"
    assert REFUSAL in out.stderr, (what, out.stderr)
    for key in keys:
        assert key in out.stderr, (what, key, out.stderr)


def test_rbac_lets_the_tenant_write_every_kind_tried_so_only_admission_refuses(
    team: Team,
) -> None:
    for resource in (
        "pods",
        "jobs.batch",
        "deployments.apps",
        "statefulsets.apps",
        "jobsets.jobset.x-k8s.io",
        "trainjobs.trainer.kubeflow.org",
    ):
        for verb in ("create", "patch"):
            out = team.as_("tenant", "auth", "can-i", verb, resource)
            assert out.stdout.strip() == "yes", (verb, resource, out.stdout, out.stderr)


def test_the_policy_type_checks_against_every_kind_it_matches(team: Team) -> None:
    """The apiserver type-checks the CEL against the schema of each matched kind (the
    built-in ones and the installed JobSet and Trainer CRDs): no warning."""

    def checked() -> dict[str, Any] | None:
        vap = team.env.get("validatingadmissionpolicy", POLICY)
        status: dict[str, Any] = vap.get("status") or {}
        done = status.get("observedGeneration") == vap["metadata"]["generation"]
        return status if done and "typeChecking" in status else None

    status = wait_for(checked, 60, "the policy's type check")
    assert not status["typeChecking"].get("expressionWarnings"), status["typeChecking"]


def test_a_tenant_cannot_create_a_pod_that_looks_horus_decided(team: Team) -> None:
    ns = team.namespace
    for name, ann in (
        ("forged-pointer", {c.ANNOTATION_KUEUE_WORKLOAD: POINTER}),
        ("forged-slots", {c.ANNOTATION_GANG_SLOTS: SLOTS}),
        ("forged-both", DECISION),
    ):
        out = team.create("tenant", _pod(name, ann))
        _refused(out, f"create pod {name}", *ann, "created a Pod carrying them", f":{ns}:tenant")
        assert not team.exists("pod", name), name


def test_a_tenant_cannot_put_the_decision_into_a_pod_template(team: Team) -> None:
    ns = team.namespace
    slots = {c.ANNOTATION_GANG_SLOTS: SLOTS}
    tries: list[tuple[str, str, dict[str, Any]]] = [
        ("job", "Job", _with_template_annotations(_plain_job("tj", ns), slots)),
        ("deployment", "Deployment", _with_template_annotations(_deployment("td", ns), slots)),
        ("jobset", "JobSet", _with_template_annotations(_plain_jobset("tjs", ns), slots)),
        ("trainjob", "TrainJob", _trainjob("ttj", ns, team.runtime, DECISION)),
    ]
    statefulset = _deployment("tss", ns)
    statefulset["kind"] = "StatefulSet"
    statefulset["spec"]["serviceName"] = "tss"
    tries.append(("statefulset", "StatefulSet", _with_template_annotations(statefulset, slots)))
    tries.append(("cronjob", "CronJob", _cronjob("tcj", ns, slots)))
    for kind, kind_name, obj in tries:
        out = team.create("tenant", obj)
        _refused(out, f"create a {kind}", c.ANNOTATION_GANG_SLOTS, f"a {kind_name} carrying")
        assert not team.exists(kind, obj["metadata"]["name"]), kind
    # ... nor patch them into the templates of a JobSet of its own
    made = team.create("tenant", _plain_jobset("later", ns))
    assert made.returncode == 0, made.stderr
    add = _with_template_annotations(
        _plain_jobset("later", ns), {c.ANNOTATION_KUEUE_WORKLOAD: POINTER}
    )
    patch = {"spec": {"replicatedJobs": add["spec"]["replicatedJobs"]}}
    out = team.as_("tenant", "patch", "jobset", "later", "--type=merge", "-p", json.dumps(patch))
    _refused(out, "patch a jobset's template", c.ANNOTATION_KUEUE_WORKLOAD, "changed a JobSet")
    # ... or of a Deployment of its own
    made = team.create("tenant", _deployment("later", ns, replicas=0))
    assert made.returncode == 0, made.stderr
    patch = {"spec": {"template": {"metadata": {"annotations": slots}}}}
    out = team.as_(
        "tenant", "patch", "deployment", "later", "--type=merge", "-p", json.dumps(patch)
    )
    _refused(out, "patch a deployment's template", c.ANNOTATION_GANG_SLOTS, "changed a Deployment")


def test_a_tenant_cannot_add_change_or_strip_the_decision_on_a_pod(team: Team) -> None:
    ns = team.namespace
    # a tenant's own pod: the decision cannot be added to it
    assert team.create("tenant", _pod("own")).returncode == 0
    for what, out in (
        ("add the pointer", team.as_("tenant", "annotate", "pod", "own", f"{c.ANNOTATION_KUEUE_WORKLOAD}={POINTER}")),
        (
            "add the slots",
            team.as_("tenant", "patch", "pod", "own", "--type=merge", "-p",
                     json.dumps({"metadata": {"annotations": {c.ANNOTATION_GANG_SLOTS: SLOTS}}})),
        ),
    ):  # fmt: skip
        _refused(out, what, "changed a Pod carrying them")
    assert not set(DECISION) & set(team.annotations("pod", "own"))
    # a pod that carries it (made by the operator here, as Kueue's controllers would): the
    # tenant cannot change or strip it, but still labels and annotates the pod otherwise
    made = team.create("operator", _pod("decided", DECISION))
    assert made.returncode == 0, made.stderr
    attempts = [
        ("change the pointer", team.as_("tenant", "annotate", "--overwrite", "pod", "decided",
                                        f"{c.ANNOTATION_KUEUE_WORKLOAD}=other/uid")),
        ("strip the pointer", team.as_("tenant", "annotate", "pod", "decided",
                                       f"{c.ANNOTATION_KUEUE_WORKLOAD}-")),
        (
            "strip the slots by merge patch",
            team.as_("tenant", "patch", "pod", "decided", "--type=merge", "-p",
                     json.dumps({"metadata": {"annotations": {c.ANNOTATION_GANG_SLOTS: None}}})),
        ),
        (
            "change the slots by JSON patch",
            team.as_("tenant", "patch", "pod", "decided", "--type=json", "-p", json.dumps([{
                "op": "replace",
                "path": "/metadata/annotations/horus.io~1gpu-slots",
                "value": "[]",
            }])),
        ),
    ]  # fmt: skip
    for what, out in attempts:
        _refused(out, what, "changed a Pod carrying them")
        assert {k: team.annotations("pod", "decided")[k] for k in DECISION} == DECISION, what
    other = team.as_("tenant", "annotate", "pod", "decided", "team.example/owner=alice")
    assert other.returncode == 0, other.stderr
    labelled = team.as_("tenant", "label", "pod", "decided", "app=train")
    assert labelled.returncode == 0, labelled.stderr
    # the operator may change and remove it; so may a cluster admin (system:masters)
    moved = team.as_("operator", "annotate", "--overwrite", "pod", "decided",
                     f"{c.ANNOTATION_GANG_SLOTS}=[]")  # fmt: skip
    assert moved.returncode == 0, moved.stderr
    stripped = team.as_("operator", "annotate", "pod", "decided", f"{c.ANNOTATION_GANG_SLOTS}-")
    assert stripped.returncode == 0, stripped.stderr
    team.admin("annotate", "pod", "decided", "-n", ns, f"{c.ANNOTATION_KUEUE_WORKLOAD}-")
    assert not set(DECISION) & set(team.annotations("pod", "decided"))


def test_ordinary_pods_and_workloads_are_unchanged(team: Team) -> None:
    """The policy looks at every pod and pod template in the namespace: what carries no Horus
    decision passes, whatever its kind (each kind is a different path of the policy's CEL)."""
    ns = team.namespace
    profile = {c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP: "profile", "team.example/owner": "alice"}
    objs: list[dict[str, Any]] = [
        _pod("plain", profile),
        _with_template_annotations(_plain_job("plain-job", ns), profile),
        _with_template_annotations(_deployment("plain-deploy", ns), profile),
        _with_template_annotations(_plain_jobset("plain-jobset", ns), profile),
        _trainjob("plain-train", ns, team.runtime, profile),
        _trainjob("bare-train", ns, team.runtime),
        _cronjob("plain-cron", ns, profile),
    ]
    for obj in objs:
        out = team.create("tenant", obj)
        assert out.returncode == 0, (obj["kind"], obj["metadata"]["name"], out.stderr)
    # the ReplicaSet's pod (deployment and replicaset controllers) and the Job's pod come up
    wait_for(
        lambda: team.env.list("pods", ns, "app=plain-deploy"),
        60,
        "the Deployment's pod",
        team.diagnose,
    )
    wait_for(
        lambda: team.env.list("pods", ns, "job-name=plain-job"),
        60,
        "the Job's pod",
        team.diagnose,
    )
    scaled = team.as_("tenant", "scale", "deployment", "plain-deploy", "--replicas=2")
    assert scaled.returncode == 0, scaled.stderr
    # the operator may put the decision into a template (it is one of the exempt identities)
    op_job = _with_template_annotations(_plain_job("op-job", ns), DECISION)
    op_job["spec"]["suspend"] = True
    made = team.create("operator", op_job)
    assert made.returncode == 0, made.stderr


def test_kueue_and_the_controllers_still_carry_a_check_answer_to_the_pods(team: Team) -> None:
    """The trusted identities as installed: Kueue copies a Ready check's podSetUpdates into a
    Job's and a JobSet's pod templates, the JobSet controller makes the Jobs, the job
    controller the pods — each write passes the policy and the pods carry the decision."""
    env, ns = team.env, team.namespace
    check = f"trust-{uuid.uuid4().hex[:6]}"
    # a controller name nobody answers: the test answers the check itself, as a cluster admin
    env.admission_check(check, controller="example.com/trust-test")
    team.admin(
        "patch", "admissioncheck", check, "--subresource=status", "--type=merge", "-p",
        json.dumps({"status": {"conditions": [{
            "type": "Active", "status": "True", "reason": "Active",
            "message": "answered by the test", "lastTransitionTime": _now(),
        }]}}),
    )  # fmt: skip
    lq = env.queues(ns, admission_checks=[check])
    made = team.create("tenant", job("queued-job", ns, lq, parallelism=2))
    assert made.returncode == 0, made.stderr
    made = team.create("tenant", jobset("queued-jobset", ns, lq, pods=2))
    assert made.returncode == 0, made.stderr

    def pending(kind: str, name: str) -> dict[str, Any] | None:
        for w in env.workloads(ns):
            owners = w["metadata"].get("ownerReferences") or []
            if not any(o.get("kind") == kind and o.get("name") == name for o in owners):
                continue
            checks = w.get("status", {}).get("admissionChecks") or []
            if checks and checks[0].get("state") == "Pending":
                reserved = condition(w, "QuotaReserved")
                if reserved and reserved["status"] == "True":
                    found: dict[str, Any] = w
                    return found
        return None

    def two_pods(selector: str) -> list[dict[str, Any]] | None:
        pods: list[dict[str, Any]] = env.list("pods", ns, selector)
        return pods if len(pods) == 2 else None

    answered: dict[str, str] = {}
    for kind, name in (("Job", "queued-job"), ("JobSet", "queued-jobset")):
        w = wait_for(
            functools.partial(pending, kind, name),
            90,
            f"{kind} {name}'s check Pending",
            team.diagnose,
        )
        meta = w["metadata"]
        answered[name] = f"{meta['name']}/{meta['uid']}"
        updates = [
            {
                "name": ps["name"],
                "annotations": {
                    c.ANNOTATION_KUEUE_WORKLOAD: answered[name],
                    c.ANNOTATION_GANG_SLOTS: SLOTS,
                },
            }
            for ps in w["spec"]["podSets"]
        ]
        team.admin(
            "patch", "workload", meta["name"], "-n", ns, "--subresource=status",
            "--type=merge", "-p",
            json.dumps({"status": {"admissionChecks": [{
                "name": check, "state": "Ready", "message": "answered by the test",
                "lastTransitionTime": _now(), "podSetUpdates": updates,
            }]}}),
        )  # fmt: skip
    for selector, name in (
        ("job-name=queued-job", "queued-job"),
        ("jobset.sigs.k8s.io/jobset-name=queued-jobset", "queued-jobset"),
    ):
        pods = wait_for(
            functools.partial(two_pods, selector),
            90,
            f"{name}'s two pods, made from the template Kueue wrote",
            team.diagnose,
        )
        for pod in pods:
            ann = pod["metadata"].get("annotations") or {}
            assert ann.get(c.ANNOTATION_KUEUE_WORKLOAD) == answered[name], pod["metadata"]
            assert ann.get(c.ANNOTATION_GANG_SLOTS) == SLOTS, pod["metadata"]
    env.kubectl("delete", "clusterqueue", f"cq-{lq.removeprefix('lq-')}", "--wait=false",
                check=False)  # fmt: skip
    env.kubectl("delete", "admissioncheck", check, "--wait=false", check=False)


def test_a_tenant_cannot_write_its_workloads_or_their_admission_check_state(team: Team) -> None:
    """Kueue's RBAC as shipped: its workload-viewer role aggregates to edit (read only);
    the workload editor is in its batch-admin role, not in edit nor in batch-user."""
    env, ns = team.env, team.namespace
    lq = env.queues(ns, cpu="0")  # no quota: the Workload stays pending, check state and all
    made = team.create("tenant", job("mine", ns, lq))
    assert made.returncode == 0, made.stderr
    w = wait_for(
        lambda: next(
            (
                w
                for w in env.workloads(ns)
                if any(o.get("name") == "mine" for o in w["metadata"].get("ownerReferences") or [])
            ),
            None,
        ),
        60,
        "the Job's Workload",
        team.diagnose,
    )
    name = w["metadata"]["name"]
    for verb, resource in (("get", "workloads"), ("list", "workloads"), ("watch", "workloads")):
        out = team.as_("tenant", "auth", "can-i", verb, f"{resource}.{c.KUEUE_GROUP}")
        assert out.stdout.strip() == "yes", (verb, out.stdout, out.stderr)
    for verb in ("patch", "update", "create", "delete"):
        for sub in ("", "--subresource=status"):
            args = ["auth", "can-i", verb, f"workloads.{c.KUEUE_GROUP}"] + ([sub] if sub else [])
            out = team.as_("tenant", *args)
            assert out.stdout.strip() == "no", (verb, sub, out.stdout, out.stderr)
    got = team.as_("tenant", "get", "workload", name, "-o", "json")
    assert got.returncode == 0, got.stderr
    forged = {
        "status": {
            "admissionChecks": [
                {
                    "name": "horus-gpu",
                    "state": "Ready",
                    "message": "forged",
                    "lastTransitionTime": _now(),
                    "podSetUpdates": [{"name": "main", "annotations": DECISION}],
                }
            ]
        }
    }
    for args in (
        ["--subresource=status", "--type=merge", "-p", json.dumps(forged)],
        ["--type=merge", "-p", json.dumps(forged)],
        ["--type=merge", "-p", json.dumps({"spec": {"active": False}})],
    ):
        out = team.as_("tenant", "patch", "workload", name, *args)
        assert out.returncode != 0 and "forbidden" in out.stderr.lower(), (args, out.stderr)
    after = env.get("workload", name, ns)
    assert "forged" not in json.dumps(after.get("status") or {})
    assert after["spec"].get("active", True) is True
    # the queue objects too: a tenant cannot point its namespace at another ClusterQueue
    lq_patch = json.dumps({"spec": {"clusterQueue": "elsewhere"}})
    out = team.as_("tenant", "patch", "localqueue", lq, "--type=merge", "-p", lq_patch)
    assert out.returncode != 0 and "forbidden" in out.stderr.lower(), out.stderr
