"""The kubelet device plugin (v1beta1, gRPC on unix sockets) that advertises fractional GPUs
(``horus.io/gpu-core``, ``horus.io/gpu-memory``) and hands each container its GPU and share."""
