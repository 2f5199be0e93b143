"""The Horus operator: a watch-fed view of the cluster and one leader-elected reconcile loop
that admits, places, binds and follows DLJobs (kopf runs the process), plus the kube-scheduler
extender. The only layer (with the node roles) that talks to Kubernetes."""
