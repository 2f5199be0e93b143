"""The one Kubernetes access layer of Horus' roles (operator, extender, device plugin, agent,
dev cluster): how a client is made from a kubeconfig or the pod's ServiceAccount, how the
apiserver's errors are read, and how an Event is posted.

Why a layer of its own: one copy of these for every role, so kubeconfig loading, Event
building and conflict errors cannot drift apart between roles. It sits below the roles and above the pure core (scheduler, predictor, api), which never
import the Kubernetes client.
"""
