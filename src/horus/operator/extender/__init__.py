"""The kube-scheduler extender: plain Pods that ask for ``horus.io/gpu-core`` /
``horus.io/gpu-memory`` are placed by the stock kube-scheduler, with Horus deciding the GPU.

Why an extender as well as the operator: not every GPU workload is a DLJob. A Deployment, a
Job or a notebook pod only has to request the Horus resources and carry its graph profile in
the annotation ``horus.io/graph-profile``; the kube-scheduler (configured with
``manifests/scheduler/horus-extender-config.yaml``) then calls this server for three verbs,
with the JSON shapes of ``k8s.io/kube-scheduler/extender/v1``:

``filter``  ``ExtenderArgs{Pod, Nodes|NodeNames}`` → ``ExtenderFilterResult{NodeNames|Nodes,
            FailedNodes, FailedAndUnresolvableNodes, Error}``. A node passes when one of its
            GPUs takes the pod under the Horus policy; every other node gets the placement
            core's sentence ("no GPU with 40.0 GiB free; best candidate …"), which the
            scheduler puts into the pod's ``PodScheduled`` condition — no silent Pending.
``prioritize`` the same args → ``[{Host, Score}]``, 0..10 (``MaxExtenderPriority``): the
            predicted rise in summed normalised speed on the node's best GPU, × 10.
``bind``    ``ExtenderBindingArgs{PodName, PodNamespace, PodUID, Node}`` →
            ``ExtenderBindingResult{Error}``: choose the GPU on that node, write the signed
            ``horus.io/gpu-assignment`` and ``horus.io/predicted`` on the pod, *then* create
            the ``Binding`` — so a crash between the two leaves a record, never an
            unaccounted pod on a GPU.

Every decision starts from the live cluster (:mod:`horus.operator.livestate`: node
inventories, DLJob placements and pods' assignments), the same rules the operator schedules
with, so the two placers see one truth. Binds are serialised in-process and re-checked after
the assignment is written (another placer may have raced us); a lost race rolls the
annotation back and reports an error, and the scheduler retries.

Request bodies are validated: a malformed one gets HTTP 400 with ``{"Error": …}`` naming the
field; nothing a client sends can stop the server. Go's ``encoding/json`` matches field
names case-insensitively and ignores unknown ones, and so does this server.
"""

from __future__ import annotations

from horus.operator.extender.decisions import Extender, NodeVerdict
from horus.operator.extender.demand import PodDemand, cached_profile, pod_demand
from horus.operator.extender.http import ExtenderServer
from horus.operator.extender.settings import MAX_EXTENDER_PRIORITY, REASON_PREFIX, ExtenderSettings
from horus.operator.extender.source import ClusterSource, KubeClusterSource
from horus.operator.extender.wire import (
    BindingArgs,
    ExtenderArgs,
    RequestError,
    parse_binding_args,
    parse_extender_args,
)

__all__ = [
    "MAX_EXTENDER_PRIORITY",
    "REASON_PREFIX",
    "BindingArgs",
    "ClusterSource",
    "Extender",
    "ExtenderArgs",
    "ExtenderServer",
    "ExtenderSettings",
    "KubeClusterSource",
    "NodeVerdict",
    "PodDemand",
    "RequestError",
    "cached_profile",
    "parse_binding_args",
    "parse_extender_args",
    "pod_demand",
]
