"""Splice the PodSpec schema controller-gen wrote into the DLJob CRD (tools/crdgen/gen.sh).

Why: the DLJob's pod template used to be ``x-kubernetes-preserve-unknown-fields``, so the
apiserver stored anything under it — an object nested thousands of levels deep stopped every
Python client that decoded it (issue: hostile input). With Kubernetes' own PodSpec schema the
apiserver types, bounds and prunes the template like a Pod's, and refuses unparsable quantities
at ``kubectl apply``. Horus' own rules for the template (no nodeName, its scheduler name, no
GPU resources in any container, no PriorityClass of its own — spec.priorityClassName names it —,
list bounds for CEL's cost estimate) are the ``OVERLAY`` here.

The block between the two marker lines of ``manifests/crds/horus.io_dljobs.yaml`` is replaced;
everything else in that file (comments included) is kept byte for byte.

    python3 tools/crdgen/splice.py GENERATED_CRD manifests/crds/horus.io_dljobs.yaml
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

BEGIN = "# BEGIN generated PodSpec"
END = "# END generated PodSpec"
#: Resources a container must not request itself: Horus sets them from spec.gpu.
OWNED = ("horus.io/gpu-core", "horus.io/gpu-memory", "nvidia.com/gpu")
MAX_CONTAINERS = 32
MAX_RESOURCE_NAMES = 64


def _no_gpu(var: str) -> str:
    parts = []
    for kind in ("requests", "limits"):
        names = " || ".join(f"'{r}' in {var}.resources.{kind}" for r in OWNED)
        parts.append(f"(!has({var}.resources.{kind}) || !({names}))")
    return f"!has({var}.resources) || ({' && '.join(parts)})"


RULES: list[dict[str, str]] = [
    {
        "rule": "!has(self.nodeName)",
        "message": "must not be set: Horus chooses the node and binds the pod",
        "fieldPath": ".nodeName",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "!has(self.schedulerName) || self.schedulerName == 'horus-scheduler'",
        "message": "must be empty or horus-scheduler: Horus places DLJob pods itself",
        "fieldPath": ".schedulerName",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": f"self.containers.all(c, {_no_gpu('c')})",
        "message": "must not request " + ", ".join(OWNED) + ": Horus requests GPU resources "
        "for each replica from spec.gpu",
        "fieldPath": ".containers",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": f"!has(self.initContainers) || self.initContainers.all(c, {_no_gpu('c')})",
        "message": "must not request " + ", ".join(OWNED) + ": an init container would hold "
        "GPU resources beyond the replica's share (Horus requests them from spec.gpu)",
        "fieldPath": ".initContainers",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "!has(self.ephemeralContainers)",
        "message": "must not be set in a template (ephemeral containers are added to running pods)",
        "fieldPath": ".ephemeralContainers",
        "reason": "FieldValueForbidden",
    },
    *(
        {
            "rule": f"!has(self.{key})",
            "message": "must not be set in the template: name the class in "
            "spec.priorityClassName (Horus resolves it and puts it on every replica pod)",
            "fieldPath": f".{key}",
            "reason": "FieldValueForbidden",
        }
        for key in ("priorityClassName", "priority")
    ),
]


def overlay(spec: dict[str, Any]) -> dict[str, Any]:
    """Horus' rules on top of Kubernetes' PodSpec schema."""
    props = spec["properties"]
    spec["required"] = ["containers"]
    spec["x-kubernetes-validations"] = RULES
    for name in ("containers", "initContainers"):
        lst = props[name]
        lst["maxItems"] = MAX_CONTAINERS
        item = lst["items"]
        item["properties"]["name"].update(minLength=1, maxLength=63)
        for kind in ("requests", "limits"):
            item["properties"]["resources"]["properties"][kind]["maxProperties"] = (
                MAX_RESOURCE_NAMES
            )
    props["containers"]["minItems"] = 1
    props["containers"]["items"]["required"] = ["name", "image"]
    props["containers"]["items"]["properties"]["image"].update(minLength=1, maxLength=4096)
    props["restartPolicy"] = {
        "type": "string",
        "description": "A job's pods must end; Horus uses Never when this is unset.",
        "enum": ["Never", "OnFailure"],
    }
    props["nodeName"]["maxLength"] = 253
    props["schedulerName"]["maxLength"] = 253
    return spec


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)  # lists indented under their key


def main(generated: str, target: str) -> int:
    crd = yaml.safe_load(Path(generated).read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    block = yaml.dump(
        {"spec": overlay(schema)}, Dumper=_Dumper, sort_keys=True, width=4096
    ).splitlines()
    path = Path(target)
    lines = path.read_text().splitlines()
    begin = next(i for i, ln in enumerate(lines) if ln.strip().startswith(BEGIN))
    end = next(i for i, ln in enumerate(lines) if ln.strip().startswith(END))
    indent = lines[begin][: len(lines[begin]) - len(lines[begin].lstrip())]
    out = lines[: begin + 1] + [indent + ln for ln in block] + lines[end:]
    path.write_text("\n".join(out) + "\n")
    print(f"{target}: spec.template.spec replaced ({len(block)} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
