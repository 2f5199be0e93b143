"""The workload controllers' own manifests, made fit for host processes: pure functions.

Kueue, JobSet and Kubeflow Trainer ship kustomize folders (``config/components/...``,
``manifests/base/...``) that ``tools/controlplane/workloads/build.sh`` copies next to their
binaries. The local cluster runs each controller as a host process, not a Deployment behind a
Service, so these functions do the few things their kustomizations do, and one thing they
cannot:

* :func:`component_documents` reads the files a ``kustomization.yaml`` lists and applies its
  JSON 6902 patches that have a ``target`` (JobSet's pod webhooks get their object selector
  that way, so they see only JobSet's pods);
* :func:`place` does kustomize's ``namePrefix`` and ``namespace`` (names, the ``system``
  namespace placeholder, role references and ServiceAccount subjects);
* :func:`webhooks_to_url` turns every webhook's ``clientConfig.service`` into
  ``url: https://127.0.0.1:<port><path>`` with the cluster CA's bundle: the apiserver runs on
  this host and reaches the controller's webhook server there; nothing else changes (rules,
  failure policies, selectors stay upstream's);
* :func:`crd_conversion_to_url` does the same for the CRD conversion webhooks a CRD patch
  declares;
* :func:`kueue_config`, :func:`jobset_config` and :func:`trainer_config` render each
  controller's configuration file: its own serving certificate (internal certificate
  management off), webhook, metrics and health servers on 127.0.0.1 ports of their own, no
  leader election (one process per cluster).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from horus.common import constants as c
from horus.common.errors import ClusterError

#: Kinds whose objects live in a namespace (what :func:`place` gives one).
NAMESPACED_KINDS = frozenset(
    {"ServiceAccount", "Role", "RoleBinding", "Service", "Secret", "ConfigMap", "Deployment"}
)
#: Kinds :func:`place` prefixes (kustomize's namePrefix; CRDs keep their names).
PREFIXED_KINDS = NAMESPACED_KINDS | {
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
}
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
#: The namespaces whose Jobs and pods Kueue never manages here: the cluster's own, Kueue's, and
#: Horus' (a pod webhook that fails closed must not stand between Horus and its own pods).
KUEUE_EXCLUDED_NAMESPACES = ("kube-system", "kueue-system", "horus-system")
#: Kueue's integrations the local cluster enables (names as Kueue's configuration spells them).
KUEUE_FRAMEWORKS = (
    "batch/job",
    "jobset.x-k8s.io/jobset",
    "trainer.kubeflow.org/trainjob",
    "pod",
    "deployment",
    "statefulset",
)
#: Kueue's feature gates that differ from its defaults. VisibilityOnDemand (the pending
#: workloads API) is off: its server reads a certificate from the fixed path
#: ``/visibility/tls.crt`` when internal certificate management is off, and it is only reachable
#: through an APIService, which needs a Service with in-cluster endpoints that a host process
#: cannot have (the apiserver refuses loopback endpoints).
KUEUE_FEATURE_GATES = {"VisibilityOnDemand": False}
#: What Kueue counts for a pod of its pod integrations that asks for a Horus share: the
#: template entry the admission policy gives it (one device of Horus' Kueue DeviceClass) as one
#: ``horus.io/gpu-shares`` (docs/kueue.md).
KUEUE_HORUS_DEVICE_CLASS_MAPPING = {
    "name": c.KUEUE_SHARES_RESOURCE,
    "deviceClassNames": [c.KUEUE_DEVICE_CLASS],
}
#: libyaml's safe loader where PyYAML has it (the CRDs are megabytes of YAML)
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: The longest manifest file read (the largest shipped CRD is well under it).
MAX_MANIFEST_BYTES = 8 * 1024 * 1024


def load_documents(path: Path) -> list[dict[str, Any]]:
    """The YAML documents of ``path`` (empty ones dropped); a bad file is a one-line error."""
    try:
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise ClusterError(f"{path}: larger than {MAX_MANIFEST_BYTES} bytes")
        docs = list(yaml.load_all(path.read_text(), Loader=_LOADER))
    except (OSError, yaml.YAMLError) as e:
        raise ClusterError(f"{path}: cannot read manifest: {str(e).splitlines()[0]}") from None
    out = []
    for doc in docs:
        if doc is None:
            continue
        if not isinstance(doc, dict) or "kind" not in doc:
            raise ClusterError(f"{path}: a document is not a Kubernetes object")
        out.append(doc)
    return out


def kustomization(folder: Path) -> dict[str, Any]:
    """``folder``'s ``kustomization.yaml`` (which often has no ``kind``)."""
    path = folder / "kustomization.yaml"
    if not path.is_file():
        raise ClusterError(f"{folder}: no kustomization.yaml (was the workloads build complete?)")
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ClusterError(f"{path}: {str(e).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise ClusterError(f"{path}: not a kustomization")
    return doc


def component_documents(folder: Path) -> list[dict[str, Any]]:
    """Every object the files in ``folder``'s ``kustomization.yaml`` ``resources`` hold (files
    only, not sub-folders), with its JSON 6902 patches that name a ``target`` applied."""
    kust = kustomization(folder)
    docs: list[dict[str, Any]] = []
    for res in kust.get("resources") or []:
        path = folder / str(res)
        if path.is_file():
            docs.extend(load_documents(path))
    for patch in kust.get("patches") or []:
        if not isinstance(patch, dict) or "target" not in patch or "path" not in patch:
            continue
        ops = yaml.safe_load((folder / str(patch["path"])).read_text())
        if not isinstance(ops, list):
            continue  # a strategic-merge patch: the callers do what those ones do
        target = patch["target"]
        for doc in docs:
            if doc.get("kind") == target.get("kind") and target.get("name") in (
                None,
                doc["metadata"].get("name"),
            ):
                apply_json_patch(doc, ops)
    return docs


def apply_json_patch(doc: dict[str, Any], ops: Sequence[Mapping[str, Any]]) -> None:
    """The ``add`` and ``replace`` operations of a JSON patch (RFC 6902), in place."""
    for op in ops:
        if op.get("op") not in ("add", "replace"):
            raise ClusterError(f"JSON patch op {op.get('op')!r} is not supported here")
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op["path"]).split("/")[1:]]
        node: Any = doc
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        last = parts[-1]
        value = copy.deepcopy(op.get("value"))
        if isinstance(node, list):
            if last == "-":
                node.append(value)
            elif op["op"] == "add":
                node.insert(int(last), value)
            else:
                node[int(last)] = value
        else:
            node[last] = value


