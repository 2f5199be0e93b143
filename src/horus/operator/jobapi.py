"""What the reconciler asks of the apiserver, as a small protocol with one real implementation.

Why a protocol: the reconcile pass is the product's core loop, and it was only testable on a
real control plane. With every call it makes behind :class:`JobApi`, the pass runs in unit
tests against an in-memory store (``tests/unit/operator/fakeapi.py``) that keeps
resourceVersions, refuses stale writes with :class:`~horus.kube.errors.Conflict` and binds
pods as the apiserver does; :class:`KubeJobApi` is the same protocol on the real apiserver,
and the integration tests cover it.

Every list and read is decoded from the raw response (``horus.api.raw``: ten times faster
than the client's models, and depth-tolerant), and every refusal is one of three errors:
:class:`Conflict` (stale or vanished: retry next pass), :class:`PodRejected` (the apiserver
will never create this pod), or the client's own exception (the apiserver is unreachable:
retry).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from horus.api.raw import discard, read_items, read_object
from horus.common import constants as c
from horus.common.errors import HorusError
from horus.kube.errors import Conflict, api_message
from horus.kube.events import post_event

if TYPE_CHECKING:
    from horus.operator.view import ClusterView

__all__ = [
    "REASON_POD_NAME_TAKEN",
    "JobApi",
    "KubeJobApi",
    "PodNameTaken",
    "PodRejected",
    "ProfileUnavailable",
    "bound_pod",
    "taken_message",
]

_ACTIVE = "status.phase!=Succeeded,status.phase!=Failed"
#: How long a pass waits for the view's first LISTs before it fails (and is retried).
_SYNC_WAIT_S = 60.0


def bound_pod(
    pod: Mapping[str, Any], node: str, annotations: Mapping[str, str] | None
) -> dict[str, Any]:
    """A copy of ``pod`` as a Binding to ``node`` leaves it (the view's assumed copy, until the
    watch delivers the real one); ``pod`` itself is not changed."""
    meta = dict(pod.get("metadata") or {})
    if annotations:
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    return {**pod, "metadata": meta, "spec": {**(pod.get("spec") or {}), "nodeName": node}}


class PodRejected(HorusError):
    """The apiserver refused a replica pod for good (HTTP 4xx other than 409/429)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status

    @property
    def wait_reason(self) -> str | None:
        """The condition reason to wait under when the refusal may pass later, else None
        (the template's fault): a ResourceQuota (``PodQuotaExceeded``, until the namespace's
        usage drops), or a service account that does not exist yet
        (``ServiceAccountMissing``: a new namespace gets its ``default`` a moment after it is
        created, and the ServiceAccount admission plugin refuses pods until then; a named one
        may be created after the job, as a profile ConfigMap may), or a PriorityClass that
        does not exist (``PriorityClassNotFound``: deleted after the job was admitted; it may
        be created again)."""
        if self.status != 403:
            return None
        text = str(self)
        if "exceeded quota" in text:
            return "PodQuotaExceeded"
        if "error looking up service account" in text:
            return "ServiceAccountMissing"
        if "no PriorityClass with name" in text:  # the Priority admission plugin
            return "PriorityClassNotFound"  # deleted since the job was admitted
        return None


#: The condition reason of a job one of whose replica pod names a foreign pod holds.
REASON_POD_NAME_TAKEN = "PodNameTaken"


class PodNameTaken(PodRejected):
    """A replica's pod name is held by a pod Horus did not create for this job (a tenant's
    StatefulSet ``foo`` beside DLJob ``foo``, a pod made in advance): Horus neither adopts
    nor deletes it, and the job waits until the name is free."""

    def __init__(self, namespace: str, name: str) -> None:
        super().__init__(409, taken_message(namespace, [name]))

    @property
    def wait_reason(self) -> str | None:
        return REASON_POD_NAME_TAKEN


