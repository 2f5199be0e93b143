"""Node-side pieces shared by the two node roles that hand out GPU shares.

The device plugin (:mod:`horus.deviceplugin`) and the DRA driver (:mod:`horus.dra`) are
siblings and never import each other, yet both must see the same GPUs (:mod:`.gpus`) and hand
a container exactly the same thing for the same share (:mod:`.grant`): a workload must not
behave differently depending on which path placed it. So those pieces live one layer down.
The agent reads a claim's share with the driver's own checks (:mod:`.claims`), so on the dra
path it enforces exactly what Prepare handed out.
"""