def place(docs: Iterable[dict[str, Any]], prefix: str, namespace: str) -> list[dict[str, Any]]:
    """Copies of ``docs`` as kustomize's ``namePrefix: prefix`` and ``namespace: namespace``
    make them: names of RBAC objects, ServiceAccounts and webhook configurations prefixed,
    namespaced objects in ``namespace``, role references and ServiceAccount subjects
    following."""
    out = []
    for original in docs:
        doc = copy.deepcopy(original)
        kind = doc.get("kind")
        meta = doc.setdefault("metadata", {})
        if kind in PREFIXED_KINDS and not meta["name"].startswith(prefix):
            meta["name"] = prefix + meta["name"]
        if kind in NAMESPACED_KINDS:
            meta["namespace"] = namespace
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            ref = doc["roleRef"]
            if not ref["name"].startswith(prefix):
                ref["name"] = prefix + ref["name"]
            for subject in doc.get("subjects") or []:
                if subject.get("kind") == "ServiceAccount":
                    if not subject["name"].startswith(prefix):
                        subject["name"] = prefix + subject["name"]
                    subject["namespace"] = namespace
        out.append(doc)
    return out


def webhooks_to_url(
    docs: Iterable[dict[str, Any]],
    base_url: str,
    ca_bundle_b64: str,
    namespace_selector: Mapping[str, Any] | None = None,
    selector_skips_group: str | None = None,
) -> list[dict[str, Any]]:
    """Copies of the webhook configurations in ``docs``, each webhook calling
    ``base_url`` + its service path with ``ca_bundle_b64``; other documents are dropped.

    ``namespace_selector`` is set on every webhook whose rules name no ``selector_skips_group``
    resource (Kueue's kustomization gives its job and pod webhooks, not those of its own
    objects, one namespace selector)."""
    out = []
    for original in docs:
        if original.get("kind") not in WEBHOOK_KINDS:
            continue
        doc = copy.deepcopy(original)
        for hook in doc.get("webhooks") or []:
            service = (hook.get("clientConfig") or {}).get("service") or {}
            if "path" not in service:
                raise ClusterError(
                    f"webhook {hook.get('name')}: clientConfig has no service path to rewrite"
                )
            hook["clientConfig"] = {"url": base_url + service["path"], "caBundle": ca_bundle_b64}
            groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
            if namespace_selector is not None and selector_skips_group not in groups:
                hook["namespaceSelector"] = copy.deepcopy(dict(namespace_selector))
        out.append(doc)
    return out


