"""The DLJobs the demo submits, and how they are rewritten for real kubelet nodes.

Why a module of its own: what the demo submits is its story — which jobs share GPUs, which
one the watchdog evicts (``HOG``), which one waits (``WAITING``), which one arrives late and is
moved (``LATE``) — and it is pure manifest work (YAML in, YAML out, no cluster), so it is
unit-tested on its own (``tests/unit/devcluster/test_demo_table.py``,
``test_demo_real.py``). The names of those jobs are read by the live table and the closing
hints, so they live here, with the manifests that create them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from horus.common import constants as c
from horus.devcluster.demo_state import DemoOptions
from horus.devcluster.images import IMAGES, reference

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
#: The PriorityClasses the examples and the demo's own jobs name (cluster-scoped; applied first).
PRIORITY_CLASSES = EXAMPLES / "cluster" / "priority-classes.yaml"
#: The example that can never be placed (it asks for more memory than any GPU has).
UNPLACEABLE = "does-not-fit"
#: The demo-only job whose simulated memory use exceeds its share: the watchdog evicts it.
HOG = "memory-hog"
#: The demo-only gang that needs every GPU of the cluster whole: it fits an empty cluster, so
#: it waits in the queue (with the scheduler's reason) behind the jobs already running.
WAITING = "whole-cluster"
#: The job that arrives last, when every GPU is busy, and is moved once the hog's GPU is free.
LATE = "resnet50-movable"
#: The example workload's arguments in the demo: run until demo-down, light on CPU (about
#: 1 % of a core per container), a progress line every 10 s.
WORKLOAD_ARGS = ("--step-sleep", "0.1", "--report-seconds", "10")
#: The full demo's extra jobs from the profile zoo: (name, profile file, replicas).
ZOO_EXTRAS = (
    ("vgg16-train", "vgg16-bs256.yaml", 2),
    ("bert-amp", "bert-base-b32-amp.yaml", 2),
    ("mobilenet-v3", "mobilenet-v3-small-b128.yaml", 2),
    ("resnet50-b64", "resnet50-b64.yaml", 2),
    ("lstm-b64", "lstm-lm-b64.yaml", 2),
)

HOG_MANIFEST = f"""\
# DEMO/TEST ONLY: a job whose simulated GPU memory use (3 GiB) exceeds its explicit share
# (2 GiB). The agent's watchdog (enforcement mps → evict) evicts it after the grace period
# and records horus_enforcement_evictions_total; the annotation is read only by the
# simulated backend, never on real GPUs. Submitted first and at the highest priority so it is
# placed on an idle GPU: placed last it may find only shared GPUs that the interference model
# declines, and the eviction this job exists to show would never happen. It holds its GPU
# whole (corePercent 100), so the eviction leaves that GPU idle: the better place Horus then
# moves a job to.
apiVersion: horus.io/v1alpha1
kind: DLJob
metadata:
  name: {HOG}
spec:
  priorityClassName: horus-example-urgent   # examples/cluster/priority-classes.yaml
  gpu:
    mode: explicit
    corePercent: 100
    memoryMiB: 2048
  profile:
    configMapRef:
      name: bert-base-profile
      key: profile.yaml
  template:
    metadata:
      annotations:
        {c.ANNOTATION_SIMULATED_MEMORY}: "3072"
    spec:
      restartPolicy: Never
      containers:
        - name: hog
          image: busybox:1.36
          command: ["sleep", "infinity"]
