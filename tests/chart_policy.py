"""One admission policy of the chart, as the integration tests apply it to the shared session
cluster: ``helm template`` on the dra path, its Binding narrowed to the test's namespaces."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from horus.common import constants as c

ROOT = Path(__file__).resolve().parents[1]


def rendered_policy(template: str, namespaces: Sequence[str], *sets: str) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its Binding in ``templates/<template>`` as ``helm
    template`` renders them on the dra path (``sets``: more ``--set`` values), the Binding
    matching only ``namespaces`` (the session cluster is shared with other tests)."""
    helm = Path(os.environ.get("HORUS_BIN_DIR", "")) / "helm"
    if not helm.is_file():
        pytest.skip("helm of the pinned version not found (HORUS_BIN_DIR)")
    extra = [arg for value in sets for arg in ("--set", value)]
    out = subprocess.run(
        [str(helm), "template", "horus", str(ROOT / "charts" / "horus"), "-n",
         c.HORUS_NAMESPACE, "--set", "images.registry=registry.example.com/horus",
         "--set", "gpuSharing.path=dra", *extra, "--show-only", f"templates/{template}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert [d["kind"] for d in docs] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    docs[1]["spec"]["matchResources"] = {
        "namespaceSelector": {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(namespaces)}
            ]
        }
    }
    return docs
