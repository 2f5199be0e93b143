"""A real local Kubernetes control plane for development, the demo and the test suites.

No Docker engine or kind exists here, so Horus starts the real binaries (etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, kwok) as plain processes on
127.0.0.1, built once from the Kubernetes Go module by ``tools/controlplane/build.sh``.
Nodes are either kwok's (Node objects only, thousands of them cheaply) or real kubelets of
the same version with their own containerd (``realnodes``; root), on which Horus' own images
(``images``, built from the Dockerfiles without a Docker engine) and chart (``chart``) run as
real containers. Only the GPUs are simulated.
"""
