"""Horus: an interference-aware, prediction-based GPU-sharing scheduler extension for Kubernetes.

The package is layered (each layer imports only the ones below it, enforced by import-linter):
``cli`` → ``operator``/``deviceplugin``/``agent``/``devcluster`` → ``sim`` → ``scheduler`` →
``predictor`` → ``api`` → ``common``. The predictor and scheduling core never import Kubernetes,
so the simulator and the operator share them unchanged.
"""

__version__ = "0.1.0"
