"""``horus dev workloads``: its arguments, and the pure rewriting of Kueue's, JobSet's and
Trainer's manifests and configuration files for host processes (no cluster)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from horus.cli import build_parser
from horus.common.errors import ClusterError
from horus.devcluster import workload_manifests as wm
from horus.devcluster.commands import WORKLOAD_CONTROLLERS, workload_names
from horus.devcluster.workload_specs import ORDER, kueue_argv, service_dns_names

CA = "Q0E="


def _hook(name: str, path: str, group: str, resource: str) -> dict[str, Any]:
    return {
        "admissionReviewVersions": ["v1"],
        "clientConfig": {
            "service": {"name": "webhook-service", "namespace": "system", "path": path}
        },
        "failurePolicy": "Fail",
        "name": name,
        "rules": [
            {
                "apiGroups": [group],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": [resource],
            }
        ],
        "sideEffects": "None",
    }


def _mutating() -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "mutating-webhook-configuration"},
        "webhooks": [
            _hook("mjob.kb.io", "/mutate-batch-v1-job", "batch", "jobs"),
            _hook(
                "mworkload.kb.io",
                "/mutate-kueue-x-k8s-io-v1beta2-workload",
                "kueue.x-k8s.io",
                "workloads",
            ),
        ],
    }


def test_parser_accepts_workloads_actions() -> None:
    parser = build_parser()
    args = parser.parse_args(
        ["dev", "workloads", "--dir", "/tmp/c", "up", "--only", "kueue,jobset"]
    )
    assert args.only == ("kueue", "jobset") and args.dir == Path("/tmp/c")
    assert parser.parse_args(["dev", "workloads", "up"]).only == WORKLOAD_CONTROLLERS
    assert parser.parse_args(["dev", "workloads", "status", "--json"]).json is True
    assert parser.parse_args(["dev", "workloads", "down"]).handler.__name__ == "_workloads_down"


@pytest.mark.parametrize("raw", ["", ",", "kueue,volcano", "KUEUE"])
def test_only_refuses_unknown_controllers(raw: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="subset of jobset,trainer,kueue"):
        workload_names(raw)


def test_only_keeps_order_given_without_duplicates() -> None:
    assert workload_names(" trainer , kueue,trainer") == ("trainer", "kueue")


def test_cli_and_installer_agree_on_controllers() -> None:
    assert WORKLOAD_CONTROLLERS == ORDER


def test_webhooks_point_at_localhost_with_ca_and_nothing_else_changes() -> None:
    original = _mutating()
    selector = wm.excluded_namespaces_selector(wm.KUEUE_EXCLUDED_NAMESPACES)
    [out] = wm.webhooks_to_url(
        [original, {"kind": "Service", "metadata": {"name": "x"}}],
        "https://127.0.0.1:9443",
        CA,
        namespace_selector=selector,
        selector_skips_group="kueue.x-k8s.io",
    )
    job, workload = out["webhooks"]
    assert job["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate-batch-v1-job",
        "caBundle": CA,
    }
    assert job["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "kube-system",
        "kueue-system",
        "horus-system",
    ]
    assert "namespaceSelector" not in workload  # Kueue's own objects keep upstream's
    assert workload["clientConfig"]["url"].endswith("/mutate-kueue-x-k8s-io-v1beta2-workload")
    for key in ("rules", "failurePolicy", "sideEffects", "name", "admissionReviewVersions"):
        assert job[key] == original["webhooks"][0][key]
    assert original["webhooks"][0]["clientConfig"]["service"]["name"] == "webhook-service"


def test_a_webhook_without_service_path_is_refused() -> None:
    doc = _mutating()
    doc["webhooks"][0]["clientConfig"] = {"url": "https://elsewhere"}
    with pytest.raises(ClusterError, match=r"mjob\.kb\.io"):
        wm.webhooks_to_url([doc], "https://127.0.0.1:1", CA)


def test_place_prefixes_names_and_follows_references() -> None:
    docs = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "controller-manager", "namespace": "system"},
        },
        {
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "manager-rolebinding"},
            "roleRef": {"kind": "ClusterRole", "name": "manager-role"},
            "subjects": [
                {"kind": "ServiceAccount", "name": "controller-manager", "namespace": "system"}
            ],
        },
        {"kind": "CustomResourceDefinition", "metadata": {"name": "jobsets.jobset.x-k8s.io"}},
    ]
    sa, binding, crd = wm.place(docs, "kueue-", "kueue-system")
    assert sa["metadata"] == {"name": "kueue-controller-manager", "namespace": "kueue-system"}
    assert binding["roleRef"]["name"] == "kueue-manager-role"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "kueue-controller-manager", "namespace": "kueue-system"}
    ]
    assert "namespace" not in binding["metadata"]
    assert crd["metadata"]["name"] == "jobsets.jobset.x-k8s.io"
    assert docs[0]["metadata"]["name"] == "controller-manager"  # copies, not in place
    assert wm.place(wm.place(docs, "kueue-", "k"), "kueue-", "k")[0]["metadata"]["name"] == (
        "kueue-controller-manager"
    )


def test_cluster_rbac_names_are_what_down_deletes() -> None:
    docs = [
        {"kind": "ClusterRole", "metadata": {"name": "kueue-manager-role"}},
        {"kind": "ClusterRoleBinding", "metadata": {"name": "kueue-manager-rolebinding"}},
        {"kind": "Role", "metadata": {"name": "kueue-leader-election-role"}},
    ]
    assert wm.cluster_rbac_names(docs) == [
        "clusterroles.rbac.authorization.k8s.io/kueue-manager-role",
        "clusterrolebindings.rbac.authorization.k8s.io/kueue-manager-rolebinding",
    ]


def test_component_documents_applies_targeted_json_patches(tmp_path: Path) -> None:
    (tmp_path / "manifests.yaml").write_text(yaml.safe_dump(_mutating()))
    (tmp_path / "patch.yaml").write_text(
        yaml.safe_dump(
            [
                {
                    "op": "replace",
                    "path": "/webhooks/1/objectSelector",
                    "value": {"matchExpressions": [{"key": "a", "operator": "Exists"}]},
                },
                {"op": "add", "path": "/metadata/labels", "value": {"x": "y"}},
            ]
        )
    )
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": ["manifests.yaml", "../elsewhere"],
                "patches": [
                    {
                        "path": "patch.yaml",
                        "target": {
                            "kind": "MutatingWebhookConfiguration",
                            "name": "mutating-webhook-configuration",
                        },
                    }
                ],
            }
        )
    )
    [doc] = wm.component_documents(tmp_path)
    assert doc["webhooks"][1]["objectSelector"]["matchExpressions"][0]["key"] == "a"
    assert doc["metadata"]["labels"] == {"x": "y"}


def test_json_patch_refuses_other_ops() -> None:
    with pytest.raises(ClusterError, match="remove"):
        wm.apply_json_patch({"a": 1}, [{"op": "remove", "path": "/a"}])


def test_missing_kustomization_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"no kustomization\.yaml"):
        wm.component_documents(tmp_path / "nope")


def test_crd_conversion_points_at_localhost() -> None:
    crd = {
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "workloads.kueue.x-k8s.io"},
        "spec": {"group": "kueue.x-k8s.io"},
    }
    patch = {
        "spec": {
            "conversion": {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {
                        "service": {
                            "name": "webhook-service",
                            "namespace": "system",
                            "path": "/convert",
                        }
                    },
                    "conversionReviewVersions": ["v1"],
                },
            }
        }
    }
    out = wm.crd_conversion_to_url(crd, patch, "https://127.0.0.1:9/convert", CA)
    assert out["spec"]["conversion"] == {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {"url": "https://127.0.0.1:9/convert", "caBundle": CA},
            "conversionReviewVersions": ["v1"],
        },
    }
    assert "conversion" not in crd["spec"]


def test_kueue_config_is_upstream_but_local() -> None:
    cfg = wm.kueue_config(
        namespace="kueue-system",
        cert_dir=Path("/c/kueue/certs"),
        webhook_port=20001,
        metrics_port=20002,
        health_port=20003,
        visibility_port=20004,
    )
    assert cfg["apiVersion"] == "config.kueue.x-k8s.io/v1beta2" and cfg["kind"] == "Configuration"
    assert cfg["webhook"] == {"port": 20001, "host": "127.0.0.1", "certDir": "/c/kueue/certs"}
    assert cfg["metrics"]["bindAddress"] == "127.0.0.1:20002"
    assert cfg["health"]["healthProbeBindAddress"] == "127.0.0.1:20003"
    assert cfg["visibilityServer"] == {"bindAddress": "127.0.0.1", "bindPort": 20004}
    assert cfg["internalCertManagement"] == {"enable": False}
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["manageJobsWithoutQueueName"] is False
    assert cfg["integrations"]["frameworks"] == [
        "batch/job",
        "jobset.x-k8s.io/jobset",
        "trainer.kubeflow.org/trainjob",
        "pod",
        "deployment",
        "statefulset",
    ]
    excluded = cfg["managedJobsNamespaceSelector"]["matchExpressions"][0]
    assert excluded["operator"] == "NotIn" and "kube-system" in excluded["values"]
    assert cfg["featureGates"] == {"VisibilityOnDemand": False}  # the rest: upstream's defaults


def test_kueue_overrides_merge_into_the_config() -> None:
    cfg = wm.kueue_config(
        namespace="kueue-system",
        cert_dir=Path("/c"),
        webhook_port=1,
        metrics_port=2,
        health_port=3,
        visibility_port=4,
    )
    mapping = [{"name": "horus.io/gpu", "deviceClassNames": ["gpu.horus.io"]}]
    out = wm.merged(
        cfg,
        {
            "resources": {"deviceClassMappings": mapping},
            "featureGates": {"KueueDRAIntegration": False},
            "integrations": {"frameworks": ["batch/job"]},
        },
    )
    assert out["resources"]["deviceClassMappings"] == mapping
    assert out["featureGates"] == {"VisibilityOnDemand": False, "KueueDRAIntegration": False}
    assert out["integrations"]["frameworks"] == ["batch/job"]  # lists are replaced
    assert out["webhook"] == cfg["webhook"]
    assert cfg["resources"]["deviceClassMappings"] == [
        wm.KUEUE_HORUS_DEVICE_CLASS_MAPPING
    ]  # a copy


def test_jobset_and_trainer_configs_are_local() -> None:
    js = wm.jobset_config(cert_dir=Path("/c/j"), webhook_port=1, metrics_port=2, health_port=3)
    assert js["apiVersion"] == "config.jobset.x-k8s.io/v1alpha1"
    assert js["internalCertManagement"] == {"enable": False}
    assert js["webhook"]["certDir"] == "/c/j"
    tr = wm.trainer_config(webhook_port=1, metrics_port=2, health_port=3, status_port=4)
    assert tr["apiVersion"] == "config.trainer.kubeflow.org/v1alpha1"
    assert tr["certManagement"] == {"enable": False}
    assert tr["webhook"] == {"port": 1, "host": "127.0.0.1"}  # no certDir field in its API
    for cfg in (js, tr):
        assert cfg["leaderElection"] == {"leaderElect": False}
        assert cfg["metrics"]["bindAddress"] == "127.0.0.1:2"


def test_kueue_runs_in_its_own_mount_namespace(tmp_path: Path) -> None:
    argv = kueue_argv(
        Path("/bin/kueue"), tmp_path / "config.yaml", tmp_path / "kc", tmp_path / "ov"
    )
    assert argv[0] == "unshare" and "--mount" in argv
    script = argv[argv.index("-c") + 1]
    assert f"upperdir={tmp_path}/ov/upper" in script and script.endswith('exec "$0" "$@"')
    assert argv[-3:] == [
        "/bin/kueue",
        f"--config={tmp_path}/config.yaml",
        f"--kubeconfig={tmp_path}/kc",
    ]


def test_service_dns_names() -> None:
    assert service_dns_names("kueue-webhook-service", "kueue-system") == [
        "kueue-webhook-service.kueue-system.svc",
        "kueue-webhook-service.kueue-system.svc.cluster.local",
    ]
