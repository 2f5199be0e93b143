"""A real local Kubernetes control plane for development, the demo and the test suites.

No Docker engine or kind exists here, so Horus starts the real binaries (etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, kwok) as plain processes on
127.0.0.1, built once from the Kubernetes Go module by ``tools/controlplane/build.sh``.
kwok stands in for kubelets (there are no real nodes or GPUs here); everything else is real.
"""
