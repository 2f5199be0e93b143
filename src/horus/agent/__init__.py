"""The node sharing agent: GPU backends (NVML, simulated), MPS control, the memory watchdog and
the Prometheus exporter."""