def cluster_rbac_names(docs: Iterable[dict[str, Any]]) -> list[str]:
    """``<resource>/<name>`` of the cluster-scoped RBAC objects in ``docs`` (for deleting)."""
    return [
        f"{d['kind'].lower()}s.rbac.authorization.k8s.io/{d['metadata']['name']}"
        for d in docs
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding")
    ]


def crd_conversion_to_url(
    crd: dict[str, Any], patch: Mapping[str, Any], url: str, ca_bundle_b64: str
) -> dict[str, Any]:
    """A copy of ``crd`` with the conversion webhook ``patch`` (a CRD strategic-merge patch
    as Kueue ships them) calling ``url`` with ``ca_bundle_b64``."""
    doc = copy.deepcopy(crd)
    conversion = copy.deepcopy(dict(patch["spec"]["conversion"]))
    webhook = conversion.setdefault("webhook", {})
    webhook["clientConfig"] = {"url": url, "caBundle": ca_bundle_b64}
    doc["spec"]["conversion"] = conversion
    return doc


def excluded_namespaces_selector(names: Sequence[str]) -> dict[str, Any]:
    """A namespace selector for every namespace except ``names``."""
    return {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(names)}
        ]
    }


def kueue_config(
    *,
    namespace: str,
    cert_dir: Path,
    webhook_port: int,
    metrics_port: int,
    health_port: int,
    visibility_port: int,
    frameworks: Sequence[str] = KUEUE_FRAMEWORKS,
    excluded_namespaces: Sequence[str] = KUEUE_EXCLUDED_NAMESPACES,
) -> dict[str, Any]:
    """Kueue's Configuration (``config.kueue.x-k8s.io/v1beta2``, what v0.19 reads): upstream's
    defaults but for the serving certificate Horus issues, 127.0.0.1 ports, no leader election,
    the integrations of :data:`KUEUE_FRAMEWORKS`, jobs without a queue name left alone,
    :data:`KUEUE_FEATURE_GATES`, and Horus' DeviceClass for Kueue counted
    (:data:`KUEUE_HORUS_DEVICE_CLASS_MAPPING`)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": namespace,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": excluded_namespaces_selector(excluded_namespaces),
        "visibilityServer": {"bindAddress": "127.0.0.1", "bindPort": visibility_port},
        "integrations": {"frameworks": list(frameworks)},
        "featureGates": dict(KUEUE_FEATURE_GATES),
        "resources": {"deviceClassMappings": [dict(KUEUE_HORUS_DEVICE_CLASS_MAPPING)]},
    }


def merged(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``overrides`` merged in: mappings key by key, anything else
    (lists too) replaced."""
    out = copy.deepcopy(dict(base))
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def jobset_config(
    *, cert_dir: Path, webhook_port: int, metrics_port: int, health_port: int
) -> dict[str, Any]:
    """JobSet's Configuration (``config.jobset.x-k8s.io/v1alpha1``): Horus' serving
    certificate, 127.0.0.1 ports, no leader election."""
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
    }


def trainer_config(
    *, webhook_port: int, metrics_port: int, health_port: int, status_port: int
) -> dict[str, Any]:
    """Kubeflow Trainer's Configuration (``config.trainer.kubeflow.org/v1alpha1``): 127.0.0.1
    ports, no leader election, certificate management off. It has no certificate folder
    setting: its webhook server reads controller-runtime's default,
    ``$TMPDIR/k8s-webhook-server/serving-certs``, where the caller puts Horus' certificate."""
    return {
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
        "kind": "Configuration",
        "health": {
            "healthProbeBindAddress": f"127.0.0.1:{health_port}",
            "readinessEndpointName": "readyz",
            "livenessEndpointName": "healthz",
        },
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}", "secureServing": True},
        "webhook": {"port": webhook_port, "host": "127.0.0.1"},
        "leaderElection": {"leaderElect": False},
        "certManagement": {"enable": False},
        "statusServer": {"port": status_port},
    }