"""


def workload(options: DemoOptions) -> tuple[list[Path], list[Path]]:
    """The manifests to apply, in two waves: the memory hog (first: it must get an idle
    GPU before the others fill them), the examples and zoo extras (full demo only) and the
    waiting gang, highest priority first; then the late arrival (``LATE``), once every job
    of the first wave is placed. Generated manifests are written to ``<demo>/jobs``."""
    jobs = options.directory / "jobs"
    jobs.mkdir(exist_ok=True)
    first = [p for p in sorted(EXAMPLES.glob("*.yaml")) if p.stem != LATE]
    late = [EXAMPLES / f"{LATE}.yaml"]
    for name, profile, replicas in () if options.quick else ZOO_EXTRAS:
        path = jobs / f"{name}.yaml"
        doc = zoo_job(name, EXAMPLES / "profiles" / profile, replicas, movable=True)
        path.write_text(yaml.safe_dump(doc))
        first.append(path)
    first.insert(0, _write_hog(jobs))
    first.append(_write_waiting(jobs, options.nodes * options.gpus_per_node))
    # Highest priority first, so the passes place them in the order one queue pass would
    # (a job submitted early is placed early, whatever its priority); the classes they name
    # before them all (a job naming a missing class would wait until it exists).
    first.sort(key=lambda p: -_priority(p))
    first.insert(0, PRIORITY_CLASSES)
    if options.kwok:
        return first, late
    return [on_real_nodes(p, jobs, options.directory) for p in first], [
        on_real_nodes(p, jobs, options.directory) for p in late
    ]


def _write_hog(jobs: Path) -> Path:
    hog = jobs / f"{HOG}.yaml"
    hog_doc = yaml.safe_load(HOG_MANIFEST)
    # Inline profile (not the bert example's ConfigMap): it is submitted before that exists.
    hog_doc["spec"]["profile"] = _zoo_profile(EXAMPLES / "profiles" / "bert-base-bs16.yaml")
    hog.write_text(HOG_MANIFEST.split("apiVersion:", 1)[0] + yaml.safe_dump(hog_doc))
    return hog


def _write_waiting(jobs: Path, gpus: int) -> Path:
    waiting = zoo_job(WAITING, EXAMPLES / "profiles" / "resnet50-b64.yaml", gpus)
    waiting["spec"].update(
        priorityClassName="horus-example-backfill",
        gpu={"mode": "explicit", "corePercent": 100, "memoryMiB": 40960},
    )
    path = jobs / f"{WAITING}.yaml"
    path.write_text(
        f"# DEMO ONLY: {gpus} replicas, each a whole GPU: fits only an empty cluster, so it\n"
        "# waits in the queue with the scheduler's reason (horus_queue_length).\n"
        + yaml.safe_dump(waiting)
    )
    return path


def _zoo_profile(profile_file: Path) -> dict[str, Any]:
    """A zoo profile document as a DLJob's inline ``spec.profile``."""
    profile: dict[str, Any] = yaml.safe_load(profile_file.read_text())
    profile.pop("apiVersion", None)
    profile.pop("kind", None)
    return profile


def zoo_job(name: str, profile_file: Path, replicas: int, movable: bool = False) -> dict[str, Any]:
    """A DLJob for one profile of the zoo (``examples/profiles``), GPU share sized by Horus.
    ``movable``: it may be moved and preempted as ``examples/resnet50-movable.yaml`` may (its
    migration policy, checkpoint volume and the init container that hands the folder to the
    workload's user), checkpointing under ``/checkpoints/<name>``."""
    profile = _zoo_profile(profile_file)
    container: dict[str, Any] = {
        "name": "trainer",
        "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
        "command": ["python", "/workspace/train.py"],
        "args": ["--model", str(profile.get("model", name))],
    }
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    job: dict[str, Any] = {
        "apiVersion": f"{c.API_GROUP}/{c.API_VERSION}",
        "kind": "DLJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "gpu": {"mode": "auto"},
            "profile": profile,
            "template": {"spec": pod},
        },
    }
    if movable:
        example = yaml.safe_load((EXAMPLES / f"{LATE}.yaml").read_text())["spec"]
        folder = str(example["migration"]["checkpointPath"]).rsplit("/", 1)[0]
        job["spec"]["migration"] = {
            **example["migration"],
            "checkpointPath": f"{folder}/{name}",
        }
        template = example["template"]["spec"]
        container["volumeMounts"] = template["containers"][0]["volumeMounts"]
        pod["initContainers"] = template["initContainers"]
        pod["volumes"] = template["volumes"]
    return job


