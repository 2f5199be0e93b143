"""Generated stubs of the kubelet plugin-registration v1 and DRA v1 APIs
(``pluginregistration_v1.proto``, ``dra_v1.proto`` from k8s.io/kubelet v0.37.2); regenerate them
with ``tools/gen-dra-stubs.sh``, never edit them by hand."""
