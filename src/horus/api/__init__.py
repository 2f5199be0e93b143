"""Wire types Horus components exchange through Kubernetes objects, with their validation.

No Kubernetes client here: these are plain typed values and their JSON forms, so the
simulator, the operator and the node side agree on one definition of each annotation.
"""