def on_real_nodes(path: Path, jobs: Path, directory: Path) -> Path:
    """The manifest as real nodes can run it, written to ``jobs/real-<name>``. A container of
    another image (the examples name training images this machine cannot pull) becomes the
    example workload image: a training loop that prints the share it received and its step
    rate (examples/workload/train.py), keeping its volume mounts; one that already runs the
    workload image keeps its arguments, and so do init containers of that image (the movable
    jobs' checkpoint-folder owner); other init containers are dropped. A hostPath volume (a
    checkpoint that must outlive the pod) is moved into the demo's folder (``directory``), so
    demo-down removes it with the rest."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        if doc.get("kind") != "DLJob":
            continue
        model = str((doc["spec"].get("profile") or {}).get("model", doc["metadata"]["name"]))
        spec = doc["spec"]["template"].setdefault("spec", {})
        _rewrite_pod(spec, model, directory)
    out = jobs / f"real-{path.name}"
    out.write_text(f"# {short(path)}, as the demo's real nodes run it\n" + yaml.safe_dump_all(docs))
    return out


def _rewrite_pod(spec: dict[str, Any], model: str, directory: Path) -> None:
    """``on_real_nodes`` for one pod template's ``spec``, in place."""
    workload_image = reference(IMAGES["workload"].repository)
    ours = IMAGES["workload"].repository
    containers = [
        _workload_container(container, model, workload_image, ours)
        for container in spec.get("containers") or [{}]
    ]
    spec["containers"] = containers
    inits = [
        {**init, "image": workload_image, "imagePullPolicy": "Never"}
        for init in spec.get("initContainers") or []
        if ours in str(init.get("image", ""))
    ]
    if inits:
        spec["initContainers"] = inits
    else:
        spec.pop("initContainers", None)
    kept = {m.get("name") for c in (*containers, *inits) for m in c.get("volumeMounts") or []}
    volumes = []
    for volume in spec.get("volumes") or []:
        if volume.get("name") not in kept:
            continue
        if "hostPath" in volume:
            where = directory / "hostpath" / volume["hostPath"]["path"].strip("/")
            where.mkdir(parents=True, exist_ok=True)
            volume = {**volume, "hostPath": {"path": str(where), "type": "Directory"}}
        volumes.append(volume)
    if volumes:
        spec["volumes"] = volumes
    else:
        spec.pop("volumes", None)
    spec["terminationGracePeriodSeconds"] = min(
        int(spec.get("terminationGracePeriodSeconds", 2)), 30
    )


def _workload_container(
    container: dict[str, Any], model: str, image: str, ours: str
) -> dict[str, Any]:
    """One container as the workload image runs it (see ``on_real_nodes``)."""
    if ours in str(container.get("image", "")):
        args = list(container.get("args") or [])
        if "--step-sleep" not in args:
            args += ["--step-sleep", WORKLOAD_ARGS[1]]
        return {**container, "image": image, "imagePullPolicy": "Never", "args": args}
    mounts = container.get("volumeMounts")
    return {
        "name": container.get("name", "trainer"),
        "image": image,
        "imagePullPolicy": "Never",
        "args": ["--model", model, *WORKLOAD_ARGS],
        **({"volumeMounts": mounts} if mounts else {}),
    }


def _priority(path: Path) -> int:
    """The highest priority of the DLJobs in a manifest: their classes' values in
    ``PRIORITY_CLASSES`` (0 without a class)."""
    values = {
        d["metadata"]["name"]: int(d["value"])
        for d in yaml.safe_load_all(PRIORITY_CLASSES.read_text())
        if isinstance(d, dict) and d.get("kind") == "PriorityClass"
    }
    docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    return max(
        (
            values.get(str((d.get("spec") or {}).get("priorityClassName")), 0)
            for d in docs
            if d.get("kind") == "DLJob"
        ),
        default=0,
    )


def short(path: Path) -> str:
    """``path`` relative to the checkout when it lies in it (for the demo's output)."""
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)