def taken_message(namespace: str, names: list[str]) -> str:
    """Why a job waits for its replica pod names (:class:`PodNameTaken`)."""
    which = ", ".join(f"{namespace}/{n}" for n in names[:4]) + (
        f" (+{len(names) - 4} more)" if len(names) > 4 else ""
    )
    one = len(names) == 1
    return (
        f"{'pod' if one else 'pods'} {which} {'exists' if one else 'exist'} but Horus did not "
        f"create {'it' if one else 'them'} for this DLJob (a job's pod names the job as its "
        f"controller ownerReference and carries the {c.ANNOTATION_GPU_ASSIGNMENT} annotation "
        f"only Horus may set); Horus neither adopts nor deletes {'it' if one else 'them'}: the "
        f"job waits, holding no GPU, until {'the name is' if one else 'the names are'} free"
    )


class ProfileUnavailable(HorusError):
    """The job's profile ConfigMap is missing or unreadable (may appear later: stay Pending)."""


class JobApi(Protocol):
    """The apiserver calls of one reconcile pass (objects are the apiserver's JSON dicts)."""

    def list_pods(self) -> list[dict[str, Any]]: ...

    def list_dljobs(self) -> list[dict[str, Any]]: ...

    def list_nodes(self) -> list[dict[str, Any]]: ...

    def patch_dljob_status(
        self, namespace: str, name: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """JSON merge patch of the status subresource (``Conflict`` on 404/409)."""
        ...

    def create_pod(
        self, namespace: str, manifest: Mapping[str, Any], dry_run: bool = False
    ) -> dict[str, Any] | None:
        """The created pod; None when one of that name exists (``PodRejected`` on 4xx)."""
        ...

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def bind(
        self,
        namespace: str,
        name: str,
        node: str,
        uid: str = "",
        annotations: Mapping[str, str] | None = None,
    ) -> bool:
        """Bind; False when already bound (409); ``Conflict`` when the pod vanished. ``uid``:
        only the pod with this UID (a precondition); ``annotations`` go onto the pod with
        ``spec.nodeName``, in the same write (the Binding's ``metadata.annotations``)."""
        ...

    def delete_pod(self, namespace: str, name: str, uid: str = "") -> None:
        """Delete with the pod's own grace period; ``uid``: only the pod with this UID (a
        precondition: a pod re-created under the name since it was read is left alone)."""
        ...

    def list_priority_classes(self) -> list[dict[str, Any]]: ...

    def record_pod_claims(
        self,
        namespace: str,
        name: str,
        uid: str,
        expected: Sequence[Mapping[str, Any]] | None,
        statuses: Sequence[Mapping[str, Any]],
    ) -> None:
        """Set the pod's ``status.resourceClaimStatuses`` to ``statuses`` only while it is
        the pod ``uid`` and the list is still ``expected`` (None: absent) — a JSON patch that
        tests both first; ``Conflict`` when either changed or the pod is gone."""
        ...

    # --- the DRA path: one ResourceClaim per replica ---------------------------------------
    def list_resource_claims(self) -> list[dict[str, Any]]:
        """Every ResourceClaim (``resource.k8s.io/v1``), Horus' and tenants' alike."""
        ...

    def list_resource_slices(self) -> list[dict[str, Any]]:
        """Every ResourceSlice: on the DRA path the GPUs come from the Horus driver's slices
        (no device plugin writes the node inventory annotation there)."""
        ...

    def create_resource_claim(
        self, namespace: str, manifest: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """The created claim; None when one of that name exists (``PodRejected`` on 4xx)."""
        ...

    def read_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def delete_resource_claim(self, namespace: str, name: str, uid: str = "") -> None:
        """Delete; ``uid``: only the claim with this UID (a precondition, as for pods)."""
        ...

    def configmap_data(self, namespace: str, name: str) -> dict[str, str]:
        """A ConfigMap's data (``ProfileUnavailable`` when missing or unreadable)."""
        ...

    def post_event(self, body: Mapping[str, Any]) -> None: ...


class KubeJobApi:
    """:class:`JobApi` on the real apiserver (a ``kubernetes.client.ApiClient``).

    With a :class:`~horus.operator.view.ClusterView` the lists are read from its watch-fed
    copy (no LIST per pass), and every write's answer goes into the copy at once, so the next
    pass sees this operator's own writes even before their watch events arrive."""

    def __init__(self, api_client: Any, view: ClusterView | None = None) -> None:
        from kubernetes import client

        self.core: Any = client.CoreV1Api(api_client)
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.view = view

    @classmethod
    def from_clients(cls, core_v1: Any, custom: Any) -> KubeJobApi:
        """Over given ``CoreV1Api``/``CustomObjectsApi`` objects (tests fake the transport)."""
        api = cls.__new__(cls)
        api.core, api.custom, api.view = core_v1, custom, None
        return api

    def _synced_view(self) -> ClusterView | None:
        """The view, once its first LISTs are in (a pass on an empty copy would see free GPUs
        that are not); None without one."""
        view = self.view
        if view is not None and not view.wait_synced(_SYNC_WAIT_S):
            raise HorusError("the watch-fed view has not finished its first LIST yet")
        return view

    def list_pods(self, active_only: bool = False) -> list[dict[str, Any]]:
        """Every pod (``active_only``: not Succeeded or Failed); from the view, pods that do
        not matter to Horus come as their identity only (``horus.operator.view``)."""
        if (view := self._synced_view()) is not None:
            return view.active_pods() if active_only else view.pods.items()
        selector = {"field_selector": _ACTIVE} if active_only else {}
        return read_items(self.core.list_pod_for_all_namespaces(_preload_content=False, **selector))

    def list_dljobs(self) -> list[dict[str, Any]]:
        if (view := self._synced_view()) is not None:
            return view.dljobs.items()
        return read_items(
            self.custom.list_cluster_custom_object(
                c.API_GROUP, c.API_VERSION, c.DLJOB_PLURAL, _preload_content=False
            )
        )

    def list_nodes(self) -> list[dict[str, Any]]:
        if (view := self._synced_view()) is not None:
            return view.nodes.items()
        return read_items(self.core.list_node(_preload_content=False))

    def patch_dljob_status(
        self, namespace: str, name: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self.custom.patch_namespaced_custom_object_status(
                c.API_GROUP,
                c.API_VERSION,
                namespace,
                c.DLJOB_PLURAL,
                name,
                dict(body),
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                raise Conflict(
                    f"DLJob {namespace}/{name} changed or vanished (HTTP {exc.status}); "
                    "retrying next pass"
                ) from None
            raise
        out = read_object(resp)
        if self.view is not None:
            self.view.dljobs.observe(out)
        return out

    def create_pod(
        self, namespace: str, manifest: Mapping[str, Any], dry_run: bool = False
    ) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        extra = {"dry_run": "All"} if dry_run else {}
        try:
            resp = self.core.create_namespaced_pod(
                namespace, dict(manifest), _preload_content=False, **extra
            )
        except ApiException as exc:
            if exc.status == 409:
                return None
            if exc.status is not None and 400 <= exc.status < 500 and exc.status != 429:
                raise PodRejected(exc.status, api_message(exc)) from None
            raise
        except (ValueError, TypeError) as exc:  # the client could not even encode it
            raise PodRejected(400, f"not a valid pod: {exc}") from None
        out = read_object(resp)
        if self.view is not None and not dry_run:
            self.view.pods.observe(out)
        return out

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return read_object(resp)

    def bind(
        self,
        namespace: str,
        name: str,
        node: str,
        uid: str = "",
        annotations: Mapping[str, str] | None = None,
    ) -> bool:
        from kubernetes.client.exceptions import ApiException

        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        if annotations:
            meta["annotations"] = dict(annotations)
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            # The pod's binding subresource: only there does the apiserver keep the Binding's
            # metadata.uid as a precondition (the top-level bindings resource drops it).
            discard(
                self.core.create_namespaced_pod_binding(
                    name, namespace, body, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            if exc.status == 404:
                raise Conflict(f"pod {namespace}/{name} vanished before binding") from None
            raise
        if self.view is not None:
            self.view.pods.assume(
                f"{namespace}/{name}", lambda pod: bound_pod(pod, node, annotations)
            )
        return True

    def delete_pod(self, namespace: str, name: str, uid: str = "") -> None:
        from kubernetes.client.exceptions import ApiException

        extra = {"body": {"preconditions": {"uid": uid}}} if uid else {}
        try:
            # The pod's own grace period: its GPU is not free until its containers stopped.
            discard(
                self.core.delete_namespaced_pod(name, namespace, _preload_content=False, **extra)
            )
        except ApiException as exc:
            # 409 with a uid: the name now holds another pod, which is not ours to delete.
            if exc.status != 404 and not (uid and exc.status == 409):
                raise

    def record_pod_claims(
        self,
        namespace: str,
        name: str,
        uid: str,
        expected: Sequence[Mapping[str, Any]] | None,
        statuses: Sequence[Mapping[str, Any]],
    ) -> None:
        from kubernetes.client.exceptions import ApiException

        path = "/status/resourceClaimStatuses"
        ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": uid}]
        if expected is None:
            ops.append({"op": "add", "path": path, "value": [dict(s) for s in statuses]})
        else:
            ops.append({"op": "test", "path": path, "value": [dict(s) for s in expected]})
            ops.append({"op": "replace", "path": path, "value": [dict(s) for s in statuses]})
        try:
            discard(
                self.core.patch_namespaced_pod_status(
                    name,
                    namespace,
                    ops,
                    _content_type="application/json-patch+json",
                    _preload_content=False,
                )
            )
        except ApiException as exc:
            if exc.status in (404, 409, 422):
                raise Conflict(f"pod {namespace}/{name}: its claim statuses changed") from None
            raise

    def list_priority_classes(self) -> list[dict[str, Any]]:
        from kubernetes import client

        if (view := self._synced_view()) is not None:
            return view.priority_classes.items()
        api = client.SchedulingV1Api(self.core.api_client)
        return read_items(api.list_priority_class(_preload_content=False))

    def _resource(self) -> Any:
        from kubernetes import client

        return client.ResourceV1Api(self.core.api_client)

    def list_resource_claims(self) -> list[dict[str, Any]]:
        view = self._synced_view()
        if view is not None and view.claims is not None:
            return view.claims.items()
        return read_items(
            self._resource().list_resource_claim_for_all_namespaces(_preload_content=False)
        )

    def list_resource_slices(self) -> list[dict[str, Any]]:
        view = self._synced_view()
        if view is not None and view.slices is not None:
            return view.slices.items()
        return read_items(self._resource().list_resource_slice(_preload_content=False))

    def create_resource_claim(
        self, namespace: str, manifest: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self._resource().create_namespaced_resource_claim(
                namespace, dict(manifest), _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 409:
                return None
            if exc.status is not None and 400 <= exc.status < 500 and exc.status != 429:
                raise PodRejected(exc.status, api_message(exc)) from None
            raise
        out = read_object(resp)
        if self.view is not None and self.view.claims is not None:
            self.view.claims.observe(out)
        return out

    def read_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self._resource().read_namespaced_resource_claim(
                name, namespace, _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return read_object(resp)

    def delete_resource_claim(self, namespace: str, name: str, uid: str = "") -> None:
        from kubernetes.client.exceptions import ApiException

        extra = {"body": {"preconditions": {"uid": uid}}} if uid else {}
        try:
            discard(
                self._resource().delete_namespaced_resource_claim(
                    name, namespace, _preload_content=False, **extra
                )
            )
        except ApiException as exc:
            # 409 with a uid: the name now holds another claim, which is not ours to delete.
            if exc.status != 404 and not (uid and exc.status == 409):
                raise

    def configmap_data(self, namespace: str, name: str) -> dict[str, str]:
        from kubernetes.client.exceptions import ApiException

        try:
            obj = read_object(
                self.core.read_namespaced_config_map(name, namespace, _preload_content=False)
            )
        except ApiException as exc:
            if exc.status == 404:
                raise ProfileUnavailable(
                    f"ConfigMap {namespace}/{name} (spec.profile.configMapRef) does not exist; "
                    "create it with `kubectl create configmap ... "
                    "--from-file=profile.yaml=<horus profile output>`"
                ) from None
            raise ProfileUnavailable(
                f"cannot read ConfigMap {namespace}/{name}: HTTP {exc.status} {exc.reason}"
            ) from None
        data = obj.get("data")
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def post_event(self, body: Mapping[str, Any]) -> None:
        post_event(self.core, body)
