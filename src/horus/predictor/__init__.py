"""The Horus predictor: from a model's computation-graph features to GPU utilisation, memory and
co-location slowdown, before the job runs (Horus thesis, Lancaster 2022).

The scheduling core depends only on :mod:`horus.predictor.interface`.
"""
