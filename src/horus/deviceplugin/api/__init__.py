"""Generated stubs of the kubelet device-plugin API v1beta1 (``api.proto``); regenerate them
with ``tools/gen-deviceplugin-stubs.sh``, never edit them by hand."""
