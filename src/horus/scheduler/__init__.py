"""The pure placement core: cluster state, GPU scoring policies, queue. No Kubernetes imports,
so the operator, the scheduler extender and the simulator call it unchanged."""
