"""Helpers and fixtures for the packaging e2e tests: helm and kubectl against the session's real cluster.

The session ``cluster`` fixture (tests/conftest.py) is shared with other tiers, so these tests
leave it as they found it: what they install they remove, and the DLJob CRD (which other tests
apply themselves, but may expect) is re-applied after ``kubectl delete -k`` removed it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "horus"
NAMESPACE = "horus-system"
ALERT_RULES = ROOT / "manifests" / "prometheus" / "horus-alerts.rules.yaml"


@pytest.fixture(scope="session")
def helm(cluster: Any) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(
        *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(cluster.bin_dir / "helm"), *args],
            env={**cluster.env(), "HELM_CACHE_HOME": str(Path(cluster.kubeconfig).parent / "helm")},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed: {proc.stderr}")
        return proc

    return run


def wait_namespace_gone(cluster: Any, name: str = NAMESPACE, timeout: str = "90s") -> None:
    """Delete ``name`` (if present) and wait until the namespace controller has removed it."""
    cluster.kubectl("delete", "namespace", name, "--ignore-not-found", f"--timeout={timeout}")


def adopt_crd(cluster: Any, release: str = "horus", namespace: str = NAMESPACE) -> None:
    """Hand an existing DLJob CRD to a Helm release, as docs/operations.md's "Upgrade" says: the chart
    renders the CRD as a template, and Helm refuses to take over an object it does not own
    (other tests apply the CRD with kubectl)."""
    crd = "crd/dljobs.horus.io"
    if cluster.kubectl("get", crd, "--ignore-not-found", "-o", "name").stdout.strip():
        cluster.kubectl("label", crd, "app.kubernetes.io/managed-by=Helm", "--overwrite")
        cluster.kubectl(
            "annotate",
            crd,
            f"meta.helm.sh/release-name={release}",
            f"meta.helm.sh/release-namespace={namespace}",
            "--overwrite",
        )


def write_fast_alert_rules(path: Path, interval: str, hold: str = "10s") -> dict[str, Any]:
    """The shipped alert rules, expressions unchanged, evaluated every ``interval`` and firing
    after ``hold`` instead of their minutes-long ``for:``, written to ``path`` for a test's
    Prometheus; returns them."""
    import yaml

    rules = yaml.safe_load(ALERT_RULES.read_text())
    for group in rules["groups"]:
        group["interval"] = interval
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = hold
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    out: dict[str, Any] = rules
    return out
