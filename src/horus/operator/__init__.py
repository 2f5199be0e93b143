"""The Horus operator: kopf handlers for the DLJob lifecycle and binding, plus the
kube-scheduler extender. The only layer (with the node roles) that talks to Kubernetes."""
